//! Get Log Page 07h/08h (Telemetry Host- and Controller-Initiated) against the
//! controller model with the real trace producer (hmb-nvme-trace, a stock
//! host: no advert, records kept for Telemetry only): hostile offsets,
//! lengths (NUMDL/NUMDU), LSP, RAE and PRPs, between the events that change
//! the logs (creates, Controller Fatal Status captures, resets, AEC,
//! outstanding AERs). Statuses only, never a panic, and what the base
//! specification promises the host: a successful read at offset 0 starts
//! with the log's identifier; without a create, the Host-Initiated log
//! (but its bytes 382, 383) does not change; bytes 382 and 383 are the same
//! in both logs read back to back.
#![no_main]

use hmb_nvme::fake_host::{Command, FakeHost, PAGE};
use hmb_nvme::ControllerConfig;
use hmb_nvme_trace::{NvmeTrace, Personality};
use libfuzzer_sys::fuzz_target;

#[path = "shared/input.rs"]
mod input;
use input::Input;

const MEM: u64 = 1 << 20;
/// Two pages: reads of up to 8 KiB go to PRP1 and PRP2 without a list.
const BUF: u64 = 2 * PAGE;
const ALLOC_BUDGET: u64 = 256 << 10;

fn config() -> ControllerConfig {
    ControllerConfig {
        namespace_bytes: 128 << 10,
        hmpre_bytes: 1 << 20,
        hmmin_bytes: 64 << 10,
        max_io_queues: 2,
        mqes: 63,
        interrupt_vectors: 3,
        ..Default::default()
    }
}

/// Submit on the admin queue and reap everything; the status of `cid`'s completion.
fn run(host: &mut FakeHost, c: Command) -> Option<hmb_nvme::Status> {
    let cid = host.push(0, c);
    host.ring(0);
    let mut status = None;
    while let Some(done) = host.reap(0) {
        if done.cid == cid {
            status = Some(done.status);
        }
    }
    status
}

/// A sane Get Log Page of the header: 512 bytes at offset 0 into `buf`, RAE = 1.
fn header(host: &mut FakeHost, lid: u32, buf: u64) -> Option<Vec<u8>> {
    let c = Command::new(0x02).prp1(buf).cdw(10, lid | 1 << 15 | 127 << 16);
    run(host, c)
        .filter(|s| s.is_success())
        .map(|_| host.guest_read(buf, 512))
}

fuzz_target!(|data: &[u8]| {
    let mut host = FakeHost::new(config(), MEM);
    let trace = NvmeTrace::new(host.mem.clone());
    trace.install(&mut host.ctrl, Personality::Tracing);
    let buf = host.alloc(BUF);
    let mut allocated = BUF;
    let mut input = Input(data);
    // The Host-Initiated header as the last create left it (bytes 382, 383 aside).
    let mut host_log: Option<Vec<u8>> = None;
    while let Some(op) = input.u8() {
        let Some(_) = (|| -> Option<()> {
            match op % 8 {
                0 | 1 => {
                    let entries = 2 + u32::from(input.u8()? % 30);
                    allocated += u64::from(entries) * 80;
                    if allocated > ALLOC_BUDGET {
                        return None;
                    }
                    host.forget_queues();
                    host.enable(entries);
                }
                // Get Log Page 07h or 08h, hostile fields.
                2..=4 => {
                    if host.admin.sq_entries == 0 {
                        return Some(());
                    }
                    let lid = [0x07, 0x08][usize::from(input.u8()? & 1)];
                    let lsp = u32::from(input.u8()? & 0x7f);
                    let rae = u32::from(input.u8()? & 1);
                    let shape = input.u8()?;
                    // Half the time whole 512-byte units within the buffer, else any.
                    let (numd, offset) = if shape & 1 == 0 {
                        let blocks = 1 + u32::from(input.u8()? % 16);
                        (blocks * 128 - 1, u64::from(input.u8()? % 64) * 512)
                    } else {
                        (u32::from(input.u16()?) | input.u32()? << 16, input.u64()?)
                    };
                    let sane = shape & 2 == 0 && numd < (BUF / 4) as u32;
                    let (prp1, prp2) = if sane {
                        (buf, buf + PAGE)
                    } else {
                        (input.u64()?, input.u64()?)
                    };
                    let create = lid == 0x07 && lsp & 1 != 0;
                    if create {
                        // Whatever its status, the command may have made a new snapshot.
                        host_log = None;
                    }
                    let c = Command::new(0x02)
                        .prp1(prp1)
                        .prp2(prp2)
                        .cdw(10, lid | lsp << 8 | rae << 15 | (numd & 0xffff) << 16)
                        .cdw(11, numd >> 16)
                        .cdw(12, offset as u32)
                        .cdw(13, (offset >> 32) as u32);
                    let ok = run(&mut host, c).is_some_and(|s| s.is_success());
                    if !(ok && sane && offset == 0) {
                        return Some(());
                    }
                    let got = host.guest_read(buf, 512);
                    assert_eq!(u32::from(got[0]), lid, "log identifier");
                    if lid == 0x07 {
                        if create {
                            host_log = Some(got.clone());
                        } else if let Some(want) = &host_log {
                            assert_eq!(&got[..382], &want[..382], "07h changed without a create");
                            assert_eq!(&got[384..], &want[384..], "07h changed without a create");
                        }
                    }
                    if rae == 1 {
                        // Nothing happened since: the other log agrees on 382, 383.
                        let other = header(&mut host, 0x0f ^ lid, buf)?;
                        assert_eq!(&other[382..384], &got[382..384], "bytes 382, 383 differ");
                    }
                }
                5 => {
                    host.ctrl.inject_fatal("fuzz");
                }
                6 => {
                    host.disable();
                }
                // Asynchronous Event Configuration, then an AER left outstanding.
                _ => {
                    if host.admin.sq_entries == 0 {
                        return Some(());
                    }
                    run(&mut host, Command::set_features(0x0B, input.u32()?));
                    if input.u8()? & 1 == 0 {
                        run(&mut host, Command::new(0x0C));
                    }
                }
            }
            Some(())
        })() else {
            return;
        };
    }
});
