//! Property tests: what the writer writes, the readers read back; no input
//! makes either reader panic.

use pccx::*;
use proptest::prelude::*;

fn header(encoding: &str) -> PccxHeader {
    PccxHeader {
        pccx_lab_version: "prop".into(),
        arch: ArchConfig {
            mac_dims: (8, 16),
            isa_version: "1.1".into(),
            peak_tops: 1.25,
        },
        trace: TraceConfig {
            cycles: 99,
            cores: 4,
            clock_mhz: 800,
        },
        payload: PayloadConfig {
            encoding: encoding.into(),
            ..Default::default()
        },
        format_minor: 0,
    }
}

proptest! {
    #[test]
    fn flatbuf_round_trip(evs in proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u64>(), any::<u32>()), 0..200)) {
        let events: Vec<FlatEvent> = evs.iter().map(|&(c, s, d, t)| FlatEvent { core_id: c, start_cycle: s, duration: d, event_type_id: t }).collect();
        let payload = pccx::flatbuf::encode_events(&events);
        let mut bytes = Vec::new();
        let written = write_pccx(&mut bytes, &header("flatbuf"), &payload).unwrap();
        let f = PccxFile::from_bytes(&bytes, &ReadOptions { strict: true, ..Default::default() }).unwrap();
        prop_assert_eq!(&f.header, &written);
        // Random events may happen to look like a name-table trailer; when
        // they do not, the events come back exactly.
        if let Ok(flat) = f.flat_events() {
            if flat.len() == events.len() {
                prop_assert_eq!(flat.iter().collect::<Vec<_>>(), events);
            }
        }
    }

    #[test]
    fn bincode_round_trip(evs in proptest::collection::vec((any::<u32>(), any::<u64>(), any::<u64>(), "[A-Z_]{0,20}", proptest::option::of("[a-z_]{0,12}")), 0..50), total in any::<u64>()) {
        let events: Vec<NpuEvent> = evs.iter().map(|(c, s, d, t, a)| NpuEvent { core_id: *c, start_cycle: *s, duration: *d, event_type: t.clone(), api_name: a.clone() }).collect();
        let trace = NpuTrace { total_cycles: total, events };
        let payload = trace.encode(BincodeLayout::ApiName).unwrap();
        let mut bytes = Vec::new();
        write_pccx(&mut bytes, &header("bincode"), &payload).unwrap();
        let f = PccxFile::from_bytes(&bytes, &ReadOptions { strict: true, ..Default::default() }).unwrap();
        let (back, _) = f.npu_trace().unwrap();
        prop_assert_eq!(back, trace);
    }

    #[test]
    fn arbitrary_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), prefix in any::<bool>()) {
        if prefix && bytes.len() >= 6 {
            bytes[..6].copy_from_slice(b"PCCX\x01\x01");
        }
        for strict in [false, true] {
            if let Ok(f) = PccxFile::from_bytes(&bytes, &ReadOptions { strict, ..Default::default() }) {
                let _ = f.check_payload();
                let _ = f.npu_trace();
            }
        }
        let _ = NpuTrace::decode(&bytes);
        let _ = FlatEvents::new(&bytes).map(|f| f.names());
    }
}
