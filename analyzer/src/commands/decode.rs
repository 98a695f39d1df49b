//! `decode`: one line per record or marker.

use std::io::Write;
use std::ops::ControlFlow;

use crate::cli::DecodeArgs;
use crate::commands::Ctx;
use crate::exit::AppError;
use crate::filter::Filter;
use crate::textout::{walk_text, ChunkOut, OpCache};
use crate::walk::Event;

pub fn run(ctx: &Ctx, args: &DecodeArgs, out: &mut dyn Write) -> Result<(), AppError> {
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    // No filter (the common case): no checks per record.
    let all = filter.is_all();
    let st = ctx.style;
    let mut shown = 0u64;
    let mut io_err: Option<std::io::Error> = None;
    let mut chunk = ChunkOut::new(out);
    let mut ops = OpCache::new(&ctx.catalog);
    // Inlined into the walk's loop: a record built by `walk_text`'s fast
    // path then needs no call and no match on the event's kind.
    let mut walked = walk_text(
        ctx,
        &args.trace,
        #[inline(always)]
        |ev| {
            if args.limit.is_some_and(|l| shown >= l) {
                return ControlFlow::Break(());
            }
            if let Some(epoch) = marker_epoch(ev) {
                if !filter.keeps_epoch(epoch) {
                    return ControlFlow::Continue(());
                }
            }
            let line = match *ev {
                Event::Record { epoch, item } => {
                    if !all && !filter.keeps(epoch, item) {
                        return ControlFlow::Continue(());
                    }
                    shown += 1;
                    // Records: straight into the output buffer (crate::textout).
                    return match chunk.decode_record(ops.get(item.opcode()), epoch, item, args.payload) {
                        Ok(()) => ControlFlow::Continue(()),
                        Err(e) => {
                            io_err = Some(e);
                            ControlFlow::Break(())
                        }
                    };
                }
                Event::Lost {
                    offset,
                    epoch,
                    first_seq,
                    count,
                } => st.warn(&format!(
                    "{offset:>10} e{epoch} -- LOST {count} records, seq {first_seq}..={}",
                    first_seq + count.saturating_sub(1)
                )),
                Event::Gap {
                    offset,
                    epoch,
                    first_seq,
                    count,
                    ..
                } => st.bad(&format!(
                    "{offset:>10} e{epoch} -- GAP {count} records missing without a LOST marker, seq {first_seq}..={}",
                    first_seq + count.saturating_sub(1)
                )),
                Event::Frozen {
                    offset,
                    epoch,
                    last_seq,
                    next_seq,
                } => st.warn(&format!(
                    "{offset:>10} e{epoch} -- FROZEN last_seq={} next_seq={next_seq}",
                    last_seq.map_or("none".to_string(), |s| s.to_string())
                )),
                Event::EpochStart {
                    offset,
                    epoch,
                    ring_size,
                } => st.bold(&format!("{offset:>10} -- EPOCH {epoch} (ring {ring_size} bytes)")),
                Event::UnknownMarker { offset, opcode } => {
                    st.dim(&format!("{offset:>10} -- marker {opcode:#06x} (unknown, skipped)"))
                }
                Event::SeqBackwards {
                    offset,
                    epoch,
                    seq,
                    expected,
                } => st.bad(&format!(
                    "{offset:>10} e{epoch} -- seq {seq} goes backwards (expected >= {expected})"
                )),
            };
            match chunk.general(|buf| writeln!(buf, "{line}")) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    io_err = Some(e);
                    ControlFlow::Break(())
                }
            }
        },
    )?;
    if let Some(e) = io_err {
        return Err(e.into());
    }
    chunk.finish()?;
    walked.status()
}

/// The epoch a non-record event belongs to.
fn marker_epoch(ev: &Event<'_, '_>) -> Option<u64> {
    match *ev {
        Event::Lost { epoch, .. }
        | Event::Gap { epoch, .. }
        | Event::Frozen { epoch, .. }
        | Event::EpochStart { epoch, .. }
        | Event::SeqBackwards { epoch, .. } => Some(epoch),
        Event::Record { .. } | Event::UnknownMarker { .. } => None,
    }
}
