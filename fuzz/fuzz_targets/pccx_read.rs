//! Any bytes through the .pccx reader and payload decoders (both bincode
//! layouts, flatbuf): never panic, never allocate beyond the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pccx::bincode_payload::{BincodeEvents, BincodeLayout};
use pccx::{FlatEvents, PayloadView, ReadOptions};

fuzz_target!(|data: &[u8]| {
    for strict in [false, true] {
        if let Ok(f) = pccx::PccxFile::from_bytes(
            data,
            &ReadOptions {
                strict,
                ..Default::default()
            },
        ) {
            let _ = f.check_payload();
            let _ = f.npu_trace();
            if let Ok(ev) = f.flat_events() {
                let _ = ev.iter().count();
                let _ = ev.names();
            }
        }
    }
    // The payload decoders on their own, as a payload.
    let _ = pccx::NpuTrace::decode(data);
    for layout in [BincodeLayout::Seed, BincodeLayout::ApiName] {
        if let Ok(mut events) = BincodeEvents::new(data, layout) {
            let mut n = 0u64;
            while let Some(Ok(_)) = events.next() {
                n += 1;
                assert!(n as usize <= data.len(), "more events than bytes");
            }
            let _ = events.finish();
        }
    }
    if let Ok(ev) = FlatEvents::new(data) {
        assert!(ev.len() <= data.len() / pccx::FLAT_EVENT_SIZE);
        let _ = ev.iter().count();
        let _ = ev.names();
    }
});
