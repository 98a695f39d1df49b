//! Write amplification of the FTL under uniform random 4 KiB writes, at two
//! over-provisioning levels, beside the analytical value for greedy GC.
//!
//! `cargo bench -p hmb-ftl --bench write_amplification`. Per level: the logical space is
//! filled sequentially, then overwritten at random for one pass (warm-up to the steady
//! state), then for two more passes over which WA = pages programmed / pages the host
//! wrote is measured. Median of 3 runs (seeds 1..3). The map cache holds the whole map,
//! so map-page writes are only the flushes; the figure also gives the data-only WA
//! (host + GC programs).
//!
//! Analytical: greedy GC under uniform random writes, many pages per block (Bux and
//! Iliadis 2010; Desnoyers 2012): WA = alpha / (2 (alpha - 1)), alpha = physical pages
//! GC can fill / logical pages. Here alpha excludes the GC reserve and the open line,
//! which never hold data in the steady state.

use hmb_ftl::{Ftl, FtlConfig, MemMedium};

const PAGE: u64 = 4096;
const LOGICAL: u64 = 256 << 20;

fn run(op_permille: u32, seed: u64) -> (f64, f64, f64) {
    let cfg = FtlConfig {
        channels: 4,
        dies_per_channel: 2,
        pages_per_block: 64,
        op_permille,
        map_cache_pages: 64,
        wl_threshold: u32::MAX / 2, // no static wear levelling: greedy GC alone
        ..Default::default()
    };
    let bytes = Ftl::region_bytes(&cfg, LOGICAL).unwrap();
    let (mut ftl, _) = Ftl::open(&cfg, LOGICAL, Box::new(MemMedium::new(bytes).unwrap())).unwrap();
    let pages = LOGICAL / PAGE;
    let data = vec![0xA5u8; PAGE as usize];
    let mut ev = Vec::new();
    for p in 0..pages {
        ftl.write(p * PAGE, &data, 0, &mut ev).unwrap();
        ev.clear();
    }
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut random_pass = |ftl: &mut Ftl| {
        for _ in 0..pages {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ftl.write((x % pages) * PAGE, &data, 0, &mut ev).unwrap();
            ev.clear();
        }
    };
    random_pass(&mut ftl);
    let s0 = ftl.stats();
    random_pass(&mut ftl);
    random_pass(&mut ftl);
    let s1 = ftl.stats();
    let host = (s1.host_pages_written - s0.host_pages_written) as f64;
    let all = (s1.nand_programs - s0.nand_programs) as f64;
    let maps = (s1.map_page_writes - s0.map_page_writes) as f64;
    let g = &s1.geometry;
    let line_pages = u64::from(g.channels * g.dies_per_channel * g.pages_per_block);
    let usable = g.physical_pages - u64::from(cfg.gc_free_lines + 1) * line_pages - u64::from(g.map_pages);
    let alpha = usable as f64 / g.logical_pages as f64;
    (all / host, (all - maps) / host, alpha)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    println!("write amplification, uniform random 4 KiB writes, 256 MiB logical, greedy GC (median of 3)");
    println!("op_permille  alpha   WA(total)  WA(data)  greedy analytical  ratio(data/analytical)");
    for op in [70u32, 280] {
        let runs: Vec<_> = (1..=3).map(|seed| run(op, seed)).collect();
        let total = median(runs.iter().map(|r| r.0).collect());
        let data = median(runs.iter().map(|r| r.1).collect());
        let alpha = runs[0].2;
        let analytical = alpha / (2.0 * (alpha - 1.0));
        println!(
            "{op:>11}  {alpha:.3}  {total:>9.3}  {data:>8.3}  {analytical:>17.3}  {:>22.3}",
            data / analytical
        );
    }
}
