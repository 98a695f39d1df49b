//! `export perfetto`: the trace as a Perfetto protobuf trace, streamed
//! packet by packet (crate::perfetto) into the output file.

use std::io::{BufWriter, Write};

use crate::cli::ExportPerfettoArgs;
use crate::commands::{try_walk_trace, Ctx};
use crate::exit::{AppError, IO, USAGE};
use crate::filter::Filter;
use crate::perfetto::PerfettoWriter;

pub fn run(ctx: &Ctx, args: &ExportPerfettoArgs, out: &mut dyn Write) -> Result<(), AppError> {
    crate::commands::ensure_distinct(&args.trace, &args.output)?;
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    if args.clock_mhz == 0 {
        return Err(AppError::new(USAGE, "--clock-mhz must be at least 1"));
    }
    if args.rate_bin_us == 0 {
        return Err(AppError::new(USAGE, "--rate-bin-us must be at least 1"));
    }
    let io = |e: std::io::Error| AppError::new(IO, format!("{}: {e}", args.output.display()));
    let file = std::fs::File::create(&args.output).map_err(io)?;
    let writer = PerfettoWriter::new(
        BufWriter::with_capacity(1 << 20, file),
        &ctx.catalog,
        args.clock_mhz,
        args.rate_bin_us.saturating_mul(1000),
    );
    let (mut walked, writer) = try_walk_trace(
        ctx,
        &args.trace,
        |_| writer,
        |w, ev| w.feed(ev, |epoch, item| filter.keeps(epoch, item)),
        io,
    )?;
    // A damaged trace still gets a complete file: open slices are closed.
    let (_, s) = writer.finish().map_err(io)?;
    writeln!(
        out,
        "wrote {} packets to {}: {} tracks, {} slices, {} instants, {} counter values",
        s.packets,
        args.output.display(),
        s.tracks,
        s.slices,
        s.instants,
        s.counter_values
    )?;
    writeln!(
        out,
        "pairs: {} closed unterminated (epoch change, end of trace, or {} evicted for a lane), {} ends without a begin drawn from their duration, {} as instants",
        s.closed_unterminated, s.evicted, s.ends_from_duration, s.ends_as_instants
    )?;
    writeln!(
        out,
        "markers: {} LOST, {} sequence gaps; dropped: {} slices over the lane limit, {} begins over the open limit",
        s.lost_markers, s.gaps, s.over_lane_limit, s.over_open_limit
    )?;
    if s.flows > 0 {
        writeln!(
            out,
            "flows: {} commands linked to {} device events",
            s.flows, s.flow_steps
        )?;
    }
    walked.status()
}
