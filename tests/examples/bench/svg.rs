//! A small SVG chart of latency distributions side by side: every sample as a dot, a box from
//! the 25th to the 75th percentile, the median as a bar, the 95th percentile as a dashed tick.
//! Hand-written so the bench needs no plotting library.

use std::fmt::Write as _;

use crate::stats::Summary;

pub struct Series<'a> {
    pub label: &'a str,
    pub color: &'a str,
    pub samples: &'a [f64],
}

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 64.0;
const BOTTOM: f64 = 92.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A step of 1, 2 or 5 times a power of ten giving about five gridlines up to `max`.
fn nice_step(max: f64) -> f64 {
    let raw = (max / 5.0).max(f64::MIN_POSITIVE);
    let pow = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * pow)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * pow)
}

/// Deterministic jitter in [-1, 1] from the sample's index (golden-ratio sequence): the same
/// data always draws the same picture.
fn jitter(i: usize) -> f64 {
    let x = (i as f64 * 0.618_033_988_75).fract();
    x * 2.0 - 1.0
}

/// Renders the chart; `unit` labels the y axis (e.g. "ms").
pub fn render(title: &str, subtitle: &str, unit: &str, series: &[Series<'_>]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.samples.iter().copied())
        .fold(0.0f64, f64::max);
    let step = nice_step(max * 1.05);
    let top_value = (max * 1.05 / step).ceil().max(1.0) * step;
    let plot_h = H - TOP - BOTTOM;
    let plot_w = W - LEFT - RIGHT;
    let y = |v: f64| TOP + plot_h * (1.0 - v / top_value);
    let slot = plot_w / series.len().max(1) as f64;

    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    let _ = writeln!(
        o,
        r##"<text x="{}" y="44" text-anchor="middle" fill="#555">{}</text>"##,
        W / 2.0,
        esc(subtitle)
    );
    // Grid and y axis.
    let mut v = 0.0;
    while v <= top_value + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            o,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#e4e4e4"/>"##,
            W - RIGHT
        );
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            yy + 4.0,
            v
        );
        v += step;
    }
    let _ = writeln!(
        o,
        r#"<text x="18" y="{:.1}" transform="rotate(-90 18 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        esc(unit)
    );
    let _ = writeln!(
        o,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#333"/>"##,
        H - BOTTOM
    );

    for (i, s) in series.iter().enumerate() {
        let cx = LEFT + slot * (i as f64 + 0.5);
        let half = (slot * 0.28).min(70.0);
        let Some(sum) = Summary::of(s.samples) else {
            continue;
        };
        let c = esc(s.color);
        // Whisker min..max, then the box, then the dots on top.
        let _ = writeln!(
            o,
            r#"<line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="{c}" stroke-width="1"/>"#,
            y(sum.min),
            y(sum.max)
        );
        let _ = writeln!(
            o,
            r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{c}" fill-opacity="0.18" stroke="{c}"/>"#,
            cx - half,
            y(sum.p75),
            2.0 * half,
            (y(sum.p25) - y(sum.p75)).max(1.0)
        );
        for (k, v) in s.samples.iter().enumerate() {
            let _ = writeln!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.6" fill="{c}" fill-opacity="0.75"/>"#,
                cx + jitter(k) * half * 0.8,
                y(*v)
            );
        }
        let _ = writeln!(
            o,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="3"/>"#,
            cx - half,
            y(sum.median),
            cx + half,
            y(sum.median)
        );
        let _ = writeln!(
            o,
            r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="4 3"/>"#,
            cx - half,
            y(sum.p95),
            cx + half,
            y(sum.p95)
        );
        let base = H - BOTTOM;
        let _ = writeln!(
            o,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"#,
            base + 20.0,
            esc(s.label)
        );
        let _ = writeln!(
            o,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">median {:.0} {unit} · p95 {:.0} {unit}</text>"#,
            base + 38.0,
            sum.median,
            sum.p95
        );
        let _ = writeln!(
            o,
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#555">n={}, min {:.0}, max {:.0}</text>"##,
            base + 54.0,
            sum.n,
            sum.min,
            sum.max
        );
    }
    let _ = writeln!(
        o,
        r##"<text x="{}" y="{}" text-anchor="end" fill="#777" font-size="10">box: p25-p75 · thick bar: median · dashed: p95 · line: min-max</text>"##,
        W - RIGHT,
        H - 8.0
    );
    o.push_str("</svg>\n");
    o
}
