//! The fuzzer's bytes read as a stream of little-endian fields. Every read
//! is `None` once the input runs out (a target then stops), and nothing is
//! consumed by a read that fails. Target-specific shapes (an address in
//! guest RAM, an offset into a BAR) are `impl Input` blocks in the target.

pub struct Input<'a>(pub &'a [u8]);

#[allow(dead_code)] // each target uses some of them
impl<'a> Input<'a> {
    pub fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    pub fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|b| b[0])
    }
    pub fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    pub fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    pub fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    /// The next `n` bytes, or all that are left if fewer.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (b, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        b
    }
    /// A length byte (0..=max) and that many bytes, or all that are left.
    pub fn sized(&mut self, max: usize) -> Option<&'a [u8]> {
        let n = self.u8()? as usize % (max + 1);
        Some(self.take(n))
    }
}
