//! One `preadv`/`pwritev` loop for the controller's data paths (a Write's guest pages
//! into the backing: medium.rs; a Read's backing into guest pages: the nvme crate's
//! guest_read.rs): at most IOV_MAX iovecs per call, EINTR retried, a short transfer
//! continued from where it stopped, nothing transferred an error.

use std::io;

/// At most this many iovecs per call (Linux's IOV_MAX).
const IOV_MAX: usize = 1024;

/// Transfer all of `iov` at file offset `pos` with `call` (`preadv` or `pwritev` on the
/// caller's file: `call(iovecs, count, offset)`), calling again after a short transfer.
/// A call that transfers nothing gives `nothing()`'s error. The iovecs are advanced in
/// place as they are used up.
pub fn transfer_all(
    iov: &mut [libc::iovec],
    pos: u64,
    mut call: impl FnMut(*const libc::iovec, libc::c_int, libc::off_t) -> isize,
    nothing: impl Fn() -> io::Error,
) -> io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A "kernel" that moves at most 7 bytes per call (a short transfer every time) from
    /// `src` at the offset it is given: every byte arrives once, in order, across iovec
    /// boundaries, empty iovecs and more than IOV_MAX iovecs.
    #[test]
    fn short_transfers_continue_where_they_stopped() {
        let src: Vec<u8> = (0..6000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut dst = vec![0u8; 2 * IOV_MAX + 40];
        let mut iov: Vec<libc::iovec> = dst
            .chunks_mut(2)
            .enumerate()
            .map(|(i, c)| libc::iovec {
                iov_base: c.as_mut_ptr().cast(),
                iov_len: if i % 5 == 3 { 0 } else { c.len() },
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
        let got: Vec<u8> = dst
            .chunks(2)
            .enumerate()
            .filter(|(i, _)| i % 5 != 3)
            .flat_map(|(_, c)| c.to_vec())
            .collect();
        assert_eq!(got, src[100..100 + want]);
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
