//! A minimal driver for QEMU's qtest protocol (`-accel qtest -qtest
//! unix:PATH`): lets a test do what a guest kernel does (PCI config cycles,
//! MMIO reads and writes) against QEMU's real device models, with no guest.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

pub struct QTest {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl QTest {
    /// Wait for QEMU to connect to `listener` (QEMU is the client).
    pub fn accept(listener: &UnixListener, timeout: Duration) -> Self {
        listener.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("QEMU did not connect to the qtest socket: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Self {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    pub fn listen(path: &Path) -> UnixListener {
        UnixListener::bind(path).unwrap()
    }

    /// Send one command, return what follows "OK" (async IRQ lines skipped).
    pub fn cmd(&mut self, line: &str) -> String {
        writeln!(self.writer, "{line}").unwrap();
        loop {
            let mut resp = String::new();
            self.reader.read_line(&mut resp).expect("qtest answer");
            let resp = resp.trim();
            if resp.starts_with("IRQ") {
                continue;
            }
            assert!(resp.starts_with("OK"), "qtest {line:?} -> {resp:?}");
            return resp[2..].trim().to_string();
        }
    }

    fn num(s: &str) -> u64 {
        u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("qtest number {s:?}"))
    }

    pub fn readl(&mut self, addr: u64) -> u32 {
        Self::num(&self.cmd(&format!("readl {addr:#x}"))) as u32
    }
    pub fn readq(&mut self, addr: u64) -> u64 {
        Self::num(&self.cmd(&format!("readq {addr:#x}")))
    }
    pub fn writel(&mut self, addr: u64, v: u32) {
        self.cmd(&format!("writel {addr:#x} {v:#x}"));
    }
    pub fn writeq(&mut self, addr: u64, v: u64) {
        self.cmd(&format!("writeq {addr:#x} {v:#x}"));
    }
    /// Write bytes to guest-physical memory (RAM or a BAR).
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        self.cmd(&format!("write {addr:#x} {:#x} 0x{hex}", data.len()));
    }

    fn cfg_addr(dev: u8, reg: u8) -> u32 {
        0x8000_0000 | (dev as u32) << 11 | (reg as u32 & 0xfc)
    }
    /// PCI config read (bus 0, function 0) through ports 0xcf8/0xcfc.
    pub fn cfg_read(&mut self, dev: u8, reg: u8) -> u32 {
        self.cmd(&format!("outl 0xcf8 {:#x}", Self::cfg_addr(dev, reg)));
        Self::num(&self.cmd("inl 0xcfc")) as u32
    }
    pub fn cfg_write(&mut self, dev: u8, reg: u8, v: u32) {
        self.cmd(&format!("outl 0xcf8 {:#x}", Self::cfg_addr(dev, reg)));
        self.cmd(&format!("outl 0xcfc {v:#x}"));
    }

    /// Poll a 32-bit location until it equals `want`.
    pub fn wait_l(&mut self, addr: u64, want: u32, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.readl(addr) == want {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}
