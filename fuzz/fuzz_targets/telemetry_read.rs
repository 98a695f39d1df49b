//! Any bytes as a telemetry log (`nvme telemetry-log` output): the container
//! parser (`TelemetryLog::parse`) and the trace.bin reader over the stream
//! it finds, as the analyzer runs them. Errors only, never a panic; a log
//! that parses keeps its stream inside the data areas it declares, and its
//! Reason Identifier encodes back to the same bytes.
#![no_main]

use hmb_trace_file::telemetry::{TelemetryLog, TelemetryReason, REASON_OFFSET, REASON_SIZE, TELEMETRY_BLOCK};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = hmb_trace_file::telemetry::is_telemetry_trace(data);
    let Ok(log) = TelemetryLog::parse(data) else {
        return;
    };
    assert!(matches!(log.lid, 0x07 | 0x08));
    let last = *log.last_blocks.iter().max().expect("three areas");
    let room = usize::from(last) * TELEMETRY_BLOCK;
    assert!(log.stream.len() <= room, "stream past the data areas");
    assert_eq!(log.stream.len() as u64, log.reason.stream_bytes);
    let at = log.stream.as_ptr() as usize - data.as_ptr() as usize;
    assert_eq!(at, TELEMETRY_BLOCK, "the stream starts at data area 1");
    let reason = &data[REASON_OFFSET..REASON_OFFSET + REASON_SIZE];
    let again = TelemetryReason::decode(reason).expect("parsed above");
    assert_eq!(again, log.reason);
    // Bytes 6..8 are reserved (written 0, not checked on reading).
    let encoded = again.encode();
    assert_eq!((&encoded[..6], &encoded[8..56]), (&reason[..6], &reason[8..56]));
    // What the analyzer does next: read the stream as a trace.
    if let Ok(items) = hmb_trace_file::SliceReader::new(log.stream) {
        for item in items {
            match item {
                Ok(i) => {
                    let _ = i.kind();
                }
                Err(_) => break,
            }
        }
    }
});
