//! `decode`: one line per record or marker.

use std::io::Write;
use std::ops::ControlFlow;

use crate::cli::DecodeArgs;
use crate::commands::{walk_trace, Ctx};
use crate::exit::AppError;
use crate::filter::Filter;
use crate::format::{fields_text, hex};
use crate::walk::Event;

pub fn run(ctx: &Ctx, args: &DecodeArgs, out: &mut dyn Write) -> Result<(), AppError> {
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    let st = ctx.style;
    let mut shown = 0u64;
    let mut io_err: Option<std::io::Error> = None;
    let (mut walked, ()) = walk_trace(
        ctx,
        &args.trace,
        |_| (),
        |_, ev| {
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
                    if !filter.keeps(epoch, item) {
                        return ControlFlow::Continue(());
                    }
                    shown += 1;
                    let mut l = format!(
                        "{:>10} e{epoch} #{:<8} {:>14} ns {:<14} src={:<5} len={:<4} {}",
                        item.offset,
                        item.seq(),
                        item.timestamp_ns(),
                        ctx.catalog.name(item.opcode()),
                        item.source(),
                        item.payload.len(),
                        fields_text(&ctx.catalog, item)
                    );
                    if args.payload && !item.payload.is_empty() {
                        l.push_str(&format!("\n{:>10} payload {}", "", hex(item.payload)));
                    }
                    l
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
            match writeln!(out, "{line}") {
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
