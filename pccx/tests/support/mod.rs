//! A second, independent .pccx writer for the tests: pccx-lab's own structs
//! and write routine mirrored with serde + serde_json + the real `bincode`
//! 1.3 crate, and a raw byte builder for malformed files. It shares no code
//! with the crate under test.
#![allow(dead_code)]

use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub struct LabArch {
    pub mac_dims: (u32, u32),
    pub isa_version: String,
    #[serde(default)]
    pub peak_tops: f64,
}

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub struct LabTraceCfg {
    pub cycles: u64,
    pub cores: u32,
    #[serde(default = "thousand")]
    pub clock_mhz: u32,
}

fn thousand() -> u32 {
    1000
}

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub struct LabPayload {
    pub encoding: String,
    pub byte_length: u64,
    #[serde(default)]
    pub checksum_fnv64: Option<u64>,
}

#[derive(Debug, Serialize, Deserialize, Default, Clone)]
pub struct LabHeader {
    pub pccx_lab_version: String,
    #[serde(default)]
    pub arch: LabArch,
    #[serde(default)]
    pub trace: LabTraceCfg,
    #[serde(default)]
    pub payload: LabPayload,
    #[serde(default)]
    pub format_minor: u8,
}

/// The seed-era `NpuEvent` / `NpuTrace`.
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct LabEvent {
    pub core_id: u32,
    pub start_cycle: u64,
    pub duration: u64,
    pub event_type: String,
}

#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct LabNpuTrace {
    pub total_cycles: u64,
    pub events: Vec<LabEvent>,
}

/// Later pccx-lab's event with `api_name`.
#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct LabEventV2 {
    pub core_id: u32,
    pub start_cycle: u64,
    pub duration: u64,
    pub event_type: String,
    #[serde(default)]
    pub api_name: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, Clone, PartialEq)]
pub struct LabNpuTraceV2 {
    pub total_cycles: u64,
    pub events: Vec<LabEventV2>,
}

pub fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// pccx-lab's `PccxFile::write`, step for step.
pub fn lab_write(header: &LabHeader, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"PCCX");
    out.extend_from_slice(&[0x01, 0x01]);
    out.extend_from_slice(&[0x00, 0x00]);
    let json = serde_json::to_vec(header).unwrap();
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(payload);
    out
}

/// A header shaped like pccx-lab's dummy trace generator output.
pub fn lab_header(encoding: &str, payload: &[u8], cycles: u64) -> LabHeader {
    LabHeader {
        pccx_lab_version: "v0.4.0-contention-aware".into(),
        arch: LabArch {
            mac_dims: (32, 32),
            isa_version: "1.1".into(),
            peak_tops: 65.54,
        },
        trace: LabTraceCfg {
            cycles,
            cores: 32,
            clock_mhz: 1000,
        },
        payload: LabPayload {
            encoding: encoding.into(),
            byte_length: payload.len() as u64,
            checksum_fnv64: Some(fnv(payload)),
        },
        format_minor: 1,
    }
}

/// Raw bytes: preamble fields, header bytes and payload exactly as given.
pub fn raw(major: u8, minor: u8, reserved: [u8; 2], header_len: u64, json: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = b"PCCX".to_vec();
    out.extend_from_slice(&[major, minor]);
    out.extend_from_slice(&reserved);
    out.extend_from_slice(&header_len.to_le_bytes());
    out.extend_from_slice(json);
    out.extend_from_slice(payload);
    out
}

/// A file with a JSON header given as text, correct lengths.
pub fn with_json(json: &str, payload: &[u8]) -> Vec<u8> {
    raw(1, 1, [0, 0], json.len() as u64, json.as_bytes(), payload)
}

/// 24-byte flat events, written by hand.
pub fn flat(events: &[(u32, u64, u64, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(c, s, d, t) in events {
        out.extend_from_slice(&c.to_le_bytes());
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&d.to_le_bytes());
        out.extend_from_slice(&t.to_le_bytes());
    }
    out
}

pub fn sample_lab_trace() -> LabNpuTrace {
    LabNpuTrace {
        total_cycles: 4800,
        events: vec![
            LabEvent {
                core_id: 0,
                start_cycle: 0,
                duration: 124,
                event_type: "DMA_READ".into(),
            },
            LabEvent {
                core_id: 0,
                start_cycle: 124,
                duration: 267,
                event_type: "MAC_COMPUTE".into(),
            },
            LabEvent {
                core_id: 7,
                start_cycle: 400,
                duration: 12,
                event_type: "BARRIER_SYNC".into(),
            },
            LabEvent {
                core_id: 31,
                start_cycle: 4000,
                duration: 800,
                event_type: "ÜNKNOWN-ñ".into(),
            },
        ],
    }
}
