//! The FTL's host cost per 4 KiB read and write, beside a plain memcpy of 4 KiB.
//!
//! `cargo bench -p hmb-ftl --bench cost_per_command`. A 64 MiB logical space (the
//! guest's namespace) on a `MemMedium`, filled once, then random 4 KiB reads and
//! overwrites (GC running underneath for the writes) through `Ftl::read` / `Ftl::write`,
//! with the map cache holding the whole map (the HMB case) and with the 4-page internal
//! cache (no HMB: most lookups miss and write back). Each figure is ns per 4 KiB
//! operation, the median of 3 runs, and its ratio to a 4 KiB `copy_from_slice` timed
//! the same way (what a flat image costs per command, the floor of any data path).
//! The model's NAND times are not waited for: this is CPU time on the host.

use std::hint::black_box;
use std::time::Instant;

use hmb_ftl::{Ftl, FtlConfig, MemMedium};

const PAGE: u64 = 4096;
const LOGICAL: u64 = 64 << 20;
const OPS: u64 = 50_000;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn filled(map_cache_pages: u32) -> Ftl {
    let cfg = FtlConfig {
        map_cache_pages,
        ..Default::default()
    };
    let bytes = Ftl::region_bytes(&cfg, LOGICAL).unwrap();
    let (mut ftl, _) = Ftl::open(&cfg, LOGICAL, Box::new(MemMedium::new(bytes).unwrap())).unwrap();
    let data = vec![0x5Au8; PAGE as usize];
    let mut ev = Vec::new();
    for p in 0..LOGICAL / PAGE {
        ftl.write(p * PAGE, &data, 0, &mut ev).unwrap();
        ev.clear();
    }
    ftl
}

/// ns per op of `OPS` random 4 KiB reads or writes.
fn ftl_ns(ftl: &mut Ftl, write: bool, seed: u64) -> f64 {
    let pages = LOGICAL / PAGE;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut buf = vec![0xA5u8; PAGE as usize];
    let mut ev = Vec::with_capacity(64);
    let t = Instant::now();
    for _ in 0..OPS {
        let off = (xorshift(&mut x) % pages) * PAGE;
        if write {
            ftl.write(off, &buf, 0, &mut ev).unwrap();
        } else {
            ftl.read(off, &mut buf, 0, &mut ev).unwrap();
        }
        ev.clear();
        black_box(&buf);
    }
    t.elapsed().as_nanos() as f64 / OPS as f64
}

/// ns per 4 KiB copy between random pages of a 64 MiB buffer (as cold as the FTL's).
fn memcpy_ns(seed: u64) -> f64 {
    let image = vec![0x5Au8; LOGICAL as usize];
    let mut buf = vec![0u8; PAGE as usize];
    let pages = LOGICAL / PAGE;
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let t = Instant::now();
    for _ in 0..OPS {
        let at = ((xorshift(&mut x) % pages) * PAGE) as usize;
        buf.copy_from_slice(black_box(&image[at..at + PAGE as usize]));
        black_box(&buf);
    }
    t.elapsed().as_nanos() as f64 / OPS as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let base = median((1..=3).map(memcpy_ns).collect());
    println!("FTL host cost per 4 KiB command, 64 MiB logical, random LBAs (median of 3 x {OPS} ops)");
    println!("memcpy 4 KiB: {base:.0} ns");
    println!("case                                  ns/op   ratio to memcpy");
    let whole_map = (LOGICAL / PAGE).div_ceil(PAGE / 4) as u32;
    for (cache, slots) in [
        ("map cache = whole map (HMB)", whole_map),
        ("4-page SRAM cache (no HMB)", 4),
    ] {
        let mut ftl = filled(slots);
        for (what, write) in [("read", false), ("write", true)] {
            let ns = median((1..=3).map(|seed| ftl_ns(&mut ftl, write, seed)).collect());
            println!("{:<38}{ns:>6.0}   {:>6.1}", format!("{what}, {cache}"), ns / base);
        }
    }
}
