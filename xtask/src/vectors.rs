//! `cargo xtask vectors`: rewrite the golden ABI vectors.

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Vectors {}

impl Vectors {
    pub fn run(self, _sh: &xshell::Shell) -> Result<()> {
        let dir = hmb_harness::workspace_root().join("docs/test-vectors/v1");
        hmb_trace_abi::vectors::write_all(&dir).with_context(|| format!("writing {}", dir.display()))?;
        println!(
            "wrote {} vectors to {}",
            hmb_trace_abi::vectors::all().len(),
            dir.display()
        );
        Ok(())
    }
}
