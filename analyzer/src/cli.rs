//! Command line.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "hmb-trace-analyze",
    version,
    about = "Decode, summarise, report and export hmb-trace trace.bin files"
)]
pub struct Cli {
    /// Opcode catalog (JSON); default: the firmware model's catalog.
    #[arg(long, global = true, value_name = "FILE")]
    pub catalog: Option<PathBuf>,
    /// No ANSI colours (also when NO_COLOR is set or stdout is not a terminal).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// No progress bar (it only appears on a terminal anyway).
    #[arg(long, global = true)]
    pub no_progress: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One-screen summary: records, time span, rate, drops, epochs, warnings.
    Info(TraceArg),
    /// Per-opcode and per-core counts and an inter-arrival histogram.
    Stats(StatsArgs),
    /// Human-readable records and markers.
    Decode(DecodeArgs),
    /// Write the records that match to a new trace.bin (markers kept).
    Filter(FilterCmd),
    /// Every sequence gap and LOST marker, with exact counts.
    Gaps(GapsArgs),
    /// Convert to CSV or JSON lines.
    Convert(ConvertArgs),
    /// One self-contained HTML report (no network needed to view it).
    Report(ReportArgs),
    /// Export to other formats.
    #[command(subcommand)]
    Export(ExportCmd),
    /// Inspect .pccx files.
    #[command(subcommand)]
    Pccx(PccxCmd),
    /// Print the opcode catalog in use as JSON.
    Catalog,
    /// The header of a Telemetry log (`nvme telemetry-log` output) holding a
    /// trace; every other command reads such a file as a trace directly.
    Telemetry(TelemetryArgs),
}

#[derive(Debug, Args)]
pub struct TelemetryArgs {
    /// Telemetry log file (Host- or Controller-Initiated).
    pub file: String,
    /// Also write its trace.bin stream to this file.
    #[arg(long, value_name = "FILE")]
    pub extract: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct TraceArg {
    /// trace.bin file, or - for standard input.
    pub trace: String,
}

#[derive(Debug, Args, Default, Clone)]
pub struct FilterArgs {
    /// Keep these opcodes (names or numbers; repeat or separate with commas).
    #[arg(long, value_delimiter = ',')]
    pub opcode: Vec<String>,
    /// Keep these cores (the record header's source field).
    #[arg(long, value_delimiter = ',')]
    pub core: Vec<u32>,
    /// Keep records with timestamp_ns >= this.
    #[arg(long, value_name = "NS")]
    pub from: Option<u64>,
    /// Keep records with timestamp_ns < this.
    #[arg(long, value_name = "NS")]
    pub to: Option<u64>,
    /// Keep records of this epoch.
    #[arg(long)]
    pub epoch: Option<u64>,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    pub trace: String,
    /// Machine-readable JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DecodeArgs {
    pub trace: String,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Stop after this many records.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Show payload bytes in hex.
    #[arg(long)]
    pub payload: bool,
}

#[derive(Debug, Args)]
pub struct FilterCmd {
    pub trace: String,
    /// Output trace.bin.
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Args)]
pub struct GapsArgs {
    pub trace: String,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConvertFormat {
    Csv,
    Jsonl,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    pub trace: String,
    #[arg(long, value_enum)]
    pub format: ConvertFormat,
    /// Output file (default: standard output).
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Include payload bytes as hex.
    #[arg(long)]
    pub payload: bool,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    pub trace: String,
    #[arg(short, long)]
    pub output: PathBuf,
    /// Records listed in the searchable table.
    #[arg(long, default_value_t = 1000)]
    pub records: usize,
    #[arg(long)]
    pub title: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum ExportCmd {
    /// Write a .pccx (pccx-lab's bincode layout by default) from the records the catalog maps.
    Pccx(ExportPccxArgs),
    /// Write a Perfetto trace (protobuf) for ui.perfetto.dev: tracks per source, slices, markers, counters.
    Perfetto(ExportPerfettoArgs),
    /// Write a CTF 1.8 trace directory (TSDL metadata + streams) for babeltrace2 and Trace Compass.
    Ctf(ExportCtfArgs),
    /// Write a Parquet table (a row per record and marker, a column per catalog field) for DuckDB, Spark, pandas.
    Parquet(ExportParquetArgs),
}

#[derive(Debug, Args)]
pub struct ExportParquetArgs {
    pub trace: String,
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Args)]
pub struct ExportCtfArgs {
    pub trace: String,
    /// Output directory (created; must be new or empty).
    #[arg(short, long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Args)]
pub struct ExportPerfettoArgs {
    pub trace: String,
    #[arg(short, long)]
    pub output: PathBuf,
    /// Clock used to place NPU events (given in cycles) in nanoseconds.
    #[arg(long, default_value_t = 1000)]
    pub clock_mhz: u32,
    /// Width of the records/s counter's bins, in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub rate_bin_us: u64,
    #[command(flatten)]
    pub filter: FilterArgs,
}

/// Payload layout of an exported .pccx.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PccxEncoding {
    /// bincode `NpuTrace` with current pccx-lab's five-field `NpuEvent`
    /// (`api_name: Option<String>`): what pccx-lab's UI and CLI load.
    Bincode,
    /// bincode with the seed's four-field `NpuEvent` (older pccx-lab).
    BincodeSeed,
    /// Packed 24-byte events (pccx-lab's memory-mapped reader only).
    Flatbuf,
}

impl PccxEncoding {
    pub fn describe(self) -> &'static str {
        match self {
            Self::Bincode => "bincode, pccx-lab's current layout",
            Self::BincodeSeed => "bincode, the seed's four-field layout",
            Self::Flatbuf => "flatbuf",
        }
    }
}

#[derive(Debug, Args)]
pub struct ExportPccxArgs {
    pub trace: String,
    #[arg(short, long)]
    pub output: PathBuf,
    /// Payload layout.
    #[arg(long, value_enum, default_value_t = PccxEncoding::Flatbuf)]
    pub encoding: PccxEncoding,
    /// Clock used to turn nanoseconds into cycles (header trace.clock_mhz).
    #[arg(long, default_value_t = 1000)]
    pub clock_mhz: u32,
    /// MAC array as ROWSxCOLS (header arch.mac_dims).
    #[arg(long, default_value = "32x32")]
    pub mac_dims: String,
    #[arg(long, default_value = "1.1")]
    pub isa_version: String,
    #[arg(long, default_value_t = 0.0)]
    pub peak_tops: f64,
    #[command(flatten)]
    pub filter: FilterArgs,
}

#[derive(Debug, Subcommand)]
pub enum PccxCmd {
    /// Check a .pccx completely: structure, checksum, payload decoding.
    Verify(PccxVerifyArgs),
    /// Summarise a .pccx file.
    Info(PccxInfoArgs),
}

#[derive(Debug, Args)]
pub struct PccxVerifyArgs {
    pub file: PathBuf,
    /// Treat warnings (checksum mismatch, reserved bytes, unknown encoding) as errors.
    #[arg(long)]
    pub strict: bool,
}

#[derive(Debug, Args)]
pub struct PccxInfoArgs {
    pub file: PathBuf,
    /// Also list the first N events.
    #[arg(long, default_value_t = 0)]
    pub events: usize,
}
