//! Exit codes (documented in docs/analyzer.md) and the error type that
//! carries one.

use hmb_trace_file::{FileError, TelemetryError};
use pccx::PccxError;

pub const OK: i32 = 0;
/// A bug: an internal invariant failed.
pub const INTERNAL: i32 = 1;
/// Bad command line (clap's own code).
pub const USAGE: i32 = 2;
/// A file could not be opened, read or written.
pub const IO: i32 = 3;
/// The input is not a trace.bin this build reads (magic, version, header).
pub const BAD_INPUT: i32 = 4;
/// The trace ends inside an item (torn write); output covers what precedes it.
pub const TRUNCATED: i32 = 5;
/// The trace has a corrupt item; output covers what precedes it.
pub const CORRUPT: i32 = 6;
/// A .pccx file failed to read or verify.
pub const PCCX_INVALID: i32 = 7;
/// The opcode catalog could not be loaded.
pub const CATALOG: i32 = 8;

#[derive(Debug)]
pub struct AppError {
    pub code: i32,
    pub message: String,
}

impl AppError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AppError {}

impl From<std::io::Error> for AppError {
    fn from(e: std::io::Error) -> Self {
        // A closed pipe (`| head`) is not a failure of ours.
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Self::new(OK, "");
        }
        Self::new(IO, format!("I/O error: {e}"))
    }
}

/// The exit code for a trace reading error.
pub fn file_error_code(e: &FileError) -> i32 {
    match e {
        FileError::Io(_) => IO,
        FileError::Truncated { .. } => TRUNCATED,
        FileError::Telemetry(TelemetryError::Truncated { .. }) => TRUNCATED,
        FileError::LengthTooLarge { .. } | FileError::PadInFile { .. } | FileError::BadMarker { .. } => CORRUPT,
        _ => BAD_INPUT,
    }
}

pub fn from_file_error(path: &str, e: FileError) -> AppError {
    AppError::new(file_error_code(&e), format!("{path}: {e}"))
}

pub fn from_pccx_error(path: &str, e: PccxError) -> AppError {
    let code = match e {
        PccxError::Io(_) => IO,
        _ => PCCX_INVALID,
    };
    AppError::new(code, format!("{path}: {e}"))
}
