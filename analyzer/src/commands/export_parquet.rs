//! `export parquet`: the trace as one Parquet table (crate::parquet_export),
//! written row group by row group into the output file.

use std::io::{BufWriter, Write};

use crate::cli::ExportParquetArgs;
use crate::commands::{open_trace, try_walk_input, Ctx};
use crate::exit::{AppError, IO};
use crate::filter::Filter;
use crate::parquet_export::{ParquetExportError, ParquetWriter};

pub fn run(ctx: &Ctx, args: &ExportParquetArgs, out: &mut dyn Write) -> Result<(), AppError> {
    crate::commands::ensure_distinct(&args.trace, &args.output)?;
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    let err = |e: ParquetExportError| AppError::new(IO, format!("{}: {e}", args.output.display()));
    // Opened first: the header goes into the file's key-value metadata.
    let input = open_trace(&args.trace)?;
    let h = input.header;
    let meta = vec![
        ("hmb_trace.trace_bin".to_string(), input.name.clone()),
        (
            "hmb_trace.ring_abi".to_string(),
            format!("{}.{}", h.ring_abi_major, h.ring_abi_minor),
        ),
        ("hmb_trace.first_epoch".to_string(), h.first_epoch.to_string()),
        ("hmb_trace.first_ring_size".to_string(), h.ring_size.to_string()),
        (
            "hmb_trace.catalog_version".to_string(),
            ctx.catalog.file.catalog_version.to_string(),
        ),
    ];
    let file = std::fs::File::create(&args.output).map_err(|e| err(e.into()))?;
    let writer = ParquetWriter::new(BufWriter::with_capacity(1 << 20, file), &ctx.catalog, meta).map_err(err)?;
    let (mut walked, writer) = try_walk_input(
        ctx,
        input,
        |_| writer,
        |w, ev| w.feed(ev, |epoch, item| filter.keeps(epoch, item)),
        err,
    )?;
    // A damaged trace still gets a complete file of what precedes the damage.
    let (s, w) = writer.finish().map_err(err)?;
    let file = w.into_inner().map_err(|e| err(e.into_error().into()))?;
    let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    writeln!(
        out,
        "wrote {} rows ({} records, {} markers, {} sequence gaps) in {} row groups, {} columns, {} bytes to {}",
        s.rows,
        s.records,
        s.markers,
        s.gaps,
        s.row_groups,
        s.columns,
        bytes,
        args.output.display()
    )?;
    walked.status()
}
