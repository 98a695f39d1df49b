//! Writes firmware-sdk/include/hmb_trace_events.h from the opcode catalog
//! the analyzer decodes (`cargo xtask firmware-sdk --regen` runs it).
//! `--check` only compares and exits 1 on a difference.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/hmb_trace_events.h");
    let header = match hmb_firmware_sdk::events::c_header(&hmb_firmware_model::catalog_json()) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("hmbt-gen-events: {e}");
            return ExitCode::from(2);
        }
    };
    let check = std::env::args().any(|a| a == "--check");
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if check {
        if current == header {
            println!("{} is up to date", path.display());
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "{} differs from the catalog: run cargo xtask firmware-sdk --regen",
            path.display()
        );
        return ExitCode::from(1);
    }
    if let Err(e) = std::fs::write(&path, header) {
        eprintln!("hmbt-gen-events: writing {}: {e}", path.display());
        return ExitCode::from(2);
    }
    println!("wrote {}", path.display());
    ExitCode::SUCCESS
}
