//! A progress bar on stderr, only when stderr is a terminal and the input
//! size is known; otherwise every call is a no-op.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    pub fn new(total: Option<u64>, enabled: bool) -> Self {
        let bar = match total {
            Some(total) if enabled && std::io::stderr().is_terminal() && total > (64 << 20) => {
                let bar = ProgressBar::new(total);
                if let Ok(style) =
                    ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                {
                    bar.set_style(style);
                }
                Some(bar)
            }
            _ => None,
        };
        Self { bar }
    }

    pub fn hidden() -> Self {
        Self { bar: None }
    }

    pub fn set(&self, pos: u64) {
        if let Some(b) = &self.bar {
            b.set_position(pos);
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
