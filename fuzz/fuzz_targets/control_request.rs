//! emu-device's control socket (`emu-device/src/control.rs`): one request
//! line from a client, parsed by `parse_request` exactly as the server does,
//! then the workload name a `start` request carries, parsed by the firmware
//! model as the device does before producing. Never panic; a request that
//! parses serialises (as the client sends it) and parses back to itself; a
//! refused line gets an error answer that serialises.
#![no_main]

use hmb_emu_device::control::{parse_request, Request, Response, MAX_LINE};
use hmb_firmware_model::Workload;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    // The server reads lines with read_line: UTF-8 only, at most MAX_LINE.
    let Ok(line) = std::str::from_utf8(bytes) else {
        return;
    };
    if line.len() > MAX_LINE {
        return;
    }
    match parse_request(line) {
        Ok(req) => {
            let text = serde_json::to_string(&req).expect("a parsed request serialises");
            let again = parse_request(&text).expect("a serialised request parses");
            assert_eq!(again, req, "round trip of {text}");
            if let Request::Start { workload, .. } = &req {
                let _ = Workload::parse(workload);
            }
        }
        Err(resp) => {
            assert!(!resp.ok && resp.error.is_some(), "a refused line gets an error answer");
            let text = serde_json::to_string(&resp).expect("an answer serialises");
            let back: Response = serde_json::from_str(&text).expect("an answer parses back");
            assert_eq!(back, resp);
        }
    }
});
