//! One `preadv`/`pwritev` loop for the controller's data paths (a Write's guest pages
//! into the backing: medium.rs; a Read's backing into guest pages: the nvme crate's
//! guest_read.rs): iovecs that continue one another in memory merged into one (a guest's
//! physically consecutive pages are consecutive in the memfd mapping: a 512 KiB transfer
//! of 128 pages was 12-13 ranges in the guest bench, as QEMU's own `pwritev`s show), at
//! most IOV_MAX iovecs per call, EINTR retried, a short transfer continued from where it
//! stopped, nothing transferred an error.

use std::io;

/// At most this many iovecs per call (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

/// Transfer all of `iov` at file offset `pos` with `call` (`preadv` or `pwritev` on the
/// caller's file: `call(iovecs, count, offset)`), calling again after a short transfer.
/// A call that transfers nothing gives `nothing()`'s error. The iovecs are merged and
/// advanced in place as they are used up (their contents afterwards are unspecified).
pub fn transfer_all(
    iov: &mut [libc::iovec],
    pos: u64,
    mut call: impl FnMut(*const libc::iovec, libc::c_int, libc::off_t) -> isize,
    nothing: impl Fn() -> io::Error,
) -> io::Result<()> {
    let n = merge_adjacent(iov);
    let iov = &mut iov[..n];
    let (mut first, mut done) = (0usize, 0u64);
    while first < iov.len() {
        if iov[first].iov_len == 0 {
            first += 1;
            continue;
        }
        let count = (iov.len() - first).min(IOV_MAX) as libc::c_int;
        let offset = libc::off_t::try_from(pos + done).map_err(io::Error::other)?;
        let moved = call(iov[first..].as_ptr(), count, offset);
        if moved < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if moved == 0 {
            return Err(nothing());
        }
        let mut moved = moved as usize;
        done += moved as u64;
        // Past what was transferred: whole iovecs, then part of one.
        while first < iov.len() && moved >= iov[first].iov_len {
            moved -= iov[first].iov_len;
            first += 1;
        }
        if moved > 0 {
            let v = &mut iov[first];
            // SAFETY: `moved` < this iovec's length, so the new base stays inside it.
            v.iov_base = unsafe { v.iov_base.cast::<u8>().add(moved).cast() };
            v.iov_len -= moved;
        }
    }
    Ok(())
}

/// Merge each iovec that starts where the one before it ends into that one, and drop
/// empty ones, into a prefix of `iov` whose length is returned: the same bytes in the
/// same order, in fewer iovecs.
fn merge_adjacent(iov: &mut [libc::iovec]) -> usize {
    let mut n = 0usize;
    for i in 0..iov.len() {
        let v = iov[i];
        if v.iov_len == 0 {
            continue;
        }
        if n > 0 {
            let last = &mut iov[n - 1];
            if last.iov_base.cast::<u8>().wrapping_add(last.iov_len) == v.iov_base.cast::<u8>() {
                last.iov_len += v.iov_len;
                continue;
            }
        }
        iov[n] = v;
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A "kernel" that moves at most 7 bytes per call (a short transfer every time) from
    /// `src` at the offset it is given: every byte arrives once, in order, across iovec
    /// boundaries, empty iovecs and more than IOV_MAX iovecs (2 bytes of every 3, so
    /// that none continues the one before it).
    #[test]
    fn short_transfers_continue_where_they_stopped() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; 3 * (2 * IOV_MAX + 20)];
        let mut iov: Vec<libc::iovec> = dst
            .chunks_mut(3)
            .enumerate()
            .map(|(i, c)| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: if i % 5 == 3 { 0 } else { 2 },
            })
            .collect();
        let want: usize = iov.iter().map(|v| v.iov_len).sum();
        let mut calls = 0;
        transfer_all(
            &mut iov,
            100,
            |iov, count, offset| {
                calls += 1;
                assert!(count as usize <= IOV_MAX);
                let (mut off, mut left) = (offset as usize, 7usize);
                let mut moved = 0;
                for i in 0..count as usize {
                    // SAFETY: `iov` points at `count` iovecs of the caller's slice.
                    let v = unsafe { &*iov.add(i) };
                    let n = v.iov_len.min(left);
                    // SAFETY: each iovec is a live range of `dst`.
                    unsafe { std::ptr::copy_nonoverlapping(src[off..].as_ptr(), v.iov_base.cast::<u8>(), n) };
                    off += n;
                    left -= n;
                    moved += n;
                    if left == 0 {
                        break;
                    }
                }
                moved as isize
            },
            || io::Error::other("nothing"),
        )
        .expect("transfer");
        assert_eq!(calls, want.div_ceil(7));
        assert!(want / 2 > IOV_MAX, "more iovecs than one call takes");
        let got: Vec<u8> = dst
            .chunks(3)
            .enumerate()
            .filter(|(i, _)| i % 5 != 3)
            .flat_map(|(_, c)| c[..2].to_vec())
            .collect();
        assert_eq!(got, src[100..100 + want]);
    }

    /// Iovecs that continue one another (as a guest's consecutive pages do) reach the
    /// kernel as one; the others, and the order, stay as they were; empty ones go.
    #[test]
    fn iovecs_that_continue_one_another_are_one() {
        let src: Vec<u8> = (0..64u32).map(|i| i as u8 + 1).collect();
        let mut dst = [0u8; 64];
        let base = dst.as_mut_ptr();
        // [0, 8) [8, 16) [16, 16) [16, 20) | [40, 48) | [24, 30) [30, 32) | [0, 0)
        let ranges = [(0, 8), (8, 8), (16, 0), (16, 4), (40, 8), (24, 6), (30, 2), (0, 0)];
        let mut iov: Vec<libc::iovec> = ranges
            .iter()
            .map(|&(at, len)| libc::iovec {
                // SAFETY: inside `dst`.
                iov_base: unsafe { base.add(at) }.cast(),
                iov_len: len,
            })
            .collect();
        let mut seen = Vec::new();
        transfer_all(
            &mut iov,
            0,
            |iov, count, offset| {
                let mut off = offset as usize;
                for i in 0..count as usize {
                    // SAFETY: `iov` points at `count` iovecs of the caller's slice.
                    let v = unsafe { &*iov.add(i) };
                    seen.push((v.iov_base as usize - base as usize, v.iov_len));
                    // SAFETY: each iovec is a live range of `dst`.
                    unsafe { std::ptr::copy_nonoverlapping(src[off..].as_ptr(), v.iov_base.cast::<u8>(), v.iov_len) };
                    off += v.iov_len;
                }
                (off - offset as usize) as isize
            },
            || io::Error::other("nothing"),
        )
        .expect("transfer");
        assert_eq!(seen, [(0, 20), (40, 8), (24, 8)]);
        assert_eq!(dst[..20], src[..20]);
        assert_eq!(dst[40..48], src[20..28]);
        assert_eq!(dst[24..32], src[28..36]);
        assert!(dst[20..24]
            .iter()
            .chain(&dst[32..40])
            .chain(&dst[48..])
            .all(|&b| b == 0));
    }

    #[test]
    fn a_call_that_moves_nothing_is_an_error() {
        let mut buf = [0u8; 8];
        let mut iov = [libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        }];
        let e = transfer_all(
            &mut iov,
            0,
            |_, _, _| 0,
            || io::Error::new(io::ErrorKind::UnexpectedEof, "ends"),
        )
        .expect_err("nothing moved");
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
