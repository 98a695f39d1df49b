//! `gaps`: every loss, from LOST markers and from sequence gaps.

use std::io::Write;

use serde_json::json;

use crate::commands::{collect_stats, Ctx};
use crate::exit::AppError;
use crate::format::thousands;

pub fn run(ctx: &Ctx, path: &str, as_json: bool, out: &mut dyn Write) -> Result<(), AppError> {
    let (mut walked, s) = collect_stats(ctx, path)?;
    if as_json {
        let v = json!({
            "lost_total": s.lost_total(),
            "lost_marked": s.lost_marked,
            "lost_unmarked": s.lost_unmarked,
            "losses": s.losses,
            "losses_not_listed": s.losses_not_listed,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default())?;
    } else {
        writeln!(
            out,
            "{:<12} {:>6} {:>14} {:>14} {:>12} {:>12} {:>16}",
            "kind", "epoch", "first_seq", "last_seq", "count", "offset", "timestamp_ns"
        )?;
        for l in &s.losses {
            let ts = if l.timestamp_ns == 0 {
                "-".to_string()
            } else {
                l.timestamp_ns.to_string()
            };
            writeln!(
                out,
                "{:<12} {:>6} {:>14} {:>14} {:>12} {:>12} {:>16}",
                l.kind,
                l.epoch,
                l.first_seq,
                l.first_seq + l.count.saturating_sub(1),
                thousands(l.count),
                l.offset,
                ts
            )?;
        }
        if s.losses_not_listed > 0 {
            writeln!(
                out,
                "... {} more losses not listed (totals below are exact)",
                thousands(s.losses_not_listed)
            )?;
        }
        writeln!(
            out,
            "total lost: {} records in {} losses ({} in LOST markers, {} in unmarked sequence gaps)",
            thousands(s.lost_total()),
            thousands(s.losses.len() as u64 + s.losses_not_listed),
            thousands(s.lost_marked),
            thousands(s.lost_unmarked)
        )?;
    }
    walked.status()
}
