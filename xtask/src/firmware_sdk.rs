//! `cargo xtask firmware-sdk`: the C producer's own checks beyond
//! `cargo test -p hmb-firmware-sdk` (which runs in `xtask test`):
//! `--regen` rewrites include/hmb_trace_events.h from the catalog;
//! otherwise run the crate's tests again under AddressSanitizer and
//! UndefinedBehaviorSanitizer and print the library's code size for the
//! cores SSD firmware runs on.

use anyhow::Result;
use hmb_harness::workspace_root;
use xshell::{cmd, Shell};

#[derive(clap::Args)]
pub struct FirmwareSdk {
    /// Rewrite firmware-sdk/include/hmb_trace_events.h from the opcode catalog.
    #[arg(long)]
    regen: bool,
}

impl FirmwareSdk {
    pub fn run(self, sh: &Shell) -> Result<()> {
        sh.change_dir(workspace_root());
        if self.regen {
            cmd!(sh, "cargo run -q -p hmb-firmware-sdk --bin hmbt-gen-events").run()?;
            return Ok(());
        }
        // A target dir of its own: sanitized objects never mix with the
        // normal build's.
        let target = workspace_root().join("target/fwsdk-sanitize");
        cmd!(sh, "cargo test -p hmb-firmware-sdk")
            .env("HMB_FWSDK_SANITIZE", "1")
            .env("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=1")
            .env("UBSAN_OPTIONS", "halt_on_error=1:print_stacktrace=1")
            .env("CARGO_TARGET_DIR", &target)
            .run()?;
        let out = target.join("fwsdk-size");
        std::fs::create_dir_all(&out)?;
        let src = workspace_root().join("firmware-sdk/src/hmb_trace_fw.c");
        let includes = ["firmware-sdk/compat", "kmod/include/uapi", "firmware-sdk/include"].map(|d| format!("-I{d}"));
        for (name, flags) in [
            ("cortex-m3 thumb", &["-mcpu=cortex-m3", "-mthumb"][..]),
            ("cortex-r5 arm", &["-mcpu=cortex-r5", "-marm"][..]),
            ("cortex-r5 thumb", &["-mcpu=cortex-r5", "-mthumb"][..]),
            ("cortex-r52 arm", &["-mcpu=cortex-r52", "-marm"][..]),
        ] {
            let inc = &includes;
            let obj = out.join(format!("{}.o", name.replace(' ', "-")));
            cmd!(sh, "arm-none-eabi-gcc {flags...} -std=c11 -ffreestanding -Wall -Wextra -Werror -Os {inc...} -c {src} -o {obj}")
                .run()?;
            let size = cmd!(sh, "arm-none-eabi-size {obj}").read()?;
            let text = size
                .lines()
                .nth(1)
                .and_then(|l| l.split_whitespace().next())
                .unwrap_or("?");
            println!("firmware-sdk -Os {name}: {text} bytes of text, no data, no bss");
        }
        Ok(())
    }
}
