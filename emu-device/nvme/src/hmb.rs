//! The Host Memory Buffer: the descriptor list the host lent (Set Features 0Dh) and one
//! contiguous view across its chunks, in descriptor order.

use serde::Serialize;

use crate::config::HMB_MAX_ENTRIES;
use crate::{dma, Error, GuestMem, Status};

/// One chunk of the HMB: guest address and length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HmbDescriptor {
    pub addr: u64,
    pub bytes: u64,
}

/// The HMB the host lent. Not `Clone`: only the controller holds it, so nothing keeps
/// touching it after the controller dropped it (EHM=0, reset, shutdown, CFS).
pub struct HostMemoryBuffer {
    descs: Vec<HmbDescriptor>,
    /// Start offset of each chunk in the contiguous view.
    starts: Vec<u64>,
    len: u64,
    returned: bool,
    mem: GuestMem,
}

impl std::fmt::Debug for HostMemoryBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostMemoryBuffer")
            .field("descs", &self.descs)
            .field("len", &self.len)
            .field("returned", &self.returned)
            .finish()
    }
}

impl HostMemoryBuffer {
    pub(crate) fn new(descs: Vec<HmbDescriptor>, returned: bool, mem: GuestMem) -> Self {
        let mut starts = Vec::with_capacity(descs.len());
        let mut len = 0u64;
        for d in &descs {
            starts.push(len);
            len += d.bytes;
        }
        HostMemoryBuffer {
            descs,
            starts,
            len,
            returned,
            mem,
        }
    }

    pub fn descriptors(&self) -> &[HmbDescriptor] {
        &self.descs
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when the host returned this buffer with MR=1 and the same descriptor list the
    /// controller had before: its contents are what the controller left in it.
    pub fn returned(&self) -> bool {
        self.returned
    }

    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        let mut at = 0usize;
        for (addr, n) in self.pieces(offset, buf.len() as u64)? {
            let n = n as usize;
            dma::read(&self.mem, addr, &mut buf[at..at + n]).map_err(|_| Error::GuestMemory { addr, len: n as u64 })?;
            at += n;
        }
        Ok(())
    }

    pub fn write_at(&self, offset: u64, buf: &[u8]) -> Result<(), Error> {
        let mut at = 0usize;
        for (addr, n) in self.pieces(offset, buf.len() as u64)? {
            let n = n as usize;
            dma::write(&self.mem, addr, &buf[at..at + n]).map_err(|_| Error::GuestMemory { addr, len: n as u64 })?;
            at += n;
        }
        Ok(())
    }

    /// (guest addr, len) pieces covering [offset, offset+len): lets a producer map the slice.
    pub fn pieces(&self, offset: u64, len: u64) -> Result<Vec<(u64, u64)>, Error> {
        let range_err = Error::HmbRange {
            offset,
            len,
            size: self.len,
        };
        let end = offset.checked_add(len).ok_or(Error::HmbRange {
            offset,
            len,
            size: self.len,
        })?;
        if end > self.len {
            return Err(range_err);
        }
        let mut out = Vec::new();
        if len == 0 {
            return Ok(out);
        }
        // The chunk holding `offset`: the last one starting at or before it.
        let mut i = self.starts.partition_point(|&s| s <= offset) - 1;
        let mut pos = offset;
        while pos < end {
            let d = self.descs[i];
            let within = pos - self.starts[i];
            let n = (d.bytes - within).min(end - pos);
            out.push((d.addr + within, n));
            pos += n;
            i += 1;
        }
        Ok(out)
    }
}

/// Set Features 0Dh dwords 11..15 (NVMe 1.4 section 5.21.1.13).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct HmbAttributes {
    /// HSIZE: buffer size in memory pages.
    pub hsize: u32,
    /// HMDLLA | HMDLUA << 32: descriptor list address.
    pub list_addr: u64,
    /// HMDLEC: descriptor list entry count.
    pub entries: u32,
}

/// The limits a descriptor list is checked against.
pub(crate) struct HmbLimits {
    pub page_size: u64,
    pub hmmin_bytes: u64,
    pub hmminds_bytes: u64,
    pub hmmaxd: u16,
}

/// Read and check the host's descriptor list. Errors are the statuses the command gets.
pub(crate) fn read_descriptors(
    mem: &GuestMem,
    a: &HmbAttributes,
    lim: &HmbLimits,
) -> Result<Vec<HmbDescriptor>, Status> {
    let max_entries = if lim.hmmaxd == 0 {
        HMB_MAX_ENTRIES
    } else {
        u32::from(lim.hmmaxd)
    };
    if a.entries == 0 || a.entries > max_entries || a.hsize == 0 || !a.list_addr.is_multiple_of(16) {
        return Err(Status::INVALID_FIELD);
    }
    let mut raw = vec![0u8; a.entries as usize * 16];
    dma::read(mem, a.list_addr, &mut raw).map_err(|_| Status::DATA_TRANSFER_ERROR)?;
    let mut descs = Vec::with_capacity(a.entries as usize);
    let mut pages = 0u64;
    for e in raw.chunks_exact(16) {
        let addr = u64::from_le_bytes(e[0..8].try_into().expect("8 bytes"));
        let bsize = u32::from_le_bytes(e[8..12].try_into().expect("4 bytes"));
        let bytes = u64::from(bsize) * lim.page_size;
        if bsize == 0 || addr % lim.page_size != 0 || bytes < lim.hmminds_bytes || addr.checked_add(bytes).is_none() {
            return Err(Status::INVALID_FIELD);
        }
        if !dma::mapped(mem, addr, bytes) {
            return Err(Status::INVALID_FIELD);
        }
        pages += u64::from(bsize);
        descs.push(HmbDescriptor { addr, bytes });
    }
    if pages != u64::from(a.hsize) || pages * lim.page_size < lim.hmmin_bytes {
        return Err(Status::INVALID_FIELD);
    }
    let mut sorted = descs.clone();
    sorted.sort_by_key(|d| d.addr);
    if sorted.windows(2).any(|w| w[0].addr + w[0].bytes > w[1].addr) {
        return Err(Status::INVALID_FIELD);
    }
    Ok(descs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

    fn hmb(chunks: &[(u64, u64)]) -> HostMemoryBuffer {
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap());
        let descs = chunks
            .iter()
            .map(|&(addr, bytes)| HmbDescriptor { addr, bytes })
            .collect();
        HostMemoryBuffer::new(descs, false, mem)
    }

    #[test]
    fn pieces_cross_chunks_in_descriptor_order() {
        let h = hmb(&[(0x8000, 0x1000), (0x2000, 0x2000), (0x40000, 0x1000)]);
        assert_eq!(h.len(), 0x4000);
        assert_eq!(h.pieces(0xff0, 0x20).unwrap(), vec![(0x8ff0, 0x10), (0x2000, 0x10)]);
        assert_eq!(
            h.pieces(0x2800, 0x1800).unwrap(),
            vec![(0x3800, 0x800), (0x40000, 0x1000)]
        );
        assert!(h.pieces(0x3fff, 2).is_err());
        assert!(h.pieces(u64::MAX, 2).is_err());
        assert_eq!(h.pieces(0x4000, 0).unwrap(), vec![]);
    }

    #[test]
    fn write_then_read_across_chunks() {
        let h = hmb(&[(0x8000, 0x1000), (0x2000, 0x1000)]);
        let data: Vec<u8> = (0..64u8).collect();
        h.write_at(0x1000 - 32, &data).unwrap();
        let mut back = vec![0u8; 64];
        h.read_at(0x1000 - 32, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(h.read_at(0x1fff, &mut back).is_err());
    }
}
