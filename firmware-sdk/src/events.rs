//! The C events header (`include/hmb_trace_events.h`) generated from the
//! opcode catalog JSON the analyzer decodes (`hmb_firmware_model::catalog_json`,
//! the schema of docs/analyzer.md): one opcode constant per entry, and for
//! every fixed-length payload a packed struct whose field offsets and size
//! are `_Static_assert`ed against the catalog, plus an inline emitter.
//! `tests/events.rs` fails when the committed header differs from what this
//! makes of the catalog; `cargo xtask firmware-sdk --regen` rewrites it.

use std::fmt::Write as _;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error("catalog is not valid JSON of the analyzer's schema: {0}")]
    Json(#[from] serde_json::Error),
    #[error("catalog_version {0} is not supported (this generator reads 1)")]
    Version(u32),
    #[error("opcode {opcode:#06x}: {name:?} is not a C identifier")]
    Name { opcode: u16, name: String },
    #[error("opcode {name}: field {field:?}: {why}")]
    Field {
        name: String,
        field: String,
        why: &'static str,
    },
}

#[derive(Deserialize)]
struct Catalog {
    catalog_version: u32,
    opcodes: Vec<Opcode>,
}

#[derive(Deserialize)]
struct Opcode {
    opcode: u16,
    name: String,
    #[serde(default)]
    payload_len: Option<u16>,
    #[serde(default)]
    source: String,
    #[serde(default)]
    fields: Vec<Field>,
    #[serde(default)]
    about: String,
}

#[derive(Deserialize)]
struct Field {
    name: String,
    offset: u16,
    #[serde(rename = "type")]
    ty: String,
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn width(ty: &str) -> Option<u16> {
    match ty {
        "u8" => Some(1),
        "u16" => Some(2),
        "u32" => Some(4),
        "u64" => Some(8),
        _ => None,
    }
}

/// Comment text without anything that could close the comment.
fn comment(s: &str) -> String {
    s.replace("*/", "* /")
}

/// The header for a catalog JSON document.
pub fn c_header(catalog_json: &str) -> Result<String, EventsError> {
    let cat: Catalog = serde_json::from_str(catalog_json)?;
    if cat.catalog_version != 1 {
        return Err(EventsError::Version(cat.catalog_version));
    }
    let mut h = String::new();
    let _ = writeln!(
        h,
        "/* SPDX-License-Identifier: MIT OR Apache-2.0 */\n\
/*\n * hmb_trace_events.h - opcodes and payload layouts of the hmb-trace opcode\n\
 * catalog, for firmware that links the C producer (hmb_trace_fw.h).\n *\n\
 * GENERATED from the catalog the analyzer decodes (hmb_firmware_model::\n\
 * catalog_json) by `cargo xtask firmware-sdk --regen`; do not edit.\n\
 * firmware-sdk/tests/events.rs fails when this file and the catalog differ.\n *\n\
 * Payload fields are little-endian on the wire: the structs are exact on a\n\
 * little-endian core (every Cortex-R/M SSD controller); a big-endian core\n\
 * stores each field byte-swapped.\n */\n\
#ifndef HMB_TRACE_EVENTS_H\n#define HMB_TRACE_EVENTS_H\n\n\
#include <stddef.h>\n#include <stdint.h>\n\n#include \"hmb_trace_fw.h\"\n"
    );
    for op in &cat.opcodes {
        if !is_ident(&op.name) {
            return Err(EventsError::Name {
                opcode: op.opcode,
                name: op.name.clone(),
            });
        }
        let _ = writeln!(h, "/* {} */", comment(&op.about));
        let _ = writeln!(h, "#define HMBT_OP_{} 0x{:04x}u\n", op.name, op.opcode);
    }
    for op in &cat.opcodes {
        let Some(len) = op.payload_len else {
            let _ = writeln!(
                h,
                "/* HMBT_OP_{}: variable-length payload, no struct: use hmbt_emit(). */\n",
                op.name
            );
            continue;
        };
        let lower = op.name.to_ascii_lowercase();
        let sname = format!("hmbt_ev_{lower}");
        let _ = writeln!(
            h,
            "/* HMBT_OP_{}: {}; source = {}. */",
            op.name,
            comment(&op.about),
            comment(&op.source)
        );
        let _ = writeln!(h, "struct __attribute__((packed)) {sname} {{");
        let mut at = 0u16;
        let mut fields: Vec<&Field> = op.fields.iter().collect();
        fields.sort_by_key(|f| f.offset);
        let bad = |f: &Field, why| EventsError::Field {
            name: op.name.clone(),
            field: f.name.clone(),
            why,
        };
        for f in &fields {
            let w = width(&f.ty).ok_or_else(|| bad(f, "type is not u8, u16, u32 or u64"))?;
            if !is_ident(&f.name) || f.name.starts_with("_rsvd") {
                return Err(bad(f, "name is not a C identifier"));
            }
            if f.offset < at {
                return Err(bad(f, "overlaps the field before it"));
            }
            if f.offset + w > len {
                return Err(bad(f, "ends beyond payload_len"));
            }
            if f.offset > at {
                let _ = writeln!(h, "\tuint8_t _rsvd{at}[{}];", f.offset - at);
            }
            let _ = writeln!(h, "\tuint{}_t {};", w * 8, f.name);
            at = f.offset + w;
        }
        if len > at {
            let _ = writeln!(h, "\tuint8_t _rsvd{at}[{}];", len - at);
        }
        let _ = writeln!(h, "}};");
        let _ = writeln!(
            h,
            "_Static_assert(sizeof(struct {sname}) == {len}, \"{sname}: catalog payload_len\");"
        );
        for f in &fields {
            let _ = writeln!(
                h,
                "_Static_assert(offsetof(struct {sname}, {}) == {}, \"{sname}.{}: catalog offset\");",
                f.name, f.offset, f.name
            );
        }
        let _ = writeln!(
            h,
            "static inline hmbt_result hmbt_emit_{lower}(hmbt_producer *p, uint32_t source,\n\
\t\t\t\t\t\tconst struct {sname} *ev)\n{{\n\
\treturn hmbt_emit(p, HMBT_OP_{}, source, ev, (uint32_t)sizeof(*ev));\n}}\n",
            op.name
        );
    }
    h.push_str("#endif /* HMB_TRACE_EVENTS_H */\n");
    Ok(h)
}
