//! BAR0 accesses of any width and offset: registers merged per dword, doorbells as whole
//! dwords (NVMe 1.4 section 3.1).

use crate::regs::*;
use crate::Controller;

impl Controller {
    /// Any width, any offset; bytes outside BAR0 and write-only doorbells read 0.
    pub fn bar0_read(&mut self, offset: u64, data: &mut [u8]) {
        let mut cached: Option<(u64, u32)> = None;
        for (i, b) in data.iter_mut().enumerate() {
            *b = 0;
            let Some(a) = offset.checked_add(i as u64) else {
                continue;
            };
            if a >= DOORBELLS {
                continue;
            }
            let d = a & !3;
            let v = match cached {
                Some((cd, v)) if cd == d => v,
                _ => {
                    let v = self.read32(d);
                    cached = Some((d, v));
                    v
                }
            };
            *b = (v >> (8 * (a & 3))) as u8;
        }
    }

    /// Any width, any offset. Registers take narrow writes merged into their dword;
    /// doorbells take whole aligned dwords (a narrow doorbell write is ignored and counted);
    /// doorbell writes process commands inline.
    pub fn bar0_write(&mut self, offset: u64, data: &[u8]) {
        let mut i = 0usize;
        while i < data.len() {
            let Some(a) = offset.checked_add(i as u64) else { break };
            let d = a & !3;
            let first = (a - d) as usize;
            let n = (4 - first).min(data.len() - i);
            if d >= Self::BAR0_SIZE {
                self.counters.ignored_register_writes += 1;
                break;
            }
            let mut bytes = if d < DOORBELLS && merges_with_current(d) {
                self.read32(d).to_le_bytes()
            } else {
                [0; 4]
            };
            bytes[first..first + n].copy_from_slice(&data[i..i + n]);
            let v = u32::from_le_bytes(bytes);
            if d >= DOORBELLS {
                if n == 4 {
                    self.doorbell((d - DOORBELLS) / 4, v);
                } else {
                    self.counters.ignored_register_writes += 1;
                }
            } else {
                self.write32(d, v);
            }
            i += n;
        }
    }

    fn read32(&self, d: u64) -> u32 {
        let cap = cap(self.cfg.mqes);
        match d {
            CAP => cap as u32,
            x if x == CAP + 4 => (cap >> 32) as u32,
            VS => VERSION,
            INTMS | INTMC => self.intms,
            CC => self.cc,
            CSTS => self.csts,
            AQA => self.aqa,
            ASQ => self.asq as u32,
            x if x == ASQ + 4 => (self.asq >> 32) as u32,
            ACQ => self.acq as u32,
            x if x == ACQ + 4 => (self.acq >> 32) as u32,
            _ => 0,
        }
    }

    fn write32(&mut self, d: u64, v: u32) {
        match d {
            INTMS => self.intms |= v,
            INTMC => self.intms &= !v,
            CC => self.write_cc(v),
            AQA => self.aqa = v & 0x0fff_0fff,
            ASQ => self.asq = (self.asq & !0xffff_ffff) | u64::from(v & !0xfff),
            x if x == ASQ + 4 => self.asq = (self.asq & 0xffff_ffff) | u64::from(v) << 32,
            ACQ => self.acq = (self.acq & !0xffff_ffff) | u64::from(v & !0xfff),
            x if x == ACQ + 4 => self.acq = (self.acq & 0xffff_ffff) | u64::from(v) << 32,
            // CAP.NSSRS = 0: a subsystem reset is not supported.
            NSSR => self.counters.ignored_register_writes += 1,
            // CAP, VS, CSTS and reserved space are read-only.
            _ => self.counters.ignored_register_writes += 1,
        }
    }
}
