//! The subcommands, each writing to a caller-given output.

pub mod convert;
pub mod decode;
pub mod export;
pub mod export_ctf;
pub mod export_parquet;
pub mod export_perfetto;
pub mod filter;
pub mod gaps;
pub mod info;
pub mod pccx;
pub mod report;
pub mod stats;
pub mod telemetry;

use std::ops::ControlFlow;

use hmb_trace_file::FileHeader;

use crate::catalog::Catalog;
use crate::exit::{from_file_error, AppError};
use crate::format::Style;
use crate::input::TraceInput;
pub use crate::input::Walked;
use crate::parallel::{default_target, stats_split, PARALLEL_MIN_BYTES};
use crate::progress::Progress;
use crate::stats::Stats;
use crate::walk::{Event, Walker};

/// What every subcommand needs besides its own arguments.
pub struct Ctx {
    pub catalog: Catalog,
    pub style: Style,
    pub progress: bool,
}

/// Open `path`, build a state from its header with `init`, and feed every
/// event to `f` until the end, an error, or `f` breaks.
pub fn walk_trace<S>(
    ctx: &Ctx,
    path: &str,
    init: impl FnOnce(&FileHeader) -> S,
    f: impl FnMut(&mut S, &Event<'_, '_>) -> ControlFlow<()>,
) -> Result<(Walked, S), AppError> {
    let input = open_trace(path)?;
    Ok(walk_input(ctx, input, init, f))
}

pub fn open_trace(path: &str) -> Result<TraceInput, AppError> {
    TraceInput::open(path).map_err(|e| from_file_error(path, e))
}

/// `walk_trace` over an input already open.
pub fn walk_input<S>(
    ctx: &Ctx,
    mut input: TraceInput,
    init: impl FnOnce(&FileHeader) -> S,
    mut f: impl FnMut(&mut S, &Event<'_, '_>) -> ControlFlow<()>,
) -> (Walked, S) {
    let mut state = init(&input.header);
    let progress = Progress::new(input.file_len, ctx.progress);
    let mut walker = Walker::new(&input.header);
    let end = input.walk(
        &progress,
        #[inline(always)]
        |item| {
            // A device record whose seq is the one expected next (nearly
            // every record) is `feed`'s `Event::Record` without its
            // classification and event closure (`Walker::in_order`; about 100
            // instructions per record of `convert --format csv`).
            if !item.is_marker() && walker.in_order(item.seq()) {
                return f(
                    &mut state,
                    &Event::Record {
                        epoch: walker.epoch(),
                        item,
                    },
                );
            }
            let mut flow = ControlFlow::Continue(());
            walker.feed(item, &mut |ev| {
                if flow.is_continue() {
                    flow = f(&mut state, &ev);
                }
            });
            flow
        },
    );
    progress.finish();
    (input.into_walked(end), state)
}

/// `walk_trace` into a writer whose feeding can fail (the exports): the
/// first error ends the walk and is returned through `on_err`; a damaged
/// trace is not an error here but the `Walked` status the caller ends with.
pub fn try_walk_trace<S, E>(
    ctx: &Ctx,
    path: &str,
    init: impl FnOnce(&FileHeader) -> S,
    f: impl FnMut(&mut S, &Event<'_, '_>) -> Result<(), E>,
    on_err: impl FnOnce(E) -> AppError,
) -> Result<(Walked, S), AppError> {
    try_walk_input(ctx, open_trace(path)?, init, f, on_err)
}

/// `try_walk_trace` over an input already open.
pub fn try_walk_input<S, E>(
    ctx: &Ctx,
    input: TraceInput,
    init: impl FnOnce(&FileHeader) -> S,
    mut f: impl FnMut(&mut S, &Event<'_, '_>) -> Result<(), E>,
    on_err: impl FnOnce(E) -> AppError,
) -> Result<(Walked, S), AppError> {
    let mut failed = None;
    let (walked, state) = walk_input(ctx, input, init, |s, ev| match f(s, ev) {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => {
            failed = Some(e);
            ControlFlow::Break(())
        }
    });
    match failed {
        Some(e) => Err(on_err(e)),
        None => Ok((walked, state)),
    }
}

/// Refuse to write over the trace being read: truncating a file that is
/// memory-mapped would crash the reader (SIGBUS) and destroy the input.
pub fn ensure_distinct(input: &str, output: &std::path::Path) -> Result<(), AppError> {
    use std::os::unix::fs::MetadataExt;
    if input == "-" {
        return Ok(());
    }
    if let (Ok(a), Ok(b)) = (std::fs::metadata(input), std::fs::metadata(output)) {
        if a.dev() == b.dev() && a.ino() == b.ino() {
            return Err(AppError::new(
                crate::exit::USAGE,
                format!("output {} is the input trace; choose another file", output.display()),
            ));
        }
    }
    Ok(())
}

/// Accounting over the whole trace: on both cores for a mapped file of
/// some size (`parallel`), else in one walk; the same result either way.
pub fn collect_stats(ctx: &Ctx, path: &str) -> Result<(Walked, Stats), AppError> {
    let input = open_trace(path)?;
    if let Some(bytes) = input.mapped_bytes().filter(|b| b.len() >= PARALLEL_MIN_BYTES) {
        let progress = Progress::new(input.file_len, ctx.progress);
        let (end, stats) = stats_split(
            bytes,
            &input.header,
            default_target(&input.header, bytes.len()),
            &progress,
            true,
        );
        progress.finish();
        return Ok((input.into_walked(end), stats));
    }
    Ok(collect_stats_sequential(ctx, input))
}

/// `collect_stats` in one walk over an input already open.
pub fn collect_stats_sequential(ctx: &Ctx, input: TraceInput) -> (Walked, Stats) {
    let (walked, mut stats) = walk_input(
        ctx,
        input,
        |h| Stats::new(h.first_epoch, h.ring_size),
        |s, ev| {
            s.add(ev);
            ControlFlow::Continue(())
        },
    );
    stats.finish();
    (walked, stats)
}
