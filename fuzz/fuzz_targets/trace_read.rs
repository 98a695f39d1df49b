//! Any bytes through every trace.bin reader: they must agree and never panic.
#![no_main]

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
    let _ = hmb_trace_file::recover_from(data);
});
