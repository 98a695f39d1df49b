//! `report`: one self-contained HTML file (inline CSS, inline SVG, a few
//! lines of inline JavaScript for the table search; nothing fetched).

use std::io::Write;
use std::ops::ControlFlow;

use minijinja::{context, Environment};
use serde::Serialize;

use crate::cli::ReportArgs;
use crate::commands::{walk_trace, Ctx};
use crate::exit::{AppError, INTERNAL, IO};
use crate::format::{bytes, duration_ns, fields_text, thousands};
use crate::latency::{Latency, Measure};
use crate::stats::{bucket_floor, Stats};
use crate::svg;
use crate::walk::Event;

const TEMPLATE: &str = include_str!("../../templates/report.html");
/// Bins of the rate chart; widths double as the trace grows (bounded memory).
const RATE_BINS: usize = 200;
/// Largest value of --records.
const MAX_ROWS: usize = 100_000;

/// Record counts per time bin, merging neighbours when the span outgrows
/// the bins.
struct RateBins {
    base: Option<u64>,
    width: u64,
    bins: Vec<u64>,
}

impl RateBins {
    fn new() -> Self {
        Self {
            base: None,
            width: 1000,
            bins: vec![0; RATE_BINS],
        }
    }

    fn add(&mut self, ts: u64) {
        let base = *self.base.get_or_insert(ts);
        let mut idx = ts.saturating_sub(base) / self.width;
        while idx >= RATE_BINS as u64 {
            for i in 0..RATE_BINS / 2 {
                self.bins[i] = self.bins[2 * i] + self.bins[2 * i + 1];
            }
            self.bins[RATE_BINS / 2..].iter_mut().for_each(|b| *b = 0);
            self.width *= 2;
            idx = ts.saturating_sub(base) / self.width;
        }
        self.bins[idx as usize] += 1;
    }
}

#[derive(Serialize)]
struct Row {
    offset: u64,
    epoch: u64,
    seq: String,
    ts: String,
    name: String,
    source: String,
    len: String,
    fields: String,
    marker: bool,
}

#[derive(Serialize)]
struct Card {
    key: &'static str,
    value: String,
    class: &'static str,
}

/// The timeline of the first listed records: one lane per source (named as
/// in the Perfetto export), a bar per record from `ts - duration` (its
/// catalog duration field, if any) to `ts`.
#[derive(Default)]
struct Timeline {
    lanes: Vec<String>,
    index: std::collections::HashMap<String, usize>,
    /// (lane, start ns, end ns, label).
    marks: Vec<(usize, u64, u64, String)>,
}

/// Lanes in the timeline at most; records of other sources are left out.
const MAX_LANES: usize = 256;

impl Timeline {
    fn add(&mut self, ctx: &Ctx, item: &hmb_trace_file::Item<'_>) {
        let op = ctx.catalog.get(item.opcode());
        let name = crate::perfetto::source_name(op.map_or("", |o| o.source.as_str()), item.source());
        let lane = match self.index.get(&name) {
            Some(&l) => l,
            None if self.lanes.len() < MAX_LANES => {
                self.lanes.push(name.clone());
                self.index.insert(name, self.lanes.len() - 1);
                self.lanes.len() - 1
            }
            None => return,
        };
        let ts = item.timestamp_ns();
        let dur = op
            .and_then(|o| match &o.pccx {
                Some(crate::catalog::PccxMap::Span { duration_field, .. }) => o.field(item.payload, duration_field),
                _ => None,
            })
            .unwrap_or(0);
        self.marks
            .push((lane, ts.saturating_sub(dur), ts, ctx.catalog.name(item.opcode())));
    }
}

struct State<'c> {
    timeline: Timeline,
    stats: Stats,
    latency: Latency<'c>,
    rate: RateBins,
    rows: Vec<Row>,
    /// Loss time (ns) and count, for the timeline (capped like Stats).
    loss_marks: Vec<(u64, u64, String)>,
    last_ts: u64,
}

pub fn run(ctx: &Ctx, args: &ReportArgs, out: &mut dyn Write) -> Result<(), AppError> {
    crate::commands::ensure_distinct(&args.trace, &args.output)?;
    let max_rows = args.records.min(MAX_ROWS);
    let (mut walked, st) = walk_trace(
        ctx,
        &args.trace,
        |h| State {
            timeline: Timeline::default(),
            stats: Stats::new(h.first_epoch, h.ring_size),
            latency: Latency::new(&ctx.catalog),
            rate: RateBins::new(),
            rows: Vec::new(),
            loss_marks: Vec::new(),
            last_ts: 0,
        },
        |s, ev| {
            s.stats.add(ev);
            s.latency.add(ev);
            let marker = |offset, epoch, name: String, fields: String| Row {
                offset,
                epoch,
                seq: String::new(),
                ts: String::new(),
                name,
                source: String::new(),
                len: String::new(),
                fields,
                marker: true,
            };
            let want_row = s.rows.len() < max_rows;
            let row = match *ev {
                Event::Record { epoch, item } => {
                    s.rate.add(item.timestamp_ns());
                    s.last_ts = item.timestamp_ns();
                    if want_row {
                        s.timeline.add(ctx, item);
                    }
                    // Formatting is the costly part: only for listed rows.
                    want_row.then(|| Row {
                        offset: item.offset,
                        epoch,
                        seq: item.seq().to_string(),
                        ts: item.timestamp_ns().to_string(),
                        name: ctx.catalog.name(item.opcode()),
                        source: item.source().to_string(),
                        len: item.payload.len().to_string(),
                        fields: fields_text(&ctx.catalog, item),
                        marker: false,
                    })
                }
                Event::Lost {
                    offset,
                    epoch,
                    first_seq,
                    count,
                } => {
                    if s.loss_marks.len() < crate::stats::MAX_LISTED_LOSSES {
                        s.loss_marks.push((
                            s.last_ts,
                            count,
                            format!("LOST {count} from seq {first_seq} (epoch {epoch})"),
                        ));
                    }
                    Some(marker(
                        offset,
                        epoch,
                        "LOST".into(),
                        format!("first_seq={first_seq} count={count}"),
                    ))
                }
                Event::Gap {
                    offset,
                    epoch,
                    first_seq,
                    count,
                    timestamp_ns,
                } => {
                    if s.loss_marks.len() < crate::stats::MAX_LISTED_LOSSES {
                        let t = if timestamp_ns == 0 { s.last_ts } else { timestamp_ns };
                        s.loss_marks.push((
                            t,
                            count,
                            format!("gap of {count} from seq {first_seq} (epoch {epoch}, no LOST marker)"),
                        ));
                    }
                    Some(marker(
                        offset,
                        epoch,
                        "GAP".into(),
                        format!("first_seq={first_seq} count={count}"),
                    ))
                }
                Event::Frozen {
                    offset,
                    epoch,
                    last_seq,
                    next_seq,
                } => Some(marker(
                    offset,
                    epoch,
                    "FROZEN".into(),
                    format!(
                        "last_seq={} next_seq={next_seq}",
                        last_seq.map_or("none".into(), |v| v.to_string())
                    ),
                )),
                Event::EpochStart {
                    offset,
                    epoch,
                    ring_size,
                } => Some(marker(offset, epoch, "EPOCH".into(), format!("ring_size={ring_size}"))),
                _ => None,
            };
            if let Some(r) = row.filter(|_| want_row) {
                s.rows.push(r);
            }
            ControlFlow::Continue(())
        },
    )?;
    let mut st = st;
    st.stats.finish();
    let html = render(ctx, args, &walked, &st)?;
    std::fs::write(&args.output, html).map_err(|e| AppError::new(IO, format!("{}: {e}", args.output.display())))?;
    writeln!(out, "wrote {}", args.output.display())?;
    walked.status()
}

/// Latency rows (overall first, per source after) and one log2 histogram
/// chart per opcode and measure.
fn latency_view(st: &State<'_>) -> (Vec<minijinja::Value>, Vec<minijinja::Value>) {
    let measure = |m: Measure| match m {
        Measure::Field => "field",
        Measure::Paired => "paired",
    };
    let rows = st
        .latency
        .percentiles()
        .iter()
        .map(|r| {
            context! {
                name => r.name, measure => measure(r.measure),
                source => r.source.map_or("all".to_string(), |s| s.to_string()),
                overall => r.source.is_none(),
                count => thousands(r.count), p50 => duration_ns(r.p50), p90 => duration_ns(r.p90),
                p99 => duration_ns(r.p99), p999 => duration_ns(r.p999), max => duration_ns(r.max),
            }
        })
        .collect();
    let charts = st
        .latency
        .percentiles()
        .iter()
        .filter(|r| r.source.is_none())
        .map(|r| {
            let buckets: Vec<(String, u64)> = st
                .latency
                .log2_buckets(r.opcode, r.measure)
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(upper, n)| (format!("<= {}", duration_ns(upper)), n))
                .collect();
            context! {
                title => format!("{} ({})", r.name, measure(r.measure)),
                chart => svg::bars(&buckets, "records"),
            }
        })
        .collect();
    (rows, charts)
}

fn render(ctx: &Ctx, args: &ReportArgs, walked: &crate::commands::Walked, st: &State<'_>) -> Result<String, AppError> {
    let s = &st.stats;
    let h = walked.header;
    let lost = s.lost_total();
    let mut warnings = s.summary_warnings();
    if let Some(e) = walked.ending() {
        warnings.insert(0, format!("reading stopped: {e}"));
    }
    let cards = vec![
        Card {
            key: "records",
            value: thousands(s.records),
            class: "",
        },
        Card {
            key: "time span",
            value: duration_ns(s.span_ns()),
            class: "",
        },
        Card {
            key: "rate",
            value: format!("{}/s", svg::short(s.rate())),
            class: "",
        },
        Card {
            key: "lost",
            value: thousands(lost),
            class: if lost > 0 { "warn" } else { "" },
        },
        Card {
            key: "epochs",
            value: s.epochs.len().to_string(),
            class: "",
        },
        Card {
            key: "opcodes",
            value: s.opcodes.len().to_string(),
            class: "",
        },
        Card {
            key: "sources",
            value: s.cores.len().to_string(),
            class: "",
        },
        Card {
            key: "size",
            value: bytes(walked.end.offset),
            class: "",
        },
        Card {
            key: "status",
            value: if walked.end.error.is_some() {
                "damaged".into()
            } else {
                "complete".into()
            },
            class: if walked.end.error.is_some() { "bad" } else { "" },
        },
    ];
    let mut ops: Vec<(String, u64)> = s
        .opcodes
        .iter()
        .map(|(op, o)| (ctx.catalog.name(*op), o.records))
        .collect();
    ops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    ops.truncate(30);
    let opcode_chart = svg::bars(&ops, "records");
    let first = s.first_ns.unwrap_or(0);
    let per_sec = 1e9 / st.rate.width as f64;
    let used = st.rate.bins.iter().rposition(|b| *b > 0).map_or(0, |i| i + 1);
    let rates: Vec<f64> = st.rate.bins[..used].iter().map(|b| *b as f64 * per_sec).collect();
    let span_end = first + used as u64 * st.rate.width;
    let rate_chart = svg::area(&rates, "0", &format!("+{}", duration_ns(span_end - first)), "records/s");
    let span = s.span_ns().max(1) as f64;
    let marks: Vec<(f64, u64, String)> = st
        .loss_marks
        .iter()
        .map(|(t, c, l)| (t.saturating_sub(first) as f64 / span, *c, l.clone()))
        .collect();
    let gap_chart = svg::ticks(&marks, "0", &format!("+{}", duration_ns(s.span_ns())));
    let hist: Vec<(String, u64)> = s
        .inter_arrival
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| {
            (
                if b == 0 {
                    "0".into()
                } else {
                    format!(">= {}", duration_ns(bucket_floor(b)))
                },
                *n,
            )
        })
        .collect();
    let hist_chart = svg::bars(&hist, "intervals");
    let epochs: Vec<_> = s
        .epochs
        .iter()
        .map(|e| {
            context! {
                epoch => e.epoch, ring_size => bytes(e.ring_size), records => thousands(e.records),
                first_seq => e.first_seq.map_or("-".into(), |v| v.to_string()),
                last_seq => e.last_seq.map_or("-".into(), |v| v.to_string()),
                lost_marked => e.lost_marked, lost_unmarked => e.lost_unmarked,
                state => if e.frozen { "frozen" } else { "" },
            }
        })
        .collect();
    let (latency_rows, latency_charts) = latency_view(st);
    let timeline = svg::timeline(&st.timeline.lanes, &st.timeline.marks);
    let mut env = Environment::new();
    env.add_template("report.html", TEMPLATE)
        .map_err(|e| AppError::new(INTERNAL, format!("report template: {e}")))?;
    let tmpl = env
        .get_template("report.html")
        .map_err(|e| AppError::new(INTERNAL, format!("report template: {e}")))?;
    tmpl.render(context! {
        title => args.title.clone().unwrap_or_else(|| format!("hmb-trace report: {}", walked.name)),
        trace_name => walked.name,
        format_version => format!("{}.{}", h.format_major, h.format_minor),
        ring_abi => format!("{}.{}", h.ring_abi_major, h.ring_abi_minor),
        ring_size => bytes(h.ring_size),
        cards, warnings, opcode_chart, rate_chart, gap_chart, hist_chart, epochs,
        latency_rows, latency_charts, timeline,
        rows => st.rows,
        version => env!("CARGO_PKG_VERSION"),
    })
    .map_err(|e| AppError::new(INTERNAL, format!("report template: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_bins_double_and_keep_every_count() {
        let mut r = RateBins::new();
        for ts in (0..1_000_000u64).step_by(997) {
            r.add(10_000 + ts);
        }
        assert_eq!(
            r.bins.iter().sum::<u64>(),
            (0..1_000_000u64).step_by(997).count() as u64
        );
        assert!(r.width >= 1_000_000 / RATE_BINS as u64);
        assert!(r.bins.len() == RATE_BINS);
    }
}
