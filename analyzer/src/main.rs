use std::io::{BufWriter, Write};
use std::process::ExitCode;

use clap::Parser;
use hmb_trace_analyze::{cli::Cli, exit, run};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let stdout = std::io::stdout();
    let mut out = BufWriter::with_capacity(1 << 16, stdout.lock());
    let result = run(cli, &mut out);
    let flushed = out.flush();
    let code = match (result, flushed) {
        (Ok(()), Ok(())) => exit::OK,
        (Err(e), _) => {
            if !e.message.is_empty() {
                eprintln!("error: {e}");
            }
            e.code
        }
        (Ok(()), Err(e)) => {
            let e = exit::AppError::from(e);
            if !e.message.is_empty() {
                eprintln!("error: {e}");
            }
            e.code
        }
    };
    ExitCode::from(code as u8)
}
