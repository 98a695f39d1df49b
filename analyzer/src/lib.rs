//! hmb-trace-analyze: turns trace.bin files into answers. The binary in
//! `main.rs` is a thin shell over [`run`]; docs/analyzer.md is the manual.

pub mod catalog;
pub mod cli;
pub mod commands;
pub mod ctf;
pub mod exit;
pub mod filter;
pub mod format;
pub mod input;
pub mod latency;
pub mod parallel;
pub mod parquet_export;
pub mod perfetto;
mod perfetto_proto;
pub mod progress;
mod resync;
pub mod spill_sort;
pub mod stats;
pub mod svg;
pub mod textout;
/// The epoch/sequence walk is tracefile's (one walker for the analyzer,
/// recovery and the ground-truth check).
pub use hmb_trace_file::walk;

use std::io::{IsTerminal, Write};

use cli::{Cli, Command, ExportCmd, PccxCmd};
use commands::Ctx;
use exit::{AppError, CATALOG};

/// Run a parsed command line, writing results to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<(), AppError> {
    let catalog = match &cli.catalog {
        Some(p) => catalog::Catalog::load(p).map_err(|e| AppError::new(CATALOG, e.to_string()))?,
        None => catalog::Catalog::builtin(),
    };
    let color = !cli.no_color && std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal();
    let ctx = Ctx {
        catalog,
        style: format::Style { color },
        progress: !cli.no_progress,
    };
    match &cli.command {
        Command::Info(a) => commands::info::run(&ctx, &a.trace, out),
        Command::Telemetry(a) => commands::telemetry::run(&ctx, &a.file, a.extract.as_deref(), out),
        Command::Stats(a) => commands::stats::run(&ctx, &a.trace, a.json, out),
        Command::Decode(a) => commands::decode::run(&ctx, a, out),
        Command::Filter(a) => commands::filter::run(&ctx, a, out),
        Command::Gaps(a) => commands::gaps::run(&ctx, &a.trace, a.json, out),
        Command::Convert(a) => commands::convert::run(&ctx, a, out),
        Command::Report(a) => commands::report::run(&ctx, a, out),
        Command::Export(ExportCmd::Pccx(a)) => commands::export::run(&ctx, a, out),
        Command::Export(ExportCmd::Perfetto(a)) => commands::export_perfetto::run(&ctx, a, out),
        Command::Export(ExportCmd::Ctf(a)) => commands::export_ctf::run(&ctx, a, out),
        Command::Export(ExportCmd::Parquet(a)) => commands::export_parquet::run(&ctx, a, out),
        Command::Pccx(PccxCmd::Verify(a)) => commands::pccx::verify(&ctx, &a.file, a.strict, out),
        Command::Pccx(PccxCmd::Info(a)) => commands::pccx::info(&ctx, &a.file, a.events, out),
        Command::Catalog => {
            writeln!(out, "{}", ctx.catalog.to_json())?;
            Ok(())
        }
    }
}
