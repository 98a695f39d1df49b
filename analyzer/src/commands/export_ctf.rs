//! `export ctf`: the trace as a CTF 1.8 trace directory (crate::ctf),
//! streamed packet by packet into its stream files.

use std::io::Write;
use std::path::Path;

use crate::cli::ExportCtfArgs;
use crate::commands::{try_walk_trace, Ctx};
use crate::ctf::CtfWriter;
use crate::exit::{AppError, IO, USAGE};
use crate::filter::Filter;

pub fn run(ctx: &Ctx, args: &ExportCtfArgs, out: &mut dyn Write) -> Result<(), AppError> {
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    let dir = &args.output;
    prepare_dir(dir)?;
    let io = |e: std::io::Error| AppError::new(IO, format!("{}: {e}", dir.display()));
    let writer = CtfWriter::new(dir, &ctx.catalog).map_err(io)?;
    let (mut walked, writer) = try_walk_trace(
        ctx,
        &args.trace,
        |_| writer,
        |w, ev| w.feed(ev, |epoch, item| filter.keeps(epoch, item)),
        io,
    )?;
    let h = &walked.header;
    let env = [
        ("tracer_name", "hmb-trace-analyze".to_string()),
        ("tracer_version", env!("CARGO_PKG_VERSION").to_string()),
        ("trace_bin", walked.name.clone()),
        ("ring_abi", format!("{}.{}", h.ring_abi_major, h.ring_abi_minor)),
        ("first_epoch", h.first_epoch.to_string()),
        ("first_ring_size", h.ring_size.to_string()),
        // A damaged trace still gets a complete CTF trace of what precedes
        // the damage; the error is also the exit code.
        ("trace_bin_end", walked.ending().unwrap_or_else(|| "complete".into())),
    ];
    let s = writer.finish(&env).map_err(io)?;
    writeln!(
        out,
        "wrote a CTF 1.8 trace to {}: {} events ({} records, {} undecoded, {} markers) in {} streams, {} packets, {} bytes",
        dir.display(),
        s.events,
        s.records,
        s.undecoded,
        s.markers,
        s.streams,
        s.packets,
        s.bytes
    )?;
    writeln!(
        out,
        "discarded (LOST markers): {}; timestamps raised to keep a stream monotonic: {}",
        s.lost, s.clamped
    )?;
    walked.status()
}

/// The output directory must be new or empty: the export writes several
/// files and must not mix them with another trace's.
fn prepare_dir(dir: &Path) -> Result<(), AppError> {
    let io = |e: std::io::Error| AppError::new(IO, format!("{}: {e}", dir.display()));
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(AppError::new(
                    USAGE,
                    format!(
                        "{} is not empty; the CTF trace needs a new or empty directory",
                        dir.display()
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(dir).map_err(io),
        Err(e) => Err(io(e)),
    }
}
