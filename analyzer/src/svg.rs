//! Small inline SVG charts for the HTML report: no scripts, no fonts, no
//! network. Text is escaped; numbers are formatted deterministically.

use std::fmt::Write as _;

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: f64 = 1100.0;

/// Horizontal bars: (label, value).
pub fn bars(items: &[(String, u64)], unit: &str) -> String {
    if items.is_empty() {
        return empty("no records");
    }
    let row = 20.0;
    let label_w = 170.0;
    let h = items.len() as f64 * row + 10.0;
    let max = items.iter().map(|i| i.1).max().unwrap_or(1).max(1) as f64;
    let total: u64 = items.iter().map(|i| i.1).sum();
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img">"#
    );
    for (i, (label, v)) in items.iter().enumerate() {
        let y = 5.0 + i as f64 * row;
        let bw = (W - label_w - 160.0) * (*v as f64 / max);
        let pct = *v as f64 * 100.0 / total.max(1) as f64;
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{label_w}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="#0969da"><title>{} {v} {unit}</title></rect><text x="{:.1}" y="{:.1}">{v} ({pct:.1}%)</text>"##,
            label_w - 6.0,
            y + 14.0,
            esc(label),
            y + 3.0,
            row - 6.0,
            esc(label),
            label_w + bw + 6.0,
            y + 14.0
        );
    }
    s.push_str("</svg>");
    s
}

/// A filled line chart of `values` over equal x steps; x labels at the ends.
pub fn area(values: &[f64], x_start: &str, x_end: &str, y_label: &str) -> String {
    if values.is_empty() {
        return empty("no records");
    }
    let h = 220.0;
    let (left, right, top, bottom) = (70.0, 20.0, 15.0, 30.0);
    let pw = W - left - right;
    let ph = h - top - bottom;
    let max = values.iter().cloned().fold(0.0, f64::max).max(1e-9);
    let step = if values.len() > 1 {
        pw / (values.len() - 1) as f64
    } else {
        0.0
    };
    let mut pts = format!("{left:.1},{:.1} ", top + ph);
    for (i, v) in values.iter().enumerate() {
        let _ = write!(pts, "{:.1},{:.1} ", left + i as f64 * step, top + ph - ph * v / max);
    }
    let _ = write!(pts, "{:.1},{:.1}", left + (values.len() - 1) as f64 * step, top + ph);
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img"><polygon points="{pts}" fill="#54aeff" fill-opacity="0.5" stroke="#0969da"/><line x1="{left}" y1="{b:.1}" x2="{r:.1}" y2="{b:.1}" stroke="#57606a"/><text x="{left}" y="{ty:.1}">{}</text><text x="{r:.1}" y="{ty:.1}" text-anchor="end">{}</text><text x="{lx:.1}" y="{top2:.1}" text-anchor="end">{}</text><text x="{lx:.1}" y="{b:.1}" text-anchor="end">0</text><text x="{lx:.1}" y="{mid:.1}" text-anchor="end">{}</text></svg>"##,
        esc(x_start),
        esc(x_end),
        short(max),
        esc(y_label),
        b = top + ph,
        r = left + pw,
        ty = h - 8.0,
        lx = left - 6.0,
        top2 = top + 10.0,
        mid = top + ph / 2.0,
    )
}

/// Loss ticks on a time axis: (fraction 0..1 of the span, count, label).
pub fn ticks(marks: &[(f64, u64, String)], x_start: &str, x_end: &str) -> String {
    let h = 120.0;
    let (left, right) = (70.0, 20.0);
    let pw = W - left - right;
    let base = 90.0;
    let mut s = format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" role="img"><line x1="{left}" y1="{base}" x2="{:.1}" y2="{base}" stroke="#57606a"/><text x="{left}" y="112">{}</text><text x="{:.1}" y="112" text-anchor="end">{}</text>"##,
        left + pw,
        esc(x_start),
        left + pw,
        esc(x_end)
    );
    if marks.is_empty() {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="50" text-anchor="middle">no losses</text>"#,
            W / 2.0
        );
    }
    let max = marks.iter().map(|m| m.1).max().unwrap_or(1).max(1) as f64;
    for (f, count, label) in marks {
        let x = left + pw * f.clamp(0.0, 1.0);
        let len = 10.0 + 70.0 * ((*count as f64).ln_1p() / max.ln_1p().max(1e-9));
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{base}" x2="{x:.1}" y2="{:.1}" stroke="#cf222e" stroke-width="2"><title>{}</title></line>"##,
            base - len,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

fn empty(text: &str) -> String {
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="40" viewBox="0 0 {W} 40"><text x="10" y="25">{}</text></svg>"#,
        esc(text)
    )
}

/// 1234567.0 → "1.23M".
/// Per-source lanes over time: one `<g class="lane" data-lane=NAME>` per
/// lane, a bar (or a 1-pixel tick) per mark. The x axis is in nanoseconds
/// from the first mark; the page's script zooms by changing the viewBox.
pub fn timeline(lanes: &[String], marks: &[(usize, u64, u64, String)]) -> String {
    const LANE_H: f64 = 16.0;
    const LABEL_W: f64 = 170.0;
    const WIDTH: f64 = 1000.0;
    let t0 = marks.iter().map(|m| m.1).min().unwrap_or(0);
    let t1 = marks.iter().map(|m| m.2).max().unwrap_or(0).max(t0 + 1);
    let scale = WIDTH / (t1 - t0) as f64;
    let height = lanes.len() as f64 * LANE_H + 20.0;
    let mut out = format!(
        "<svg id=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" data-span-ns=\"{}\">",
        LABEL_W + WIDTH,
        t1 - t0
    );
    for (i, name) in lanes.iter().enumerate() {
        let y = i as f64 * LANE_H;
        out.push_str(&format!(
            "<g class=\"lane\" data-lane=\"{}\"><text x=\"2\" y=\"{}\">{}</text><svg x=\"{LABEL_W}\" y=\"{y}\" width=\"{WIDTH}\" height=\"{LANE_H}\" viewBox=\"0 0 {WIDTH} {LANE_H}\" preserveAspectRatio=\"none\" class=\"track\">",
            esc(name),
            y + 12.0,
            esc(name)
        ));
        for (_, start, end, label) in marks.iter().filter(|m| m.0 == i) {
            let x = (start - t0) as f64 * scale;
            let w = ((end - start) as f64 * scale).max(0.5);
            out.push_str(&format!(
                "<rect x=\"{x:.2}\" y=\"2\" width=\"{w:.2}\" height=\"{}\" fill=\"#4878d0\"><title>{} {}..{} ns</title></rect>",
                LANE_H - 4.0,
                esc(label),
                start,
                end
            ));
        }
        out.push_str("</svg></g>");
    }
    out.push_str("</svg>");
    out
}

pub fn short(v: f64) -> String {
    if v >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        let s = bars(&[("<script>".into(), 3)], "records");
        assert!(!s.contains("<script>"));
        assert!(s.contains("&lt;script&gt;"));
    }
}
