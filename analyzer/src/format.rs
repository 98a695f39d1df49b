//! Text helpers shared by the subcommands: numbers, durations, decoded
//! payload fields, colours.

use std::fmt::Write as _;

use hmb_trace_file::Item;

use crate::catalog::{read_field, Catalog};

/// 1234567 → "1,234,567".
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Nanoseconds as a short human duration.
pub fn duration_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.2} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut f = n as f64;
    let mut u = 0;
    while f >= 1024.0 && u < UNITS.len() - 1 {
        f /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{f:.2} {}", UNITS[u])
    }
}

/// Decoded payload fields as (name, value) pairs, in catalog order.
pub fn fields<'c>(catalog: &'c Catalog, item: &Item<'_>) -> Vec<(&'c str, u64)> {
    match catalog.get(item.opcode()) {
        Some(op) => op
            .fields
            .iter()
            .filter_map(|f| read_field(item.payload, f).map(|v| (f.name.as_str(), v)))
            .collect(),
        None => Vec::new(),
    }
}

/// "qid=1 cid=7 …"
pub fn fields_text(catalog: &Catalog, item: &Item<'_>) -> String {
    let mut out = String::new();
    for (i, (k, v)) in fields(catalog, item).iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let _ = write!(out, "{k}={v}");
    }
    out
}

pub fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// ANSI styling, off unless enabled.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub color: bool,
}

impl Style {
    pub fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
    pub fn warn(&self, t: &str) -> String {
        self.paint("1;33", t)
    }
    pub fn bad(&self, t: &str) -> String {
        self.paint("1;31", t)
    }
    pub fn dim(&self, t: &str) -> String {
        self.paint("2", t)
    }
    pub fn bold(&self, t: &str) -> String {
        self.paint("1", t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_numbers() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(1234567), "1,234,567");
        assert_eq!(thousands(100), "100");
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(duration_ns(1500), "1.50 µs");
        assert_eq!(duration_ns(2_500_000_000), "2.500 s");
        assert_eq!(bytes(1536), "1.50 KiB");
    }
}
