//! `filter`: a new trace.bin with the records that match. Markers are kept
//! (EPOCH always; LOST and FROZEN when their epoch is selected), so the
//! output is a valid trace.bin. The output's header has FILE_FLAG_FILTERED
//! set, so readers do not count the removed records as sequence gaps.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::ControlFlow;

use hmb_trace_file::{Marker, TraceWriter, FILE_FLAG_FILTERED};

use crate::cli::FilterCmd;
use crate::commands::{walk_trace, Ctx};
use crate::exit::{AppError, IO};
use crate::filter::Filter;
use crate::walk::Event;

pub fn run(ctx: &Ctx, args: &FilterCmd, out: &mut dyn Write) -> Result<(), AppError> {
    crate::commands::ensure_distinct(&args.trace, &args.output)?;
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    let file = File::create(&args.output).map_err(|e| AppError::new(IO, format!("{}: {e}", args.output.display())))?;
    let mut err: Option<AppError> = None;
    let mut kept = 0u64;
    let (mut walked, writer) = walk_trace(
        ctx,
        &args.trace,
        |h| {
            let mut h = *h;
            h.flags |= FILE_FLAG_FILTERED;
            TraceWriter::new(BufWriter::new(file), &h)
        },
        |w, ev| {
            let w = match w {
                Ok(w) => w,
                Err(_) => return ControlFlow::Break(()),
            };
            let r = match *ev {
                Event::Record { epoch, item } if filter.keeps(epoch, item) => {
                    kept += 1;
                    w.write_item(item)
                }
                Event::Lost {
                    epoch,
                    first_seq,
                    count,
                    ..
                } if args.filter.epoch.is_none_or(|e| e == epoch) => w.write_marker(&Marker::Lost {
                    first_seq,
                    count,
                    epoch,
                }),
                Event::Frozen {
                    epoch,
                    last_seq,
                    next_seq,
                    ..
                } if args.filter.epoch.is_none_or(|e| e == epoch) => w.write_marker(&Marker::Frozen {
                    epoch,
                    last_seq,
                    next_seq,
                }),
                Event::EpochStart { epoch, ring_size, .. } => w.write_marker(&Marker::Epoch { epoch, ring_size }),
                _ => Ok(()),
            };
            match r {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    err = Some(AppError::new(IO, format!("{}: {e}", args.output.display())));
                    ControlFlow::Break(())
                }
            }
        },
    )?;
    let mut w = writer.map_err(|e| AppError::new(IO, format!("{}: {e}", args.output.display())))?;
    if let Some(e) = err {
        return Err(e);
    }
    w.flush()
        .map_err(|e| AppError::new(IO, format!("{}: {e}", args.output.display())))?;
    writeln!(
        out,
        "kept {kept} records, wrote {} bytes to {}",
        w.offset(),
        args.output.display()
    )?;
    walked.status()
}
