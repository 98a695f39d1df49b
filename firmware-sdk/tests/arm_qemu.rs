//! The C producer cross-built for Cortex-M3 and Cortex-R52
//! (arm-none-eabi-gcc) and run on QEMU's mps2-an385 and mps3-an536: the
//! test firmware (arm/fw_test.c) writes a known
//! workload into a ring in the emulated RAM and hands the ring image over
//! by semihosting. The image must equal, byte for byte, what the Rust
//! reference producer makes of the same workload, and decode record by
//! record to that workload.
//!
//! Needs arm-none-eabi-gcc and qemu-system-arm (host packages of
//! `cargo xtask deps`); HMB_FWSDK_SKIP_ARM=1 skips it on a host without them.
//! Takes about a second per board.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use hmb_trace_abi::reference::{decode, DecodedItem, RefRing};
use hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD;

const RING_SIZE: u64 = 8192;
const EVENTS: u32 = 600;
const CATCH_UP_EVERY: u32 = 16;
const LAST_UNREAD: u32 = 48;

/// arm/fw_test.c `workload_len`.
fn workload_len(i: u32) -> u32 {
    if i % 50 == 49 {
        HMB_RECORD_MAX_PAYLOAD
    } else {
        (i * 37) % 300
    }
}

fn workload_payload(i: u32, len: u32) -> Vec<u8> {
    (0..len).map(|j| (i.wrapping_mul(31).wrapping_add(j)) as u8).collect()
}

/// The same workload on the Rust reference producer.
fn reference_image() -> RefRing {
    let mut r = RefRing::new(RING_SIZE, 1);
    for i in 0..EVENTS {
        let len = workload_len(i);
        r.produce(
            0x0200 + (i % 5) as u16,
            i % 4,
            1000 + i as u64 * 10,
            &workload_payload(i, len),
        );
        if i % CATCH_UP_EVERY == CATCH_UP_EVERY - 1 && i < EVENTS - LAST_UNREAD {
            let head = r.hdr().head.get();
            r.publish_tail(head);
        }
    }
    r.freeze();
    r
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn skip() -> bool {
    std::env::var("HMB_FWSDK_SKIP_ARM").is_ok_and(|v| v == "1")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e} (install it: cargo xtask deps, or HMB_FWSDK_SKIP_ARM=1)"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // QEMU prints semihosting console output on stderr.
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn c_flags(cc: &str, target: &[&str]) -> Command {
    let r = root();
    let mut c = Command::new(cc);
    c.args(target)
        .args(["-std=c11", "-ffreestanding", "-Wall", "-Wextra", "-Werror", "-Os"])
        .arg(format!("-I{}", r.join("compat").display()))
        .arg(format!("-I{}", r.join("../kmod/include/uapi").display()))
        .arg(format!("-I{}", r.join("include").display()));
    c
}

/// One emulated board: compiler flags, linker script, QEMU machine.
struct Board {
    name: &'static str,
    cflags: &'static [&'static str],
    ld: &'static str,
    machine: &'static str,
}

const CORTEX_M3: Board = Board {
    name: "cortex-m3",
    cflags: &["-mcpu=cortex-m3", "-mthumb", "-g"],
    ld: "arm/link.ld",
    machine: "mps2-an385",
};

/// Cortex-R52 in A32 state, soft float (the FPU is left off), no unaligned
/// accesses (the MPU is off, so memory is not Normal).
const CORTEX_R52: Board = Board {
    name: "cortex-r52",
    cflags: &[
        "-mcpu=cortex-r52",
        "-marm",
        "-mfloat-abi=soft",
        "-mno-unaligned-access",
        "-g",
    ],
    ld: "arm/link-r52.ld",
    machine: "mps3-an536",
};

/// Build the test firmware into `dir`; return the ELF.
fn build_firmware(board: &Board, dir: &Path) -> PathBuf {
    let lib = dir.join("hmb_trace_fw.o");
    let fw = dir.join("fw_test.o");
    let elf = dir.join("fw_test.elf");
    run(c_flags("arm-none-eabi-gcc", board.cflags)
        .args(["-pedantic", "-c"])
        .arg(root().join("src/hmb_trace_fw.c"))
        .arg("-o")
        .arg(&lib));
    run(c_flags("arm-none-eabi-gcc", board.cflags)
        .args(["-fno-builtin", "-c"])
        .arg(root().join("arm/fw_test.c"))
        .arg("-o")
        .arg(&fw));
    run(Command::new("arm-none-eabi-gcc")
        .args(board.cflags)
        .args(["-nostdlib", "-T"])
        .arg(root().join(board.ld))
        .arg(&fw)
        .arg(&lib)
        .args(["-lgcc", "-o"])
        .arg(&elf));
    elf
}

#[test]
fn cortex_m3_firmware_ring_matches_the_rust_reference() {
    run_board(&CORTEX_M3);
}

#[test]
fn cortex_r52_firmware_ring_matches_the_rust_reference() {
    run_board(&CORTEX_R52);
}

fn run_board(board: &Board) {
    if skip() {
        eprintln!("HMB_FWSDK_SKIP_ARM=1: not run");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("fwsdk-{}", board.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let elf = build_firmware(board, &dir);

    let start = Instant::now();
    let stdout = run(Command::new("timeout")
        .arg("60")
        .arg("qemu-system-arm")
        .args(["-M", board.machine, "-nographic", "-monitor", "none", "-serial", "none"])
        .args([
            "-semihosting-config",
            "enable=on,target=native",
            "-icount",
            "shift=0",
            "-kernel",
        ])
        .arg(&elf)
        .current_dir(&dir));
    assert!(start.elapsed() < Duration::from_secs(60));
    // The firmware's own check: bench line printed, no fault.
    let bench = stdout
        .lines()
        .find(|l| l.starts_with("hmbt-bench "))
        .unwrap_or_else(|| panic!("{}: no bench line from the firmware: {stdout:?}", board.name));
    eprintln!("{}: {bench}", board.name);
    assert!(bench.ends_with(" dropped=0"), "{bench}");

    let image = std::fs::read(dir.join("fw-ring.bin")).expect("the firmware wrote its ring by semihosting");
    let want = reference_image();
    assert_eq!(image.len(), want.image.len());
    if let Some(at) = image.iter().zip(&want.image).position(|(a, b)| a != b) {
        panic!(
            "first difference at byte {at}: ARM {:#04x}, reference {:#04x}",
            image[at], want.image[at]
        );
    }

    // Record by record, through the Rust parser.
    let d = decode(&image).expect("the ARM ring decodes");
    assert_eq!(d.flags, ["OVERFLOWED", "FROZEN"], "dropping when frozen");
    assert_eq!(d.next_seq, EVENTS as u64);
    assert!(d.dropped_records > 0, "the workload drops");
    assert!(d.head > 4 * RING_SIZE, "the workload wraps (head {})", d.head);
    let mut records = 0;
    for item in &d.items {
        if let DecodedItem::Record {
            seq,
            opcode,
            source,
            timestamp_ns,
            length,
            payload_hex,
            ..
        } = item
        {
            let i = *seq as u32;
            assert_eq!(
                (*opcode, *source, *timestamp_ns, *length),
                (0x0200 + (i % 5) as u16, i % 4, 1000 + *seq * 10, workload_len(i)),
                "seq {seq}"
            );
            let hex: String = workload_payload(i, *length)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            assert_eq!(payload_hex, &hex, "seq {seq}: payload");
            records += 1;
        }
    }
    assert!(records > 0, "the final window holds records");
    analyzer_reads(board, &dir, image, &d);
}

/// What the daemon would make of the ARM ring (the Rust consumer's batches
/// and markers in a trace.bin), read back by the analyzer: the same records
/// and the same losses as the reference decoding.
fn analyzer_reads(board: &Board, dir: &Path, mut image: Vec<u8>, d: &hmb_trace_abi::reference::Decoded) {
    use hmb_trace_consumer::{Consumer, ConsumerConfig, NoPublish, RingView, Step};
    use hmb_trace_file::{encode_epoch, encode_frozen, encode_lost, header::FileHeader};

    let mut file = FileHeader::new(1, 0, RING_SIZE, d.epoch).encode().to_vec();
    file.extend_from_slice(&encode_epoch(d.epoch, RING_SIZE));
    // SAFETY: `image` outlives the view and nobody writes it meanwhile.
    let view = unsafe { RingView::from_raw(image.as_mut_ptr(), image.len()) }.unwrap();
    let mut c = Consumer::attach(view, NoPublish, ConsumerConfig::default()).unwrap();
    loop {
        match c.next_batch().unwrap() {
            Step::Batch(b) => {
                if let Some(l) = b.lost {
                    file.extend_from_slice(&encode_lost(l.first_seq, l.count, d.epoch));
                }
                for s in b.iov {
                    file.extend_from_slice(s);
                }
            }
            Step::Frozen(f) => {
                if let Some(l) = f.lost {
                    file.extend_from_slice(&encode_lost(l.first_seq, l.count, f.epoch));
                }
                file.extend_from_slice(&encode_frozen(f.epoch, f.last_seq, f.next_seq));
                break;
            }
            Step::Empty => panic!("{}: a frozen ring is never just empty", board.name),
        }
        c.commit().unwrap();
    }
    let trace = dir.join("trace.bin");
    std::fs::write(&trace, &file).unwrap();

    let analyze = |args: &[&str]| -> serde_json::Value {
        use clap::Parser;
        let mut argv = vec!["hmb-trace-analyze", "--no-progress"];
        argv.extend_from_slice(args);
        argv.push(trace.to_str().unwrap());
        let mut out = Vec::new();
        hmb_trace_analyze::run(hmb_trace_analyze::cli::Cli::parse_from(argv), &mut out)
            .unwrap_or_else(|e| panic!("{}: analyzer {args:?}: {e:?}", board.name));
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("analyzer {args:?}: {e}: {}", String::from_utf8_lossy(&out)))
    };
    let want_records = d
        .items
        .iter()
        .filter(|i| matches!(i, DecodedItem::Record { .. }))
        .count() as u64;
    let want_lost: u64 = d
        .items
        .iter()
        .map(|i| match i {
            DecodedItem::Lost { count, .. } => *count,
            _ => 0,
        })
        .sum();
    assert!(want_lost > 0, "the final window holds drops");
    let gaps = analyze(&["gaps", "--json"]);
    eprintln!(
        "{}: analyzer gaps: lost_marked {} lost_total {}",
        board.name, gaps["lost_marked"], gaps["lost_total"]
    );
    assert_eq!(gaps["lost_marked"].as_u64(), Some(want_lost), "{}: {gaps}", board.name);
    let stats = analyze(&["stats", "--json"]);
    let text = stats.to_string();
    assert!(
        text.contains(&format!("\"records\":{want_records}")),
        "{}: analyzer stats should count {want_records} records: {text}",
        board.name
    );
}

/// The library builds warning-free for the cores SSD firmware runs on, with
/// gcc and (when installed) clang.
#[test]
fn library_builds_warning_free_for_32_bit_cores() {
    if skip() {
        eprintln!("HMB_FWSDK_SKIP_ARM=1: not run");
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fwsdk-cores");
    std::fs::create_dir_all(&dir).unwrap();
    let src = root().join("src/hmb_trace_fw.c");
    for (name, target) in [
        ("m3", &["-mcpu=cortex-m3", "-mthumb"][..]),
        ("r5-arm", &["-mcpu=cortex-r5", "-marm"][..]),
        ("r5-thumb", &["-mcpu=cortex-r5", "-mthumb"][..]),
        ("r52", &["-mcpu=cortex-r52", "-marm"][..]),
        ("be-r5", &["-mcpu=cortex-r5", "-mbig-endian"][..]),
    ] {
        let obj = dir.join(format!("{name}.o"));
        run(c_flags("arm-none-eabi-gcc", target)
            .args(["-pedantic", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(&obj));
        let syms = run(Command::new("arm-none-eabi-nm").args(["-u"]).arg(&obj));
        let undefined: Vec<&str> = syms.split_whitespace().filter(|s| *s != "U").collect();
        for sym in &undefined {
            assert!(
                ["memcpy", "memset"].contains(sym),
                "{name}: the library needs {sym} beyond memcpy/memset"
            );
        }
    }
    if Command::new("clang").arg("--version").output().is_ok() {
        run(c_flags("clang", &["--target=armv7r-none-eabi"])
            .args(["-pedantic", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(dir.join("clang-r.o")));
        run(c_flags("clang", &[])
            .args(["-pedantic", "-c"])
            .arg(&src)
            .arg("-o")
            .arg(dir.join("clang-host.o")));
    }
}
