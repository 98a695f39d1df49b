//! The committed events header is what the generator makes of the catalog
//! the analyzer decodes, and it compiles (its _Static_asserts hold) on the
//! host and for Cortex-M.

use std::path::PathBuf;
use std::process::Command;

use hmb_firmware_sdk::events::{c_header, EventsError};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn committed_header_matches_the_catalog() {
    let want = c_header(&hmb_firmware_model::catalog_json()).unwrap();
    let have = std::fs::read_to_string(root().join("include/hmb_trace_events.h")).unwrap();
    assert!(
        have == want,
        "include/hmb_trace_events.h differs from the catalog: run `cargo xtask firmware-sdk --regen`"
    );
    for op in hmb_firmware_model::catalog::OPCODES {
        assert!(
            have.contains(&format!("#define HMBT_OP_{} 0x{:04x}u", op.name, op.opcode)),
            "{}",
            op.name
        );
        if let Some(len) = op.payload_len {
            let s = format!("hmbt_ev_{}", op.name.to_ascii_lowercase());
            assert!(have.contains(&format!("sizeof(struct {s}) == {len}")), "{s}");
        }
    }
}

#[test]
fn header_compiles_with_its_static_asserts() {
    let mut compilers = vec![("cc", vec![])];
    if !std::env::var("HMB_FWSDK_SKIP_ARM").is_ok_and(|v| v == "1") {
        compilers.push(("arm-none-eabi-gcc", vec!["-mcpu=cortex-m3", "-mthumb"]));
    }
    for (cc, target) in compilers {
        let out = Command::new(cc)
            .args(&target)
            .args(["-std=c11", "-ffreestanding", "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg(format!("-I{}", root().join("compat").display()))
            .arg(format!("-I{}", root().join("../kmod/include/uapi").display()))
            .arg(format!("-I{}", root().join("include").display()))
            .args(["-x", "c", "-fsyntax-only"])
            .arg(root().join("include/hmb_trace_events.h"))
            .output()
            .unwrap_or_else(|e| panic!("{cc}: {e}"));
        assert!(out.status.success(), "{cc}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn one(fields: &str, len: &str) -> String {
    format!(r#"{{"catalog_version":1,"opcodes":[{{"opcode":1,"name":"EV","payload_len":{len},"fields":[{fields}]}}]}}"#)
}

#[test]
fn generator_refuses_what_c_cannot_express() {
    let overlap = one(
        r#"{"name":"a","offset":0,"type":"u32"},{"name":"b","offset":2,"type":"u16"}"#,
        "8",
    );
    assert!(matches!(c_header(&overlap), Err(EventsError::Field { .. })));
    let beyond = one(r#"{"name":"a","offset":4,"type":"u64"}"#, "8");
    assert!(matches!(c_header(&beyond), Err(EventsError::Field { .. })));
    let ty = one(r#"{"name":"a","offset":0,"type":"f32"}"#, "8");
    assert!(matches!(c_header(&ty), Err(EventsError::Field { .. })));
    let name = r#"{"catalog_version":1,"opcodes":[{"opcode":1,"name":"bad name"}]}"#;
    assert!(matches!(c_header(name), Err(EventsError::Name { .. })));
    assert!(matches!(
        c_header(r#"{"catalog_version":2,"opcodes":[]}"#),
        Err(EventsError::Version(2))
    ));
    // A gap and a tail become reserved bytes; the asserts name the offsets.
    let h = c_header(&one(r#"{"name":"a","offset":4,"type":"u16"}"#, "12")).unwrap();
    assert!(
        h.contains("uint8_t _rsvd0[4];\n\tuint16_t a;\n\tuint8_t _rsvd6[6];"),
        "{h}"
    );
    assert!(h.contains("offsetof(struct hmbt_ev_ev, a) == 4"));
}
