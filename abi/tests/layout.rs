//! One source of truth, checked: the Rust types, the C uapi header and the
//! tables in docs/abi.md must state the same layout, constants and ioctl
//! numbers. A C program is generated from the Rust field list, compiled
//! against the header and run; its output and the doc's tables are compared
//! with what Rust says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use hmb_trace_abi::ioctl::*;
use hmb_trace_abi::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn field_size<T, F>(_: fn(&T) -> &F) -> usize {
    std::mem::size_of::<F>()
}

/// (struct, field, offset, size) for every field of every ABI struct.
macro_rules! fields {
    ($($t:ident { $($f:ident),* $(,)? })*) => {{
        let mut v: Vec<(&'static str, &'static str, usize, usize)> = Vec::new();
        $($(
            v.push((stringify!($t), stringify!($f), std::mem::offset_of!($t, $f), field_size(|s: &$t| &s.$f)));
        )*)*
        v
    }};
}

fn rust_fields() -> Vec<(&'static str, &'static str, usize, usize)> {
    fields! {
        hmb_ring_hdr { magic, version_major, version_minor, hdr_size, max_record, ring_size, epoch, reserved0,
                       head, flags, reserved1, next_seq, dropped_records, overflow_events, reserved2,
                       tail, reserved3 }
        hmb_record_hdr { length, opcode, flags, seq, timestamp_ns, source, reserved }
        hmb_advert { magic, state, generation, slice_offset, slice_len, reserved }
        hmb_nvme_trace_id { magic, abi_major, abi_minor, fid, reserved0, max_ring_size, reserved1 }
        hmb_device_block { magic, reserved0, ack_generation, reserved }
        hmb_trace_info { abi_major, abi_minor, hdr_size, ring_size, mmap_len, epoch, flags, nr_chunks }
        hmb_trace_chunk { index, reserved, offset, len }
        hmb_trace_stats { head, tail, dropped_records, overflow_events, freeze_count, irq_count, tail_publishes, epoch }
    }
}

fn rust_sizes() -> BTreeMap<&'static str, usize> {
    BTreeMap::from([
        ("hmb_ring_hdr", std::mem::size_of::<hmb_ring_hdr>()),
        ("hmb_record_hdr", std::mem::size_of::<hmb_record_hdr>()),
        ("hmb_advert", std::mem::size_of::<hmb_advert>()),
        ("hmb_nvme_trace_id", std::mem::size_of::<hmb_nvme_trace_id>()),
        ("hmb_device_block", std::mem::size_of::<hmb_device_block>()),
        ("hmb_trace_info", std::mem::size_of::<hmb_trace_info>()),
        ("hmb_trace_chunk", std::mem::size_of::<hmb_trace_chunk>()),
        ("hmb_trace_stats", std::mem::size_of::<hmb_trace_stats>()),
    ])
}

fn rust_constants() -> BTreeMap<&'static str, u64> {
    BTreeMap::from([
        ("HMB_RING_MAGIC", HMB_RING_MAGIC as u64),
        ("HMB_RING_VERSION_MAJOR", HMB_RING_VERSION_MAJOR as u64),
        ("HMB_RING_VERSION_MINOR", HMB_RING_VERSION_MINOR as u64),
        ("HMB_TRACE_DEV_ABI_MAJOR", HMB_TRACE_DEV_ABI_MAJOR as u64),
        ("HMB_TRACE_DEV_ABI_MINOR", HMB_TRACE_DEV_ABI_MINOR as u64),
        ("HMB_RING_HDR_SIZE", HMB_RING_HDR_SIZE as u64),
        ("HMB_RING_MIN_SIZE", HMB_RING_MIN_SIZE as u64),
        ("HMB_RING_MAX_SIZE", HMB_RING_MAX_SIZE),
        ("HMB_RING_ALIGN", HMB_RING_ALIGN as u64),
        ("HMB_RING_FLAG_OVERFLOWED", HMB_RING_FLAG_OVERFLOWED as u64),
        ("HMB_RING_FLAG_FROZEN", HMB_RING_FLAG_FROZEN as u64),
        ("HMB_RING_FLAGS_KNOWN", HMB_RING_FLAGS_KNOWN as u64),
        ("HMB_RECORD_HDR_SIZE", HMB_RECORD_HDR_SIZE as u64),
        ("HMB_RECORD_MAX_SIZE", HMB_RECORD_MAX_SIZE as u64),
        ("HMB_RECORD_MAX_PAYLOAD", HMB_RECORD_MAX_PAYLOAD as u64),
        ("HMB_RECORD_FLAG_PAD", HMB_RECORD_FLAG_PAD as u64),
        ("HMB_RECORD_FLAG_MARKER", HMB_RECORD_FLAG_MARKER as u64),
        ("HMB_ADVERT_MAGIC", HMB_ADVERT_MAGIC as u64),
        ("HMB_ADVERT_OFFSET", HMB_ADVERT_OFFSET),
        ("HMB_TRACE_SLICE_ALIGN", HMB_TRACE_SLICE_ALIGN),
        ("HMB_ADVERT_STATE_NONE", HMB_ADVERT_STATE_NONE as u64),
        ("HMB_ADVERT_STATE_READY", HMB_ADVERT_STATE_READY as u64),
        ("HMB_NVME_FID_TRACE", HMB_NVME_FID_TRACE as u64),
        ("HMB_NVME_ID_VS_OFFSET", HMB_NVME_ID_VS_OFFSET),
        ("HMB_NVME_ID_MAGIC", HMB_NVME_ID_MAGIC),
        ("HMB_DEVICE_MAGIC", HMB_DEVICE_MAGIC as u64),
        ("HMB_DEVICE_OFFSET", HMB_DEVICE_OFFSET),
        ("HMB_TRACE_IOC_MAGIC", HMB_TRACE_IOC_MAGIC as u64),
        ("HMB_TRACE_IOC_GET_INFO", HMB_TRACE_IOC_GET_INFO as u64),
        ("HMB_TRACE_IOC_PUBLISH_TAIL", HMB_TRACE_IOC_PUBLISH_TAIL as u64),
        ("HMB_TRACE_IOC_REINIT", HMB_TRACE_IOC_REINIT as u64),
        ("HMB_TRACE_IOC_GET_STATS", HMB_TRACE_IOC_GET_STATS as u64),
        ("HMB_TRACE_IOC_GET_CHUNK", HMB_TRACE_IOC_GET_CHUNK as u64),
    ])
}

/// Everything Rust says, as `key -> value` lines the C program also prints.
fn rust_facts() -> BTreeMap<String, u64> {
    let mut facts = BTreeMap::new();
    for (name, size) in rust_sizes() {
        facts.insert(format!("sizeof {name}"), size as u64);
    }
    for (s, f, off, size) in rust_fields() {
        facts.insert(format!("offsetof {s}.{f}"), off as u64);
        facts.insert(format!("sizeof {s}.{f}"), size as u64);
    }
    for (name, value) in rust_constants() {
        facts.insert(format!("const {name}"), value);
    }
    facts
}

fn c_program() -> String {
    let mut src = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <linux/nvme_hmb_trace.h>\n\
         #define P(k, v) printf(\"%s %llu\\n\", k, (unsigned long long)(v))\nint main(void) {\n",
    );
    for name in rust_sizes().keys() {
        src += &format!("P(\"sizeof {name}\", sizeof(struct {name}));\n");
    }
    for (s, f, _, _) in rust_fields() {
        src += &format!("P(\"offsetof {s}.{f}\", offsetof(struct {s}, {f}));\n");
        src += &format!("P(\"sizeof {s}.{f}\", sizeof(((struct {s} *)0)->{f}));\n");
    }
    for name in rust_constants().keys() {
        src += &format!("P(\"const {name}\", {name});\n");
    }
    src + "return 0;\n}\n"
}

#[test]
fn c_header_matches_rust() {
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&c, c_program()).unwrap();
    let include = root().join("kmod/include/uapi");
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(&include)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("a C compiler (cc) is needed for the layout check");
    assert!(
        out.status.success(),
        "C build failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    assert!(run.status.success());
    let mut c_facts = BTreeMap::new();
    for line in String::from_utf8(run.stdout).unwrap().lines() {
        let (key, value) = line.rsplit_once(' ').unwrap();
        c_facts.insert(key.to_string(), value.parse::<u64>().unwrap());
    }
    let rust = rust_facts();
    assert_eq!(c_facts.len(), rust.len());
    for (key, value) in &rust {
        assert_eq!(c_facts.get(key), Some(value), "C and Rust disagree on {key}");
    }
}

fn parse_number(text: &str) -> u64 {
    let text = text.trim().trim_matches('`');
    if let Some(hex) = text.strip_prefix("0x") {
        u64::from_str_radix(&hex.replace('_', ""), 16).unwrap_or_else(|_| panic!("bad hex {text}"))
    } else {
        text.replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("bad number {text}"))
    }
}

fn table_cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().trim_matches('`').to_string())
        .collect()
}

/// Layout tables (`### struct NAME (N bytes)`) and the constants table
/// (`| NAME | value |` rows under `## Constants`) of docs/abi.md, as facts.
fn doc_facts() -> BTreeMap<String, u64> {
    let doc = std::fs::read_to_string(root().join("docs/abi.md")).unwrap();
    let mut facts = BTreeMap::new();
    let mut current: Option<String> = None;
    let mut in_constants = false;
    for line in doc.lines() {
        if let Some(rest) = line.strip_prefix("### struct ") {
            let (name, size) = rest.split_once(" (").unwrap();
            let size = size.trim_end_matches(" bytes)");
            facts.insert(format!("sizeof {name}"), parse_number(size));
            current = Some(name.to_string());
            continue;
        }
        if line.starts_with("## ") || line.starts_with("### ") {
            current = None;
            in_constants = line.trim() == "## Constants";
            continue;
        }
        if !line.starts_with('|') || line.contains("---") {
            continue;
        }
        let cells = table_cells(line);
        if let Some(s) = &current {
            if cells[0] == "offset" {
                continue;
            }
            facts.insert(format!("offsetof {s}.{}", cells[2]), parse_number(&cells[0]));
            facts.insert(format!("sizeof {s}.{}", cells[2]), parse_number(&cells[1]));
        } else if in_constants && cells[0] != "name" {
            facts.insert(format!("const {}", cells[0]), parse_number(&cells[1]));
        }
    }
    facts
}

#[test]
fn abi_doc_matches_rust() {
    let doc = doc_facts();
    let rust = rust_facts();
    for (key, value) in &rust {
        assert_eq!(
            doc.get(key),
            Some(value),
            "docs/abi.md and Rust disagree on {key} (Rust: {value} = {value:#x})"
        );
    }
    for key in doc.keys() {
        assert!(
            rust.contains_key(key),
            "docs/abi.md states {key}, which the Rust crate does not have"
        );
    }
}
