//! The NVMe controller model (hmb-nvme) driven by a hostile guest, without
//! QEMU: the input is a program of register writes and reads, raw guest
//! memory writes (submission entries, PRP lists, HMB descriptor lists are
//! just guest memory), admin and I/O commands with hostile dwords, HMB
//! enables pointing at hostile descriptor lists, resets and shutdowns.
//! The controller must answer with statuses, never panic.
#![no_main]

use hmb_nvme::fake_host::{Command, FakeHost, PAGE};
use hmb_nvme::ControllerConfig;
use libfuzzer_sys::fuzz_target;

#[path = "shared/input.rs"]
mod input;
use input::Input;

/// Guest RAM of the fake host: small, so hostile addresses often hit it,
/// and cheap: it is a fresh mapping per input whose touched pages each cost
/// a page fault (4 MiB here, with the 1 MiB namespace below, held the
/// target to ~600 exec/s, two thirds of it in the kernel zeroing pages).
const MEM: u64 = 1 << 20;
/// Queue and buffer allocations of the fake host are never freed: at most
/// this many bytes per input (the rest of MEM is the hostile playground).
const ALLOC_BUDGET: u64 = 256 << 10;

impl Input<'_> {
    /// An address: half the time inside guest RAM (page-biased), else any.
    fn addr(&mut self) -> Option<u64> {
        let a = self.u64()?;
        Some(if a & 1 == 0 { ((a >> 1) % MEM) & !(a & 0x8) } else { a })
    }
}

fn config() -> ControllerConfig {
    ControllerConfig {
        // 256 LBAs: the I/O commands below reach past its end half the
        // time (SLBA up to 511); allocated and zeroed for every input, so
        // small.
        namespace_bytes: 128 << 10,
        // 128 KiB per command: NLB up to 512 (256 KiB) crosses it, so the
        // MDTS refusal is reached as well as PRP lists of up to 32 entries.
        mdts: 5,
        hmpre_bytes: 1 << 20,
        hmmin_bytes: 64 << 10,
        hmminds_bytes: PAGE,
        hmmaxd: 16,
        max_io_queues: 2,
        mqes: 63,
        interrupt_vectors: 3,
        ..Default::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut host = FakeHost::new(config(), MEM);
    let mut input = Input(data);
    let mut allocated = 0u64;
    let mut budget = |bytes: u64| {
        allocated += bytes.div_ceil(PAGE).max(1) * PAGE;
        allocated <= ALLOC_BUDGET
    };
    let mut io_queue = false;
    while let Some(op) = input.u8() {
        let Some(_) = (|| -> Option<()> {
            match op % 12 {
                // A register write of 1, 2, 4 or 8 bytes anywhere in BAR0 (and beyond).
                0 => {
                    let off = u64::from(input.u32()? & 0x3fff);
                    let len = 1usize << (input.u8()? % 4);
                    let v = input.u64()?.to_le_bytes();
                    host.ctrl.bar0_write(off, &v[..len]);
                }
                1 => {
                    let off = u64::from(input.u32()? & 0x3fff);
                    let mut b = vec![0u8; 1usize << (input.u8()? % 4)];
                    host.ctrl.bar0_read(off, &mut b);
                }
                // Raw guest memory: entries, PRP lists, descriptor lists.
                2 => {
                    let len = usize::from(input.u8()?) + 1;
                    let at = input.u64()? % (MEM - len as u64);
                    let bytes: Vec<u8> = (0..len).map(|_| input.u8().unwrap_or(0)).collect();
                    host.guest_write(at, &bytes);
                }
                // The driver's enable sequence (sane admin queue).
                3 => {
                    let entries = 2 + u32::from(input.u8()? % 62);
                    if budget(u64::from(entries) * 80) {
                        host.forget_queues();
                        host.enable(entries);
                        io_queue = false;
                    }
                }
                // An admin command with hostile dwords (CID set by the host).
                4 => {
                    if host.admin.sq_entries == 0 {
                        return Some(());
                    }
                    let mut c = Command::new(input.u8()?);
                    for i in 1..16 {
                        c.0[i] = input.u32()?;
                    }
                    if input.u8()? & 1 == 0 {
                        c = c.prp1(input.addr()?).prp2(input.addr()?);
                    }
                    host.push(0, c);
                    host.ring(0);
                    while host.reap(0).is_some() {}
                }
                // Create I/O queue pair 1 (sane), as a driver does after enable.
                5 => {
                    if host.admin.sq_entries == 0 || io_queue || !budget(64 * 80) {
                        return Some(());
                    }
                    let cq = host.alloc(64 * 16);
                    let sq = host.alloc(64 * 64);
                    let size = 63 << 16 | 1;
                    host.push(0, Command::new(0x05).prp1(cq).cdw(10, size).cdw(11, 1 << 16 | 0b11));
                    host.push(0, Command::new(0x01).prp1(sq).cdw(10, size).cdw(11, 1 << 16 | 1));
                    host.ring(0);
                    let mut ok = 0;
                    while let Some(c) = host.reap(0) {
                        ok += u32::from(c.ok());
                    }
                    if ok == 2 {
                        host.io.push(hmb_nvme::fake_host::HostQueue {
                            qid: 1,
                            sq_base: sq,
                            sq_entries: 64,
                            sq_tail: 0,
                            cq_base: cq,
                            cq_entries: 64,
                            cq_head: 0,
                            phase: true,
                        });
                        io_queue = true;
                    }
                }
                // An I/O command (read/write/flush/anything) with hostile PRPs and ranges.
                6 => {
                    if !io_queue {
                        return Some(());
                    }
                    let opcode = [0x00, 0x01, 0x02, 0x08, 0x09, input.u8()?][usize::from(input.u8()? % 6)];
                    let c = Command::new(opcode)
                        .nsid(if input.u8()? & 3 == 0 { input.u32()? } else { 1 })
                        .prp1(input.addr()?)
                        .prp2(input.addr()?)
                        .cdw(10, input.u32()? & 0x1ff)
                        .cdw(11, 0)
                        .cdw(12, input.u32()? & 0x1ff);
                    host.push(1, c);
                    host.ring(1);
                    while host.reap(1).is_some() {}
                }
                // Enable the HMB (Set Features 0Dh) with a descriptor list built from the input.
                7 => {
                    if host.admin.sq_entries == 0 {
                        return Some(());
                    }
                    let n = usize::from(input.u8()? % 20);
                    let list = (input.u64()? % (MEM - 16 * 20)) & !0xf;
                    for i in 0..n {
                        let mut d = [0u8; 16];
                        d[..8].copy_from_slice(&(input.addr()? & !(PAGE - 1)).to_le_bytes());
                        d[8..12].copy_from_slice(&(input.u32()? % 64).to_le_bytes());
                        host.guest_write(list + 16 * i as u64, &d);
                    }
                    let c = Command::set_features(0x0D, input.u32()? & 3)
                        .cdw(12, input.u32()? % 512)
                        .cdw(13, list as u32)
                        .cdw(14, (list >> 32) as u32)
                        .cdw(15, if input.u8()? & 7 == 0 { input.u32()? } else { n as u32 });
                    host.push(0, c);
                    host.ring(0);
                    while host.reap(0).is_some() {}
                }
                // Doorbells with hostile values (SQ tail or CQ head of any queue).
                8 => {
                    let qid = u64::from(input.u8()? % 4);
                    let cq = u64::from(input.u8()? & 1);
                    host.write32(0x1000 + 8 * qid + 4 * cq, input.u32()?);
                }
                9 => {
                    host.disable();
                    io_queue = false;
                }
                10 => {
                    host.shutdown();
                }
                // NVM subsystem reset ("NVMe") and reading the report.
                _ => {
                    host.write32(0x20, 0x4E56_4D65);
                    let _ = host.ctrl.report();
                }
            }
            Some(())
        })() else {
            return;
        };
    }
});
