//! The controller's own cost per command over the in-process fake host (no transport).
//! `cargo bench -p hmb-nvme` prints ns per command for 4 KiB reads and writes at QD1 and
//! QD32, 128 KiB reads through a PRP list, 512 KiB reads and writes (MDTS: what a 1 MiB
//! fio transfer becomes) of data written sequentially, and Identify, first with the
//! namespace in memory, then the data rows again on a sparse backing file (what
//! `serve-nvme` uses: the medium's preads and pwrites are part of the cost), and the 4 KiB
//! reads once more with shadow doorbells (Doorbell Buffer Config), and the data rows on
//! a controller lent an HMB (the map cache in host memory, as the stock driver lends
//! one at boot: every command's first lookup of a map page reads and checks its slot
//! there). Figures are
//! only meaningful on an idle machine. `HMB_NVME_BENCH_ROWS=<text>` runs only the rows
//! whose name contains it (for `perf record` of one kind of command).

use std::time::Instant;

use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{Backing, ControllerConfig};

fn main() {
    let iterations: u32 = std::env::var("HMB_NVME_BENCH_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    println!("hmb-nvme per-command cost over the fake host ({iterations} iterations each)");
    suite("memory", ControllerConfig::default(), iterations, true, false);
    let dir = tempfile::tempdir().expect("temporary directory");
    let file = ControllerConfig {
        backing: Backing::SparseFile(dir.path().join("ns.img")),
        ..ControllerConfig::default()
    };
    suite("file", file.clone(), iterations, false, false);
    suite("file, HMB", file, iterations, false, true);
}

/// Lend the controller an HMB of `bytes` in one chunk (Set Features 0Dh, EHM=1): the map
/// cache moves into it at the next data command.
fn lend_hmb(host: &mut FakeHost, bytes: u64) {
    let chunk = host.alloc(bytes);
    let list = host.alloc(16);
    let mut e = [0u8; 16];
    e[0..8].copy_from_slice(&chunk.to_le_bytes());
    e[8..12].copy_from_slice(&((bytes / 4096) as u32).to_le_bytes());
    host.guest_write(list, &e);
    let c = Command::set_features(0x0D, 1)
        .cdw(12, (bytes / 4096) as u32)
        .cdw(13, list as u32)
        .cdw(14, (list >> 32) as u32)
        .cdw(15, 1);
    assert!(host.admin(c).ok(), "HMB not accepted");
}

/// Every row on a controller made with `cfg` (`label`: its backing); `all`: also QD32,
/// 128 KiB and Identify (the rows the backing changes little); `hmb`: lend an HMB first.
fn suite(label: &str, cfg: ControllerConfig, iterations: u32, all: bool, hmb: bool) {
    let mut host = FakeHost::new(cfg, 256 << 20);
    assert_eq!(host.enable(64) & 1, 1, "controller did not become ready");
    host.create_io_queue(1, 64).expect("I/O queue");
    if hmb {
        lend_hmb(&mut host, 4 << 20);
    }

    let data = vec![0xa5u8; 4096];
    host.write_lbas(1, 0, &data, 9);
    if hmb {
        assert!(
            host.ctrl.report().namespace.ftl.cache_in_hmb,
            "map cache not in the HMB"
        );
    }

    // Pre-built commands whose buffers are allocated once, so the loop measures the
    // controller (fetch, PRP walk, copy, CQE, doorbells), not the fake host's allocator.
    let buf = host.alloc(4096);
    let big = host.build_prps(128 << 10, 0, 512);
    let id_buf = host.alloc(4096);
    let read4k = Command::new(0x02).nsid(1).prp1(buf).cdw(12, 7);
    let write4k = Command::new(0x01).nsid(1).prp1(buf).cdw(12, 7);
    let read128k = Command::new(0x02).nsid(1).prp1(big.0).prp2(big.1).cdw(12, 255);
    // 512 KiB written in one command at 1 MiB: physically consecutive pages on NAND.
    assert!(host.write_lbas(1, 2048, &vec![0x5au8; 512 << 10], 9).ok());
    let max = host.build_prps(512 << 10, 0, 512);
    let read512k = Command::new(0x02)
        .nsid(1)
        .prp1(max.0)
        .prp2(max.1)
        .cdw(10, 2048)
        .cdw(12, 1023);
    // The same 512 KiB rewritten in place (sequential: a 1 MiB fio write's half).
    let write512k = Command::new(0x01)
        .nsid(1)
        .prp1(max.0)
        .prp2(max.1)
        .cdw(10, 2048)
        .cdw(12, 1023);
    let identify = Command::identify(1, 0, id_buf);

    let name = |row: &str| format!("{row}, {label}");
    bench(&name("4 KiB read, QD1"), iterations, 1, &mut host, 1, read4k);
    bench(&name("4 KiB write, QD1"), iterations, 1, &mut host, 1, write4k);
    if all {
        bench(&name("4 KiB read, QD32"), iterations, 32, &mut host, 1, read4k);
        bench(
            &name("128 KiB read (PRP list), QD1"),
            iterations / 10,
            1,
            &mut host,
            1,
            read128k,
        );
    }
    bench(
        &name("512 KiB read (PRP list), QD1"),
        iterations / 40,
        1,
        &mut host,
        1,
        read512k,
    );
    bench(
        &name("512 KiB write (PRP list), QD1"),
        iterations / 40,
        1,
        &mut host,
        1,
        write512k,
    );
    if all {
        bench(
            &name("Identify controller, QD1"),
            iterations / 10,
            1,
            &mut host,
            0,
            identify,
        );
        // Last (the config stays): Doorbell Buffer Config, so the host rings only what the
        // EventIdx asks and the controller reads the shadows (shadow.rs).
        assert!(host.config_doorbell_buffers().ok(), "Doorbell Buffer Config");
        bench(
            &name("4 KiB read, QD1, shadow doorbells"),
            iterations,
            1,
            &mut host,
            1,
            read4k,
        );
        bench(
            &name("4 KiB read, QD32, shadow doorbells"),
            iterations,
            32,
            &mut host,
            1,
            read4k,
        );
    }
}

fn bench(name: &str, iterations: u32, depth: u32, host: &mut FakeHost, qid: u16, cmd: Command) {
    if std::env::var("HMB_NVME_BENCH_ROWS").is_ok_and(|only| !name.contains(&only)) {
        return;
    }
    let batches = (iterations / depth).max(1);
    let start = Instant::now();
    for _ in 0..batches {
        for _ in 0..depth {
            host.push(qid, cmd);
        }
        host.ring(qid);
        for _ in 0..depth {
            let c = host.reap(qid).expect("completion");
            assert!(c.ok(), "{name}: {:?}", c.status);
        }
    }
    let n = u64::from(batches * depth);
    let ns = start.elapsed().as_nanos() as u64 / n;
    println!("{name:40} {ns:>8} ns/command  ({n} commands)");
}
