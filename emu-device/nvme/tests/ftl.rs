//! The FTL behind the controller: random writes over a small namespace several times its
//! size (GC and wear levelling run), Write Zeroes and deallocation, then a power cycle
//! (a new controller over the same backing file, the old one dropped without shutdown):
//! everything the host wrote reads back, from NAND through the L2P map.

mod common;

use common::*;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{Backing, ControllerConfig, NamespaceImage, Status};

const NS: u64 = 8 << 20;
const SECTORS: u64 = NS / 512;

fn cfg(path: &std::path::Path) -> ControllerConfig {
    ControllerConfig {
        backing: Backing::SparseFile(path.to_path_buf()),
        namespace_bytes: NS,
        ..Default::default()
    }
}

fn st(h: &mut FakeHost, c: Command) -> Status {
    h.submit(1, c).expect("completes inline").status
}

fn check_all(h: &mut FakeHost, model: &[u8]) {
    // 64 KiB reads (MDTS is 512 KiB).
    for chunk in 0..SECTORS / 128 {
        let (c, back) = h.read_lbas(1, chunk * 128, 128, 9);
        assert!(c.ok());
        let at = (chunk * 128 * 512) as usize;
        assert!(back == model[at..at + back.len()], "64 KiB at byte {at} differs");
    }
}

#[test]
fn data_survives_gc_deallocation_and_a_power_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let mut model = vec![0u8; NS as usize];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut h = ready_host(cfg(&path));
    // Three times the namespace in random 4 KiB-aligned writes of 1 to 8 KiB (partial
    // pages too), a few zeroings between them.
    let mut written = 0u64;
    let mut n = 0u64;
    while written < 3 * NS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lba = (x % (SECTORS - 16)) & !7;
        let nlb = 2 + (x >> 32) % 15;
        let data = pattern((nlb * 512) as usize, n);
        assert!(h.write_lbas(1, lba, &data, 9).ok());
        model[(lba * 512) as usize..((lba + nlb) * 512) as usize].copy_from_slice(&data);
        written += nlb * 512;
        n += 1;
        if n.is_multiple_of(500) {
            let (slba, nlb) = (x % (SECTORS - 300), 1 + (x >> 40) % 256);
            let cmd = Command::new(0x08)
                .nsid(1)
                .cdw(10, slba as u32)
                .cdw(11, 0)
                .cdw(12, nlb as u32 - 1);
            assert_eq!(st(&mut h, cmd), Status::SUCCESS);
            model[(slba * 512) as usize..((slba + nlb) * 512) as usize].fill(0);
        }
    }
    let ftl = h.ctrl.report().namespace.ftl;
    assert!(ftl.gc_runs > 0, "{ftl:?}");
    assert!(ftl.nand_programs > ftl.host_pages_written, "GC moved pages: {ftl:?}");
    check_all(&mut h, &model);
    drop(h); // no shutdown: the map pages still only in the cache are replayed at mount
    let mut h = ready_host(cfg(&path));
    check_all(&mut h, &model);
    // What host tools read: the namespace exported through the FTL, the file untouched
    // (the export recovers into an overlay, with map pages still to replay: no shutdown).
    drop(h);
    let before = std::fs::read(&path).unwrap();
    let out = dir.path().join("export.img");
    let mut image = NamespaceImage::open(&path, NS).unwrap();
    image.export(&out).unwrap();
    assert!(std::fs::read(&out).unwrap() == model, "the export equals the model");
    let mut piece = vec![0u8; 4096];
    image.read(NS - 4096, &mut piece).unwrap();
    assert!(piece[..] == model[(NS - 4096) as usize..]);
    assert!(std::fs::read(&path).unwrap() == before, "the export wrote nothing");
}

/// A file that holds no FTL is refused, not exported as zeroes.
#[test]
fn exporting_a_file_without_an_ftl_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blank.img");
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap();
    let e = NamespaceImage::open(&path, NS).err().expect("no FTL there");
    assert!(e.to_string().contains("no FTL"), "{e}");
}

/// A backing file of the older layout (a flat image, then the FTL region) keeps working:
/// its region is found after the image and mounted, and exported from there.
#[test]
fn a_file_of_the_older_layout_is_mounted_where_its_region_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let data = pattern(8192, 6);
    {
        let mut h = ready_host(cfg(&path));
        assert!(h.write_lbas(1, 64, &data, 9).ok());
        h.shutdown();
    }
    // Move the region behind a flat image, as the older layout had it.
    let region = std::fs::read(&path).unwrap();
    let mut old = vec![0u8; NS as usize];
    old[64 * 512..64 * 512 + data.len()].copy_from_slice(&data);
    old.extend_from_slice(&region);
    std::fs::write(&path, &old).unwrap();
    let mut h = ready_host(cfg(&path));
    let (c, back) = h.read_lbas(1, 64, 16, 9);
    assert!(c.ok());
    assert!(back == data);
    assert!(h.ctrl.report().namespace.ftl.nand_reads > 0, "read from NAND");
    drop(h);
    let mut image = NamespaceImage::open(&path, NS).unwrap();
    let mut got = vec![0u8; data.len()];
    image.read(64 * 512, &mut got).unwrap();
    assert!(got == data);
}

#[test]
fn a_flat_image_from_before_the_ftl_is_imported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let data = pattern(3 * 4096 + 512, 4);
    let mut image = vec![0u8; NS as usize];
    image[1 << 20..(1 << 20) + data.len()].copy_from_slice(&data);
    std::fs::write(&path, &image).unwrap();
    let mut h = ready_host(cfg(&path));
    let (c, back) = h.read_lbas(1, (1 << 20) / 512, (data.len() / 512) as u32, 9);
    assert!(c.ok());
    assert!(back == data);
    assert_eq!(
        h.ctrl.report().namespace.ftl.nand_reads,
        4,
        "read from NAND, not the image"
    );
}
