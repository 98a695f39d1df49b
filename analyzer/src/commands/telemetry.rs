//! `telemetry`: the header of a Telemetry log (`nvme telemetry-log` output)
//! that carries an hmb-trace snapshot, and optionally its trace.bin stream
//! written out as a file of its own.

use std::io::Write;
use std::path::Path;

use hmb_trace_file::{FileError, TelemetryLog};

use crate::commands::{ensure_distinct, Ctx};
use crate::exit::{from_file_error, AppError};
use crate::format::{bytes, thousands};

pub fn run(ctx: &Ctx, path: &str, extract: Option<&Path>, out: &mut dyn Write) -> Result<(), AppError> {
    let data = std::fs::read(path).map_err(|e| from_file_error(path, FileError::Io(e)))?;
    let log = TelemetryLog::parse(&data).map_err(|e| from_file_error(path, e.into()))?;
    let st = ctx.style;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "{:<22} {v}", st.bold(k));
    let kind = match log.lid {
        0x07 => "Host-Initiated (07h)",
        _ => "Controller-Initiated (08h)",
    };
    row(out, "telemetry log", format!("{path}: {kind}"))?;
    row(out, "host generation", log.host_generation.to_string())?;
    row(
        out,
        "controller data",
        format!(
            "{} (generation {})",
            if log.controller_available { "available" } else { "none" },
            log.controller_generation
        ),
    )?;
    let [a1, a2, a3] = log.last_blocks;
    row(
        out,
        "data area last block",
        format!("1: {a1}, 2: {a2}, 3: {a3} (512-byte blocks)"),
    )?;
    let r = log.reason;
    row(
        out,
        "ring at snapshot",
        if r.epoch == 0 {
            "none adopted (epoch 0: the controller's own records)".to_string()
        } else {
            format!(
                "epoch {}, head {}, tail {}, {} records dropped",
                r.epoch,
                thousands(r.head),
                thousands(r.tail),
                thousands(r.dropped)
            )
        },
    )?;
    row(
        out,
        "trace stream",
        format!("{} records in {}", thousands(r.records), bytes(r.stream_bytes)),
    )?;
    if let Some(to) = extract {
        ensure_distinct(path, to)?;
        std::fs::write(to, log.stream).map_err(|e| AppError::new(crate::exit::IO, format!("{}: {e}", to.display())))?;
        row(out, "written", to.display().to_string())?;
    }
    Ok(())
}
