//! Any bytes through every trace.bin reader: they must agree and never panic.
#![no_main]

use hmb_trace_file::recover::{recover_from_with_capacity, TailState};
use hmb_trace_file::FileError;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let from_slice: Vec<_> = match hmb_trace_file::SliceReader::new(data) {
        Ok(r) => r
            .map(|i| i.map(|i| (i.offset, i.payload.len())).map_err(|e| e.to_string()))
            .collect(),
        Err(_) => return,
    };
    let mut stream = hmb_trace_file::TraceReader::with_capacity(data, 4096).expect("header parsed above");
    let mut from_stream = Vec::new();
    loop {
        match stream.next_item() {
            Ok(Some(i)) => {
                let _ = i.kind();
                from_stream.push(Ok((i.offset, i.payload.len())));
            }
            Ok(None) => break,
            Err(e) => {
                from_stream.push(Err(e.to_string()));
                break;
            }
        }
    }
    assert_eq!(from_slice, from_stream);
    // Recovery (what the daemon runs before appending) must stop where the
    // readers stop. Its default 1 MiB buffer, allocated per input, was most
    // of this target's time under ASan; 4 KiB also makes every refill path run.
    let rec = recover_from_with_capacity(data, 4096).expect("header parsed above");
    let good = from_slice.iter().take_while(|i| i.is_ok()).count() as u64;
    assert_eq!(rec.items, good);
    let first_error = hmb_trace_file::SliceReader::new(data)
        .expect("parsed above")
        .find_map(|i| i.err());
    match (first_error, &rec.tail) {
        (None, TailState::Clean) => assert_eq!(rec.valid_len, data.len() as u64),
        (Some(FileError::Truncated { offset, .. }), TailState::Torn { offset: at, .. }) => {
            assert_eq!((offset, rec.valid_len), (*at, *at))
        }
        (Some(e), TailState::Corrupt { offset, .. }) => {
            assert_eq!(e.item_offset(), Some(*offset));
            assert_eq!(rec.valid_len, *offset);
        }
        (e, tail) => panic!("readers ended with {e:?}, recovery with {tail:?}"),
    }
});
