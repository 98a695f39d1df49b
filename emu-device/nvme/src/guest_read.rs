//! A Read command's destination: its guest pages (the PRP segments), filled by the FTL
//! ([`hmb_ftl::ReadTarget`]). A run of pages that lies in the backing file goes from the
//! file into guest memory with one `preadv` over the guest pages, as a DMA from the media
//! would: no copy through a transfer buffer (that copy was a third of a 512 KiB read's
//! time: docs/nvme-controller.md, "Where a large transfer's time goes"). Other media (the
//! memory backing) go through `bounce`.
//!
//! Guest memory the transfer cannot reach does not stop the read: its NAND operations
//! are the command's and are reported as before; the command ends in Data Transfer Error
//! ([`GuestRead::finish`]), as it did when the copy into guest memory failed.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use hmb_ftl::{Medium, ReadTarget};
use vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryBackend};

use crate::{dma, GuestMem, Status};

/// The command's guest pages as a read target.
pub(crate) struct GuestRead<'a> {
    mem: &'a GuestMem,
    /// The transfer's guest (address, length) segments, in transfer order.
    segs: &'a [(u64, u64)],
    bounce: &'a mut Vec<u8>,
    /// Some byte could not be written to guest memory.
    unreachable: bool,
}

const ZEROES: [u8; 4096] = [0; 4096];

impl<'a> GuestRead<'a> {
    pub(crate) fn new(mem: &'a GuestMem, segs: &'a [(u64, u64)], bounce: &'a mut Vec<u8>) -> Self {
        GuestRead {
            mem,
            segs,
            bounce,
            unreachable: false,
        }
    }

    /// The transfer's outcome once the FTL is done.
    pub(crate) fn finish(self) -> Result<(), Status> {
        if self.unreachable {
            Err(Status::DATA_TRANSFER_ERROR)
        } else {
            Ok(())
        }
    }

    /// The guest pieces of transfer bytes [at, at + n): (guest address, position in the
    /// range, length).
    fn pieces(&self, at: usize, n: usize) -> impl Iterator<Item = (u64, usize, usize)> + '_ {
        self.segs
            .iter()
            .scan(0usize, |base, &(addr, len)| {
                let start = *base;
                *base += len as usize;
                Some((addr, start, len as usize))
            })
            .filter_map(move |(addr, base, len)| {
                let from = at.max(base);
                let to = (at + n).min(base + len);
                (from < to).then(|| (addr + (from - base) as u64, from - at, to - from))
            })
    }

    fn write(&mut self, at: usize, src: &[u8]) {
        let pieces: Vec<_> = self.pieces(at, src.len()).collect();
        for (addr, pos, len) in pieces {
            if dma::write(self.mem, addr, &src[pos..pos + len]).is_err() {
                self.unreachable = true;
            }
        }
    }

    /// `n` bytes of `file` at `pos` into the guest pieces of [at, at + n), one `preadv`
    /// (more only if the kernel returns less). Ok(false): some piece is not guest memory
    /// (nothing read; the caller goes through the bounce buffer, which finds it).
    fn preadv(&mut self, file: &File, pos: u64, at: usize, n: usize) -> io::Result<bool> {
        let guard = self.mem.memory();
        let mut ptrs = Vec::new();
        for (addr, _, len) in self.pieces(at, n) {
            for slice in guard.get_slices(GuestAddress(addr), len) {
                let Ok(slice) = slice else { return Ok(false) };
                ptrs.push(slice.ptr_guard_mut());
            }
        }
        let mut iov: Vec<libc::iovec> = ptrs
            .iter()
            .map(|p| libc::iovec {
                iov_base: p.as_ptr().cast(),
                iov_len: p.len(),
            })
            .collect();
        hmb_ftl::transfer_all(
            &mut iov,
            pos,
            // SAFETY: every iovec is a guest memory range vm-memory handed out as a
            // VolatileSlice, valid for writes of its length while `ptrs`' guards (and
            // `guard`, which keeps the mappings) live, which is past this call; the kernel
            // writes into them and no Rust reference to them exists.
            |iov, count, offset| unsafe { libc::preadv(file.as_raw_fd(), iov, count, offset) },
            || io::Error::new(io::ErrorKind::UnexpectedEof, "backing file ends inside a read"),
        )?;
        Ok(true)
    }
}

impl ReadTarget for GuestRead<'_> {
    fn zeroes(&mut self, at: usize, n: usize) {
        let mut done = 0;
        while done < n {
            let k = (n - done).min(ZEROES.len());
            self.write(at + done, &ZEROES[..k]);
            done += k;
        }
    }

    fn put(&mut self, at: usize, src: &[u8]) {
        self.write(at, src);
    }

    fn medium_run(&mut self, medium: &dyn Medium, off: u64, at: usize, n: usize) -> io::Result<()> {
        if let Some((file, base)) = medium.file_region() {
            if self.preadv(file, base + off, at, n)? {
                return Ok(());
            }
        }
        let mut bounce = std::mem::take(self.bounce);
        bounce.resize(n, 0);
        let r = medium.read_at(off, &mut bounce[..n]);
        if r.is_ok() {
            self.write(at, &bounce[..n]);
        }
        *self.bounce = bounce;
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_ftl::{FileMedium, MemMedium};
    use std::io::Write;
    use vm_memory::{GuestMemoryAtomic, GuestMemoryMmap};

    const MB: usize = 1 << 20;

    fn mem() -> GuestMem {
        GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MB)]).unwrap())
    }

    fn file_of(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f
    }

    fn guest(m: &GuestMem, addr: u64, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        dma::read(m, addr, &mut b).unwrap();
        b
    }

    /// Pages out of order in guest memory, a run read into them from a file region (the
    /// preadv) and from memory (the bounce), zeroes and a partial page: the guest pages
    /// end up holding the transfer in segment order either way.
    #[test]
    fn a_run_lands_in_the_segments_in_transfer_order() {
        let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
        let segs = [(0x8000u64, 4096u64), (0x2000, 4096), (0x5000, 4096), (0x9000, 200)];
        let file_medium = FileMedium::new(file_of(&[vec![0xEEu8; 100], data.clone()].concat()), 100);
        let mut mem_medium = MemMedium::new(4 * 4096).unwrap();
        mem_medium.write_at(0, &data).unwrap();
        for medium in [&file_medium as &dyn Medium, &mem_medium] {
            let m = mem();
            let mut bounce = Vec::new();
            let mut t = GuestRead::new(&m, &segs, &mut bounce);
            // Bytes 1000.. of the transfer: a run of 3 pages' worth from the medium at 1000.
            t.medium_run(medium, 1000, 1000, 3 * 4096 - 1000).unwrap();
            t.zeroes(0, 1000);
            t.put(3 * 4096, &[9u8; 200]);
            t.finish().unwrap();
            let mut want = vec![0u8; 1000];
            want.extend_from_slice(&data[1000..3 * 4096]);
            want.extend_from_slice(&[9u8; 200]);
            let got = [
                guest(&m, 0x8000, 4096),
                guest(&m, 0x2000, 4096),
                guest(&m, 0x5000, 4096),
                guest(&m, 0x9000, 200),
            ]
            .concat();
            assert_eq!(got, want);
        }
        // A file region that ends inside the run is the medium's error.
        let short = FileMedium::new(file_of(&data[..4096]), 0);
        let m = mem();
        let mut bounce = Vec::new();
        let mut t = GuestRead::new(&m, &segs, &mut bounce);
        assert!(t.medium_run(&short, 0, 0, 3 * 4096).is_err());
    }

    /// A segment outside guest memory: the rest is still written, and the transfer ends
    /// in Data Transfer Error (not a medium error).
    #[test]
    fn guest_memory_out_of_reach_is_a_data_transfer_error() {
        let data = vec![0x5Au8; 2 * 4096];
        let segs = [(0x3000u64, 4096u64), (4 * MB as u64, 4096)];
        let medium = FileMedium::new(file_of(&data), 0);
        let m = mem();
        let mut bounce = Vec::new();
        let mut t = GuestRead::new(&m, &segs, &mut bounce);
        t.medium_run(&medium, 0, 0, 2 * 4096).unwrap();
        assert_eq!(t.finish(), Err(Status::DATA_TRANSFER_ERROR));
        assert_eq!(guest(&m, 0x3000, 4096), vec![0x5Au8; 4096]);
    }

    /// A 512 KiB run (a command of MDTS) over guest pages in reverse order: one `preadv`
    /// straight from the file, each page gets its bytes.
    #[test]
    fn a_large_run_lands_in_transfer_order() {
        let n = 512 << 10;
        let data: Vec<u8> = (0..n).map(|i| (i * 7 / 4096 + i % 13) as u8).collect();
        let pages = n / 4096;
        let segs: Vec<(u64, u64)> = (0..pages).map(|p| (((pages - 1 - p) * 4096) as u64, 4096)).collect();
        let medium = FileMedium::new(file_of(&[vec![1u8; 5], data.clone()].concat()), 5);
        let m = mem();
        let mut bounce = Vec::new();
        let mut t = GuestRead::new(&m, &segs, &mut bounce);
        t.medium_run(&medium, 0, 0, n).unwrap();
        t.finish().unwrap();
        assert!(bounce.is_empty(), "straight from the file");
        for p in 0..pages {
            assert!(guest(&m, segs[p].0, 4096) == data[p * 4096..(p + 1) * 4096], "page {p}");
        }
    }
}
