//! Any bytes through the .pccx reader and payload decoders: never panic,
//! never allocate beyond the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pccx::{PayloadView, ReadOptions};

fuzz_target!(|data: &[u8]| {
    for strict in [false, true] {
        if let Ok(f) = pccx::PccxFile::from_bytes(data, &ReadOptions { strict, ..Default::default() }) {
            let _ = f.check_payload();
            let _ = f.npu_trace();
            if let Ok(ev) = f.flat_events() {
                let _ = ev.iter().count();
                let _ = ev.names();
            }
        }
    }
    let _ = pccx::NpuTrace::decode(data);
});
