//! The analyzer's opcode catalog loader (`--catalog FILE`,
//! `analyzer/src/catalog.rs`): the JSON text as `Catalog::load` parses it,
//! then `Catalog::from_file`'s checks, then what decoding does with an
//! accepted catalog (lookups by opcode and name, field reads from payloads
//! of every length up to the largest record). Never panic; an accepted
//! catalog exports (`to_json`) to a file that loads back to the same
//! catalog.
//!
//! The analyzer's own `catalog.rs` source file is compiled in here rather
//! than the `hmb-trace-analyze` crate, whose other dependencies
//! (perfetto_protos above all) take minutes to build with sancov and ASan;
//! the module is self-contained (serde, thiserror, the firmware model's
//! catalog), so this is the code the analyzer runs, not a copy.
#![no_main]

#[allow(dead_code)]
#[path = "../../analyzer/src/catalog.rs"]
mod catalog;

use catalog::{field_width, read_field, Catalog, CatalogFile};
use hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return;
    };
    let Ok(file) = serde_json::from_str::<CatalogFile>(text) else {
        return;
    };
    let Ok(catalog) = Catalog::from_file(file) else {
        return;
    };
    let exported = catalog.to_json();
    let back: CatalogFile = serde_json::from_str(&exported).expect("an exported catalog parses");
    assert_eq!(back, catalog.file, "export round trip");
    Catalog::from_file(back).expect("an exported catalog loads");
    // Payload bytes: the input again, so field offsets meet real data.
    let payload = &bytes[..bytes.len().min(HMB_RECORD_MAX_PAYLOAD as usize)];
    for op in &catalog.file.opcodes {
        assert_eq!(catalog.get(op.opcode), Some(op), "opcode index");
        let _ = catalog.resolve(&op.name);
        let _ = catalog.name(op.opcode);
        for f in &op.fields {
            for len in [0, 1, 7, 8, 64, payload.len()] {
                let len = len.min(payload.len());
                if read_field(&payload[..len], f).is_some() {
                    let width = field_width(&f.ty).expect("accepted catalogs have known types");
                    assert!(f.offset as usize + width <= len, "a field read past the payload");
                }
            }
            let _ = op.field(payload, &f.name);
        }
    }
});
