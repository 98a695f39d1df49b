//! Record selection shared by decode, filter, convert and export.

use hmb_trace_file::Item;

use crate::catalog::Catalog;
use crate::cli::FilterArgs;
use crate::exit::{AppError, USAGE};

#[derive(Debug, Clone, Default)]
pub struct Filter {
    opcodes: Option<Vec<bool>>,
    cores: Vec<u32>,
    from: Option<u64>,
    to: Option<u64>,
    epoch: Option<u64>,
}

impl Filter {
    pub fn new(args: &FilterArgs, catalog: &Catalog) -> Result<Self, AppError> {
        let opcodes = if args.opcode.is_empty() {
            None
        } else {
            let mut set = vec![false; 1 << 16];
            for name in &args.opcode {
                let op = catalog.resolve(name).ok_or_else(|| {
                    AppError::new(
                        USAGE,
                        format!("unknown opcode {name:?} (not in the catalog, not a number)"),
                    )
                })?;
                set[op as usize] = true;
            }
            Some(set)
        };
        if let (Some(a), Some(b)) = (args.from, args.to) {
            if a > b {
                return Err(AppError::new(USAGE, format!("--from {a} is after --to {b}")));
            }
        }
        Ok(Self {
            opcodes,
            cores: args.core.clone(),
            from: args.from,
            to: args.to,
            epoch: args.epoch,
        })
    }

    pub fn is_all(&self) -> bool {
        self.opcodes.is_none()
            && self.cores.is_empty()
            && self.from.is_none()
            && self.to.is_none()
            && self.epoch.is_none()
    }

    /// Markers carry no opcode, source or time: only --epoch selects them.
    pub fn keeps_epoch(&self, epoch: u64) -> bool {
        self.epoch.is_none_or(|e| e == epoch)
    }

    pub fn keeps(&self, epoch: u64, item: &Item<'_>) -> bool {
        if let Some(set) = &self.opcodes {
            if !set[item.opcode() as usize] {
                return false;
            }
        }
        if !self.cores.is_empty() && !self.cores.contains(&item.source()) {
            return false;
        }
        let ts = item.timestamp_ns();
        if self.from.is_some_and(|f| ts < f) || self.to.is_some_and(|t| ts >= t) {
            return false;
        }
        self.epoch.is_none_or(|e| e == epoch)
    }
}
