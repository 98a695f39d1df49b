//! What the NVMe scenarios check of the guest's I/O loop, in a leaf both
//! the device's own scenarios (`nvme`) and its lock paths
//! (`nvme_lock_paths`) use, so neither imports the other.

use anyhow::{ensure, Context, Result};
use hmb_harness::nvme_session::NvmeSession;

fn note_u64(s: &NvmeSession, key: &str) -> Result<u64> {
    s.notes()
        .get(key)
        .with_context(|| format!("the guest noted no {key}"))?
        .trim()
        .parse()
        .with_context(|| format!("{key} is not a number"))
}

/// The I/O loop ran and every round read back what it wrote.
pub(super) fn check_io(s: &NvmeSession) -> Result<()> {
    ensure!(note_u64(s, "io_rounds")? > 0, "the I/O loop made no round");
    ensure!(
        note_u64(s, "io_failures")? == 0,
        "the I/O loop failed (see console.log)"
    );
    Ok(())
}
