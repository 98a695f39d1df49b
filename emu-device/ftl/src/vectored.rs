//! One `preadv`/`pwritev` loop for the controller's data paths (a Write's guest pages
//! into the backing: medium.rs; a Read's backing into guest pages: the nvme crate's
//! guest_read.rs): at most IOV_MAX iovecs per call, EINTR retried, a short transfer
//! continued from where it stopped, nothing transferred an error. A large read
//! ([`transfer_split`]) is cut in two at a page boundary and its halves run at once, one on
//! a helper thread (beside.rs): the kernel's copy from the page cache into guest memory is
//! most of a 512 KiB Read's time, and QEMU's nvme does a 1 MiB transfer's two commands on
//! two workers at once (docs/performance.md, "Eighth pass: large transfers on two
//! workers"). Writes are not split: medium.rs says why.

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

/// Transfers of at least this many bytes are split: a 512 KiB command (MDTS; a 1 MiB fio
/// transfer is two) is, a 128 KiB one is not (its copy is short beside a wake-up, and at
/// QD16 the guest's vCPUs want the other core).
pub const SPLIT_MIN: usize = 256 << 10;

/// Where a split may fall: a multiple of this many bytes into the transfer.
const SPLIT_ALIGN: usize = 4096;

/// [`transfer_all`] of `iov` at `pos`, the two halves of a transfer of [`SPLIT_MIN`] bytes
/// or more at once: bytes [0, h) here, [h, total) on the helper thread, h half the total
/// rounded down to a page; the second half runs here after the first if the helper has not
/// started it by then (a busy host: no core for the helper). Both halves always run to their end; the result is an error if
/// either failed (this half's first). What the caller sees is what one `transfer_all`
/// would give it: every byte moved, or an error with the transfer's bytes indeterminate.
pub fn transfer_split<C, N>(iov: &mut [libc::iovec], pos: u64, call: C, nothing: N) -> io::Result<()>
where
    C: Fn(*const libc::iovec, libc::c_int, libc::off_t) -> isize + Sync,
    N: Fn() -> io::Error + Sync,
{
    let total: usize = iov.iter().map(|v| v.iov_len).sum();
    if total < SPLIT_MIN {
        return transfer_all(iov, pos, &call, &nothing);
    }
    let half = total / 2 / SPLIT_ALIGN * SPLIT_ALIGN;
    let (first, second) = split_at(iov, half);
    let mut second = HelperIovecs(second);
    let mut second_result = None;
    let mut side = || second_result = Some(transfer_all(second.get(), pos + half as u64, &call, &nothing));
    let first_result = crate::beside::run_beside(&mut side, || transfer_all(first, pos, &call, &nothing));
    first_result?;
    second_result.unwrap_or_else(|| Err(io::Error::other("the transfer's second half did not finish")))
}

/// The second half's iovecs, handed to the helper thread.
struct HelperIovecs(Vec<libc::iovec>);

// SAFETY: the iovecs are address ranges the caller of `transfer_split` promised to `call`
// for the whole call, which outlasts the helper's use of them (`run_beside`); the two
// halves are disjoint.
unsafe impl Send for HelperIovecs {}

impl HelperIovecs {
    /// A method, so that the closure captures the whole `Send` wrapper, not its field.
    fn get(&mut self) -> &mut [libc::iovec] {
        &mut self.0
    }
}

/// `iov` cut at byte `at`: the iovecs before it (in place, the one `at` falls in
/// shortened) and those after it (a copy, starting with the cut one's tail).
fn split_at(iov: &mut [libc::iovec], at: usize) -> (&mut [libc::iovec], Vec<libc::iovec>) {
    let mut before = 0;
    for k in 0..iov.len() {
        let len = iov[k].iov_len;
        if before + len > at {
            let head = at - before;
            let mut tail = Vec::with_capacity(iov.len() - k);
            tail.push(libc::iovec {
                // SAFETY: head < this iovec's length, so the base stays inside it.
                iov_base: unsafe { iov[k].iov_base.cast::<u8>().add(head).cast() },
                iov_len: len - head,
            });
            tail.extend_from_slice(&iov[k + 1..]);
            iov[k].iov_len = head;
            return (&mut iov[..=k], tail);
        }
        before += len;
    }
    (iov, Vec::new())
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

    /// A "kernel" over `src` for `transfer_split`: moves at most `max` bytes per call from
    /// `src` at the offset it is given (`src` indexed by file offset), records which
    /// threads called it and at which offsets, and fails (EIO, set on the calling thread
    /// as a kernel would) any call starting inside `fail`.
    struct Kernel<'a> {
        src: &'a [u8],
        max: usize,
        fail: std::ops::Range<u64>,
        /// (thread, offset, bytes moved) of every call.
        calls: std::sync::Mutex<Vec<(std::thread::ThreadId, u64, u64)>>,
    }

    impl Kernel<'_> {
        fn call(&self, iov: *const libc::iovec, count: libc::c_int, offset: libc::off_t) -> isize {
            assert!(count as usize <= IOV_MAX);
            let me = std::thread::current().id();
            if self.fail.contains(&(offset as u64)) {
                self.calls.lock().unwrap().push((me, offset as u64, 0));
                // SAFETY: this thread's errno.
                unsafe { *libc::__errno_location() = libc::EIO };
                return -1;
            }
            let (mut off, mut left, mut moved) = (offset as usize, self.max, 0);
            for i in 0..count as usize {
                // SAFETY: `iov` points at `count` iovecs of the caller's.
                let v = unsafe { &*iov.add(i) };
                let n = v.iov_len.min(left).min(self.src.len().saturating_sub(off));
                // SAFETY: each iovec is a live range of the test's destination.
                unsafe { std::ptr::copy_nonoverlapping(self.src[off..].as_ptr(), v.iov_base.cast::<u8>(), n) };
                off += n;
                left -= n;
                moved += n;
                if left == 0 || n < v.iov_len {
                    break;
                }
            }
            self.calls.lock().unwrap().push((me, offset as u64, moved as u64));
            moved as isize
        }
    }

    /// `dst` as iovecs of the given lengths in turn (0 for an empty one).
    fn iovecs(dst: &mut [u8], lens: impl Iterator<Item = usize>) -> Vec<libc::iovec> {
        let mut iov = Vec::new();
        let mut at = 0;
        for len in lens {
            let len = len.min(dst.len() - at);
            iov.push(libc::iovec {
                iov_base: dst[at..].as_mut_ptr().cast(),
                iov_len: len,
            });
            at += len;
            if at == dst.len() {
                break;
            }
        }
        assert_eq!(at, dst.len());
        iov
    }

    fn split(
        src: &[u8],
        dst: &mut [u8],
        lens: impl Iterator<Item = usize>,
        max: usize,
        fail: std::ops::Range<u64>,
    ) -> (io::Result<()>, Vec<(std::thread::ThreadId, u64, u64)>) {
        let mut iov = iovecs(dst, lens);
        let k = Kernel {
            src,
            max,
            fail,
            calls: Default::default(),
        };
        let r = transfer_split(
            &mut iov,
            5,
            |iov, count, offset| k.call(iov, count, offset),
            || io::Error::new(io::ErrorKind::UnexpectedEof, "ends"),
        );
        (r, k.calls.into_inner().unwrap())
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect()
    }

    /// Odd sizes: a transfer that is no whole number of pages, over iovecs of odd lengths
    /// (empty ones among them), the cut inside an iovec, short transfers in both halves:
    /// every byte arrives once, the helper's half starts at a page boundary of the
    /// transfer and runs on another thread.
    #[test]
    fn a_large_transfer_is_cut_at_a_page_and_both_halves_arrive() {
        for (total, lens, max) in [
            (
                SPLIT_MIN + 4096 * 3 + 123,
                [4095usize, 0, 3, 70001].as_slice(),
                9000usize,
            ),
            (SPLIT_MIN, &[4096], 1 << 20),
            (512 << 10, &[512 << 10], 1 << 20),
            (SPLIT_MIN * 3 + 1, &[1, 0, 8191], 4097),
        ] {
            let src = pattern(total + 5);
            let mut dst = vec![0u8; total];
            let (r, calls) = split(&src, &mut dst, lens.iter().copied().cycle(), max, 0..0);
            r.expect("transfer");
            assert!(dst == src[5..], "total {total}: every byte once, in order");
            let half = total / 2 / SPLIT_ALIGN * SPLIT_ALIGN;
            // The second half starts at the cut (on the helper, or here if the helper had
            // not started it when the first half was done); the first half stops there and
            // runs here.
            let (me, cut) = (std::thread::current().id(), 5 + half as u64);
            assert!(calls.iter().any(|c| c.1 == cut), "a call starts at the cut");
            assert!(calls.iter().any(|c| c.1 == 5));
            for &(thread, offset, moved) in &calls {
                if offset < cut {
                    assert!(offset + moved <= cut && thread == me, "first half: {offset} {moved}");
                }
            }
        }
    }

    /// More iovecs than IOV_MAX on each side of the cut: every call takes at most
    /// IOV_MAX, and everything arrives.
    #[test]
    fn more_iovecs_than_iov_max_on_both_halves() {
        let total = SPLIT_MIN + 1000;
        let src = pattern(total + 5);
        let mut dst = vec![0u8; total];
        // 37-byte iovecs: about 7100, more than 3 * IOV_MAX on each side.
        let (r, calls) = split(&src, &mut dst, std::iter::repeat(37), usize::MAX, 0..0);
        r.expect("transfer");
        assert!(dst == src[5..]);
        let cut = 5 + (total / 2 / SPLIT_ALIGN * SPLIT_ALIGN) as u64;
        assert!(calls.iter().filter(|c| c.1 < cut).count() >= 3);
        assert!(calls.iter().filter(|c| c.1 >= cut).count() >= 3);
    }

    /// A failure in either half (an error, or a call that moves nothing) is the
    /// transfer's error, after both halves ran.
    #[test]
    fn an_error_in_either_half_is_the_transfers() {
        let total = 512 << 10;
        let src = pattern(total + 5);
        // The first call of each half, and a later call of the first half.
        for fail in [5..6u64, 5 + (total as u64) / 2..u64::MAX, 5 + 65536..5 + 65537] {
            let mut dst = vec![0u8; total];
            let (r, calls) = split(&src, &mut dst, std::iter::repeat(4096), 64 << 10, fail.clone());
            assert_eq!(
                r.expect_err("failed").raw_os_error(),
                Some(libc::EIO),
                "fail at {fail:?}"
            );
            let cut = 5 + (total / 2) as u64;
            assert!(
                calls.iter().any(|c| c.1 < cut) && calls.iter().any(|c| c.1 >= cut),
                "both halves ran"
            );
        }
        // The file ends inside the second half: its call moves nothing.
        let mut dst = vec![0u8; total];
        let (r, _) = split(&src[..total - 100], &mut dst, std::iter::repeat(4096), 1 << 20, 0..0);
        assert_eq!(r.expect_err("ends").kind(), io::ErrorKind::UnexpectedEof);
    }

    /// Below SPLIT_MIN the transfer stays on the calling thread, short transfers and all.
    #[test]
    fn a_short_transfer_is_not_split() {
        let total = SPLIT_MIN - 1;
        let src = pattern(total + 5);
        let mut dst = vec![0u8; total];
        let (r, calls) = split(&src, &mut dst, [100usize, 0, 4096].into_iter().cycle(), 5000, 0..0);
        r.expect("transfer");
        assert!(dst == src[5..]);
        let me = std::thread::current().id();
        assert!(calls.iter().all(|c| c.0 == me));
        assert_eq!(calls.len(), total.div_ceil(5000));
    }
}
