//! The opcode catalog: names, payload layouts and the mapping of records to
//! pccx events. The default is the firmware model's catalog
//! (`hmb_firmware_model::catalog_json`) plus the pccx mapping below; a JSON
//! file in the same schema can replace it (`--catalog`). docs/analyzer.md
//! describes the schema.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Field {
    pub name: String,
    pub offset: u16,
    /// "u8" | "u16" | "u32" | "u64", little-endian.
    #[serde(rename = "type")]
    pub ty: String,
}

/// How records of an opcode become pccx events (`export pccx`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "map", rename_all = "snake_case")]
pub enum PccxMap {
    /// The payload is a pccx flatbuf event (fields core_id, start_cycle,
    /// duration, event_type_id, already in cycles).
    Flatbuf,
    /// One record is one event ending at its timestamp; its duration (ns)
    /// is a payload field. Core = the record's `source`.
    Span { event_type_id: u32, duration_field: String },
    /// Opens a begin/end pair named `pair`, matched on the `key` fields.
    Begin {
        pair: String,
        key: Vec<String>,
        #[serde(default)]
        event_type_from: Option<EventTypeFrom>,
    },
    /// Closes a pair: the event runs from the begin's timestamp to this
    /// record's. Without a begin (lost, or before the trace started) the
    /// duration comes from `duration_field` (ns) if given, else no event.
    End {
        pair: String,
        key: Vec<String>,
        event_type_id: u32,
        #[serde(default)]
        duration_field: Option<String>,
    },
}

/// Event type chosen from a begin record's field value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTypeFrom {
    pub field: String,
    /// Field value (decimal string) to pccx event type id.
    pub map: BTreeMap<String, u32>,
    #[serde(default)]
    pub default: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpcodeEntry {
    pub opcode: u16,
    pub name: String,
    #[serde(default)]
    pub workload: String,
    #[serde(default)]
    pub payload_len: Option<u16>,
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub fields: Vec<Field>,
    #[serde(default)]
    pub about: String,
    #[serde(default)]
    pub pccx: Option<PccxMap>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogFile {
    pub catalog_version: u32,
    pub opcodes: Vec<OpcodeEntry>,
}

/// A loaded catalog with an index by opcode.
#[derive(Debug, Clone)]
pub struct Catalog {
    pub file: CatalogFile,
    index: Vec<Option<u32>>,
}

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read catalog {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("catalog is not valid: {0}")]
    Json(#[from] serde_json::Error),
    #[error("catalog_version {0} is not supported (this build reads 1)")]
    Version(u32),
    #[error("catalog lists opcode {0:#06x} twice")]
    Duplicate(u16),
    #[error("catalog opcode {name}: field {field} has type {ty:?} (expected u8, u16, u32 or u64)")]
    FieldType { name: String, field: String, ty: String },
    #[error("catalog opcode {name}: a pair key needs 1 to {max} fields", max = MAX_PAIR_KEY)]
    PairKey { name: String },
    #[error("catalog opcode {name}: pccx mapping names field {field:?}, which it does not have")]
    MissingField { name: String, field: String },
}

/// Most key fields of a begin/end pair.
pub const MAX_PAIR_KEY: usize = 4;

/// Largest catalog file read, so a wrong path cannot exhaust memory.
const MAX_CATALOG_BYTES: u64 = 16 << 20;

impl Catalog {
    /// The firmware model's catalog with the default pccx mapping.
    pub fn builtin() -> Self {
        let mut file: CatalogFile = match serde_json::from_str(&hmb_firmware_model::catalog_json()) {
            Ok(f) => f,
            Err(_) => CatalogFile {
                catalog_version: 1,
                opcodes: Vec::new(),
            },
        };
        for op in &mut file.opcodes {
            if op.pccx.is_none() {
                op.pccx = default_pccx_map(op);
            }
        }
        Self::from_file(file).unwrap_or_else(|_| Self::empty())
    }

    pub fn empty() -> Self {
        Self {
            file: CatalogFile {
                catalog_version: 1,
                opcodes: Vec::new(),
            },
            index: vec![None; 1 << 16],
        }
    }

    pub fn load(path: &Path) -> Result<Self, CatalogError> {
        use std::io::Read;
        let io = |source| CatalogError::Io {
            path: path.display().to_string(),
            source,
        };
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(MAX_CATALOG_BYTES)
            .read_to_string(&mut text)
            .map_err(io)?;
        Self::from_file(serde_json::from_str(&text)?)
    }

    pub fn from_file(file: CatalogFile) -> Result<Self, CatalogError> {
        if file.catalog_version != 1 {
            return Err(CatalogError::Version(file.catalog_version));
        }
        let mut index = vec![None; 1 << 16];
        for (i, op) in file.opcodes.iter().enumerate() {
            if index[op.opcode as usize].is_some() {
                return Err(CatalogError::Duplicate(op.opcode));
            }
            index[op.opcode as usize] = Some(i as u32);
            for f in &op.fields {
                if field_width(&f.ty).is_none() {
                    return Err(CatalogError::FieldType {
                        name: op.name.clone(),
                        field: f.name.clone(),
                        ty: f.ty.clone(),
                    });
                }
            }
            if let Some(PccxMap::Begin { key, .. } | PccxMap::End { key, .. }) = &op.pccx {
                if key.is_empty() || key.len() > MAX_PAIR_KEY {
                    return Err(CatalogError::PairKey { name: op.name.clone() });
                }
            }
            for needed in pccx_fields(op) {
                if !op.fields.iter().any(|f| f.name == needed) {
                    return Err(CatalogError::MissingField {
                        name: op.name.clone(),
                        field: needed,
                    });
                }
            }
        }
        Ok(Self { file, index })
    }

    pub fn get(&self, opcode: u16) -> Option<&OpcodeEntry> {
        self.index[opcode as usize].map(|i| &self.file.opcodes[i as usize])
    }

    /// Display name: the catalog's, or the hex opcode.
    pub fn name(&self, opcode: u16) -> String {
        match self.get(opcode) {
            Some(op) => op.name.clone(),
            None => format!("{opcode:#06x}"),
        }
    }

    /// An opcode from a name or a number (decimal or 0x-hex).
    pub fn resolve(&self, text: &str) -> Option<u16> {
        if let Some(op) = self.file.opcodes.iter().find(|o| o.name.eq_ignore_ascii_case(text)) {
            return Some(op.opcode);
        }
        parse_number(text).and_then(|n| u16::try_from(n).ok())
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.file).unwrap_or_default()
    }
}

pub fn parse_number(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

pub fn field_width(ty: &str) -> Option<usize> {
    match ty {
        "u8" => Some(1),
        "u16" => Some(2),
        "u32" => Some(4),
        "u64" => Some(8),
        _ => None,
    }
}

/// Read a field from a payload; None when the payload is too short.
pub fn read_field(payload: &[u8], f: &Field) -> Option<u64> {
    let w = field_width(&f.ty)?;
    let at = f.offset as usize;
    let b = payload.get(at..at + w)?;
    let mut v = [0u8; 8];
    v[..w].copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

impl OpcodeEntry {
    pub fn field(&self, payload: &[u8], name: &str) -> Option<u64> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| read_field(payload, f))
    }
}

fn pccx_fields(op: &OpcodeEntry) -> Vec<String> {
    match &op.pccx {
        None => Vec::new(),
        Some(PccxMap::Flatbuf) => ["core_id", "start_cycle", "duration", "event_type_id"]
            .map(String::from)
            .to_vec(),
        Some(PccxMap::Span { duration_field, .. }) => vec![duration_field.clone()],
        Some(PccxMap::Begin {
            key, event_type_from, ..
        }) => {
            let mut v = key.clone();
            v.extend(event_type_from.iter().map(|e| e.field.clone()));
            v
        }
        Some(PccxMap::End {
            key, duration_field, ..
        }) => {
            let mut v = key.clone();
            v.extend(duration_field.iter().cloned());
            v
        }
    }
}

/// The default record-to-pccx mapping of the firmware model's opcodes.
/// NPU records carry pccx events verbatim. SSD commands (fetch→complete)
/// become DMA_READ / DMA_WRITE by NVMe opcode, GC (start→end) a
/// SYSTOLIC_STALL (the drive stalls host work), NAND reads, programs and
/// erases spans of DMA_READ, DMA_WRITE and SYSTOLIC_STALL.
fn default_pccx_map(op: &OpcodeEntry) -> Option<PccxMap> {
    let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let span = |t: u32| PccxMap::Span {
        event_type_id: t,
        duration_field: "latency_ns".into(),
    };
    Some(match op.name.as_str() {
        _ if op.workload == "npu" => PccxMap::Flatbuf,
        "CMD_FETCH" => PccxMap::Begin {
            pair: "cmd".into(),
            key: keys(&["qid", "cid"]),
            event_type_from: Some(EventTypeFrom {
                field: "nvme_opcode".into(),
                map: [("1".to_string(), 3), ("2".to_string(), 2)].into_iter().collect(),
                default: 0,
            }),
        },
        "CMD_COMPLETE" => PccxMap::End {
            pair: "cmd".into(),
            key: keys(&["qid", "cid"]),
            event_type_id: 0,
            duration_field: Some("latency_ns".into()),
        },
        "GC_START" => PccxMap::Begin {
            pair: "gc".into(),
            key: keys(&["victim_block"]),
            event_type_from: None,
        },
        "GC_END" => PccxMap::End {
            pair: "gc".into(),
            key: keys(&["victim_block"]),
            event_type_id: 4,
            duration_field: Some("duration_ns".into()),
        },
        // ssd:causal pairs WEAR_LEVEL with WEAR_LEVEL_END (the migration
        // stalls host work like GC); the independent `ssd` workload's
        // WEAR_LEVEL records have no end and are counted as never ended.
        "WEAR_LEVEL" => PccxMap::Begin {
            pair: "wl".into(),
            key: keys(&["src_block", "dst_block"]),
            event_type_from: None,
        },
        "WEAR_LEVEL_END" => PccxMap::End {
            pair: "wl".into(),
            key: keys(&["src_block", "dst_block"]),
            event_type_id: 4,
            duration_field: Some("duration_ns".into()),
        },
        // A map miss fetches the mapping from the host memory buffer.
        "FTL_MAP_MISS" => PccxMap::Span {
            event_type_id: 2,
            duration_field: "fetch_ns".into(),
        },
        "NAND_READ" => span(2),
        "NAND_PROGRAM" => span(3),
        "NAND_ERASE" => span(4),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_covers_the_firmware_model() {
        let c = Catalog::builtin();
        assert_eq!(c.file.opcodes.len(), hmb_firmware_model::OPCODES.len());
        assert_eq!(c.name(0x0101), "CMD_FETCH");
        assert_eq!(c.name(0x7777), "0x7777");
        assert_eq!(c.resolve("cmd_fetch"), Some(0x0101));
        assert_eq!(c.resolve("0x0102"), Some(0x0102));
        assert_eq!(c.resolve("258"), Some(0x0102));
        assert_eq!(c.resolve("0x10000"), None);
        assert_eq!(c.get(0x0601).unwrap().pccx, Some(PccxMap::Flatbuf));
        // Round trip through the documented JSON schema.
        let again = Catalog::from_file(serde_json::from_str(&c.to_json()).unwrap()).unwrap();
        assert_eq!(again.file, c.file);
    }

    #[test]
    fn bad_catalogs_are_refused() {
        let mut f = Catalog::builtin().file;
        f.opcodes[0].pccx = Some(PccxMap::Span {
            event_type_id: 1,
            duration_field: "nope".into(),
        });
        assert!(matches!(
            Catalog::from_file(f.clone()),
            Err(CatalogError::MissingField { .. })
        ));
        f.opcodes[0].pccx = None;
        f.opcodes[1].opcode = f.opcodes[0].opcode;
        assert!(matches!(Catalog::from_file(f.clone()), Err(CatalogError::Duplicate(_))));
        f.catalog_version = 2;
        assert!(matches!(Catalog::from_file(f), Err(CatalogError::Version(2))));
    }
}
