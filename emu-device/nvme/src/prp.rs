//! PRP walking (NVMe 1.4 section 4.3): PRP1, PRP2 as a second page or as a pointer to a
//! PRP list, lists chained through their last entry. Produces the guest (addr, len)
//! segments of a transfer, adjacent segments merged.

use crate::dma;
use crate::{GuestMem, Status};

/// Guest segments of a `len`-byte transfer described by PRP1/PRP2 with memory page size `ps`.
pub(crate) fn segments(mem: &GuestMem, prp1: u64, prp2: u64, len: usize, ps: u64) -> Result<Vec<(u64, u64)>, Status> {
    let mut out = Segments(Vec::new());
    if len == 0 {
        return Ok(out.0);
    }
    // PRP1 may carry an offset, but only a dword-aligned one (bits 1:0 clear).
    if prp1 & 3 != 0 {
        return Err(Status::INVALID_PRP_OFFSET);
    }
    let mut remaining = len as u64;
    let first = remaining.min(ps - (prp1 % ps));
    out.push(prp1, first)?;
    remaining -= first;
    if remaining == 0 {
        return Ok(out.0);
    }
    if remaining <= ps {
        // PRP2 is the second (and last) data page: no offset allowed.
        if !prp2.is_multiple_of(ps) {
            return Err(Status::INVALID_PRP_OFFSET);
        }
        out.push(prp2, remaining)?;
        return Ok(out.0);
    }
    // PRP2 points to a PRP list; the list pointer may have a qword-aligned offset.
    if prp2 & 7 != 0 {
        return Err(Status::INVALID_PRP_OFFSET);
    }
    let mut entry = prp2;
    // The entries this transfer uses are read a list page's worth at a time (at most
    // LIST_CHUNK of them), not one guest memory access each: a 512 KiB transfer's list is
    // 128 entries (docs/nvme-controller.md, "Where a large transfer's time goes").
    let mut chunk = [0u8; LIST_CHUNK * 8];
    while remaining > 0 {
        let left_in_page = ((ps - entry % ps) / 8) as usize;
        let want = left_in_page.min(remaining.div_ceil(ps) as usize).min(LIST_CHUNK);
        let bytes = &mut chunk[..want * 8];
        // A chunk that cannot be read at once is read entry by entry, so the first bad
        // entry decides the status exactly as it always did.
        let bulk = dma::read(mem, entry, bytes).is_ok();
        for k in 0..want {
            let last_in_page = (entry % ps) + 8 == ps;
            let value = if bulk {
                u64::from_le_bytes(bytes[k * 8..k * 8 + 8].try_into().expect("8 bytes"))
            } else {
                dma::read_u64(mem, entry).map_err(|_| Status::DATA_TRANSFER_ERROR)?
            };
            if last_in_page && remaining > ps {
                // More than one page left: the last entry of a list page chains to the
                // next list (always the chunk's last entry: `want` stops at the page end).
                if value % ps != 0 {
                    return Err(Status::INVALID_PRP_OFFSET);
                }
                entry = value;
                break;
            }
            if value % ps != 0 {
                return Err(Status::INVALID_PRP_OFFSET);
            }
            let n = remaining.min(ps);
            out.push(value, n)?;
            remaining -= n;
            entry = entry.checked_add(8).ok_or(Status::DATA_TRANSFER_ERROR)?;
        }
    }
    Ok(out.0)
}

/// PRP list entries read in one guest memory access at most (one 4 KiB list page).
const LIST_CHUNK: usize = 512;

struct Segments(Vec<(u64, u64)>);

impl Segments {
    fn push(&mut self, addr: u64, len: u64) -> Result<(), Status> {
        addr.checked_add(len).ok_or(Status::DATA_TRANSFER_ERROR)?;
        if let Some(last) = self.0.last_mut() {
            if last.0 + last.1 == addr {
                last.1 += len;
                return Ok(());
            }
        }
        self.0.push((addr, len));
        Ok(())
    }
}

/// Copy guest data described by `segs` into `buf` (exactly the segments' total length).
pub(crate) fn gather(mem: &GuestMem, segs: &[(u64, u64)], buf: &mut [u8]) -> Result<(), Status> {
    let mut at = 0usize;
    for &(addr, len) in segs {
        let len = len as usize;
        dma::read(mem, addr, &mut buf[at..at + len]).map_err(|_| Status::DATA_TRANSFER_ERROR)?;
        at += len;
    }
    Ok(())
}

/// Copy `buf` into the guest pages described by `segs`.
pub(crate) fn scatter(mem: &GuestMem, segs: &[(u64, u64)], buf: &[u8]) -> Result<(), Status> {
    let mut at = 0usize;
    for &(addr, len) in segs {
        let len = len as usize;
        dma::write(mem, addr, &buf[at..at + len]).map_err(|_| Status::DATA_TRANSFER_ERROR)?;
        at += len;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

    fn mem() -> GuestMem {
        GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap())
    }

    fn put_list(m: &GuestMem, at: u64, entries: &[u64]) {
        for (i, e) in entries.iter().enumerate() {
            dma::write(m, at + 8 * i as u64, &e.to_le_bytes()).unwrap();
        }
    }

    #[test]
    fn single_page_with_offset() {
        let m = mem();
        assert_eq!(segments(&m, 0x1010, 0, 0x100, 4096).unwrap(), vec![(0x1010, 0x100)]);
    }

    #[test]
    fn two_pages_use_prp2_directly() {
        let m = mem();
        assert_eq!(
            segments(&m, 0x1800, 0x5000, 4096, 4096).unwrap(),
            vec![(0x1800, 0x800), (0x5000, 0x800)]
        );
        assert_eq!(
            segments(&m, 0x1800, 0x5008, 4096, 4096),
            Err(Status::INVALID_PRP_OFFSET)
        );
    }

    #[test]
    fn list_chains_through_last_entry_of_page() {
        let m = mem();
        // The list starts two entries before the end of page 0x10000: entry 0 is data,
        // entry 1 chains to the list page at 0x20000.
        put_list(&m, 0x10ff0, &[0x30000, 0x20000]);
        put_list(&m, 0x20000, &[0x40000, 0x50000]);
        let segs = segments(&m, 0x8000, 0x10ff0, 4 * 4096, 4096).unwrap();
        assert_eq!(
            segs,
            vec![(0x8000, 4096), (0x30000, 4096), (0x40000, 4096), (0x50000, 4096)]
        );
    }

    #[test]
    fn bad_list_entries_are_statuses() {
        let m = mem();
        put_list(&m, 0x10000, &[0x30010, 0x40000]);
        assert_eq!(
            segments(&m, 0x8000, 0x10000, 3 * 4096, 4096),
            Err(Status::INVALID_PRP_OFFSET)
        );
        assert_eq!(segments(&m, 0x8002, 0, 16, 4096), Err(Status::INVALID_PRP_OFFSET));
        // A list outside guest memory.
        assert_eq!(
            segments(&m, 0x8000, 0x7fff_0000, 3 * 4096, 4096),
            Err(Status::DATA_TRANSFER_ERROR)
        );
        // A list that wraps the address space.
        assert!(segments(&m, 0x8000, u64::MAX - 7, 3 * 4096, 4096).is_err());
    }

    /// The entries are read a chunk at a time, but a chunk that reaches outside guest
    /// memory still gives the first bad entry's status: a misaligned entry before the
    /// unreadable ones is Invalid PRP Offset, as when every entry was read on its own.
    #[test]
    fn the_first_bad_entry_decides_even_when_the_chunk_is_unreadable() {
        // Guest memory ends 8 bytes before a page boundary: of the list's two entries
        // left in that page, the second is outside it, so the chunk cannot be read.
        let end = (1u64 << 20) - 8;
        let m: GuestMem =
            GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), end as usize)]).unwrap());
        put_list(&m, end - 8, &[0x30010]);
        assert_eq!(
            segments(&m, 0x8000, end - 8, 3 * 4096, 4096),
            Err(Status::INVALID_PRP_OFFSET)
        );
        put_list(&m, end - 8, &[0x30000]);
        assert_eq!(
            segments(&m, 0x8000, end - 8, 3 * 4096, 4096),
            Err(Status::DATA_TRANSFER_ERROR)
        );
    }

    /// A long list over a chained page: 600 pages, 511 data entries and the chain in the
    /// first list page, the rest in the second; read in chunks, walked as before.
    #[test]
    fn a_long_list_is_walked_across_its_chain() {
        let m = mem();
        let first: Vec<u64> = (0..511u64).map(|i| 0x1000 * (2 * i + 1)).chain([0x20_000u64]).collect();
        put_list(&m, 0x10_000, &first);
        let rest: Vec<u64> = (511..599u64).map(|i| 0x1000 * (2 * i + 1)).collect();
        put_list(&m, 0x20_000, &rest);
        let segs = segments(&m, 0x800_0000, 0x10_000, 600 * 4096, 4096).unwrap();
        assert_eq!(segs.len(), 600);
        assert_eq!(segs[0], (0x800_0000, 4096));
        assert_eq!(segs[1], (0x1000, 4096));
        assert_eq!(segs[599], (0x1000 * (2 * 598 + 1), 4096));
    }

    #[test]
    fn contiguous_pages_merge() {
        let m = mem();
        put_list(&m, 0x10000, &[0x9000, 0xa000]);
        assert_eq!(
            segments(&m, 0x8000, 0x10000, 3 * 4096, 4096).unwrap(),
            vec![(0x8000, 3 * 4096)]
        );
    }
}
