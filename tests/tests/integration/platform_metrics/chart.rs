//! A small SVG renderer for the README's metrics picture: panels of labelled horizontal bars,
//! laid out in a grid. The output depends only on its input (no time, no randomness), and every
//! bar carries a `<title>` naming its panel, label and value, which is what the test checks the
//! picture against.

use std::fmt::Write;

/// One panel: a title, a note under it (the query), and its rows.
pub struct Panel {
    pub title: String,
    pub note: String,
    /// RGB fill of the bars; `None`: no bars, the values in a column (for rows on unlike
    /// scales, such as a gauge beside a count).
    pub color: Option<&'static str>,
    pub rows: Vec<(String, f64)>,
}

const WIDTH: u32 = 960;
const COLUMNS: u32 = 2;
const PANEL_W: u32 = 450;
const MARGIN: u32 = 20;
const HEADER_H: u32 = 70;
const TITLE_H: u32 = 44;
const ROW_H: u32 = 24;
const LABEL_W: u32 = 150;
const BAR_MAX_W: u32 = 220;

/// `&`, `<`, `>` and `"` as entities: labels come from metric label values.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A value as the picture prints it: integers without a fraction, the rest with two places.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.2}")
    }
}

/// The `<title>` text of a bar: what the test looks for.
pub fn bar_title(panel: &str, label: &str, value: f64) -> String {
    escape(&format!("{panel}: {label} = {}", number(value)))
}

fn panel_height(p: &Panel) -> u32 {
    TITLE_H + ROW_H * (p.rows.len().max(1) as u32) + 12
}

/// The whole picture: a heading, a subheading, then the panels two to a row.
pub fn render(heading: &str, subheading: &str, panels: &[Panel]) -> String {
    let rows_of_panels: Vec<&[Panel]> = panels.chunks(COLUMNS as usize).collect();
    let heights: Vec<u32> = rows_of_panels
        .iter()
        .map(|row| row.iter().map(panel_height).max().unwrap_or(0))
        .collect();
    let height = HEADER_H + heights.iter().map(|h| h + MARGIN).sum::<u32>() + MARGIN;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="13">"# // net-scan: data
    );
    let _ = writeln!(
        s,
        r##"<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r##"<text x="{MARGIN}" y="30" font-size="18" font-weight="bold" fill="#1b1f23">{}</text>"##,
        escape(heading)
    );
    let _ = writeln!(
        s,
        r##"<text x="{MARGIN}" y="52" fill="#57606a">{}</text>"##,
        escape(subheading)
    );
    let mut y = HEADER_H;
    for (row, h) in rows_of_panels.iter().zip(&heights) {
        for (i, p) in row.iter().enumerate() {
            let x = MARGIN + i as u32 * (PANEL_W + MARGIN);
            panel(&mut s, p, x, y, *h);
        }
        y += h + MARGIN;
    }
    s.push_str("</svg>\n");
    s
}

fn panel(s: &mut String, p: &Panel, x: u32, y: u32, h: u32) {
    let _ = writeln!(
        s,
        r##"<rect x="{x}" y="{y}" width="{PANEL_W}" height="{h}" rx="6" fill="#f6f8fa" stroke="#d0d7de"/>"##
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" font-weight="bold" fill="#1b1f23">{}</text>"##,
        x + 12,
        y + 20,
        escape(&p.title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" font-size="11" font-family="DejaVu Sans Mono, monospace" fill="#57606a">{}</text>"##,
        x + 12,
        y + 36,
        escape(&p.note)
    );
    let max = p.rows.iter().map(|(_, v)| *v).fold(0.0_f64, f64::max);
    if p.rows.is_empty() {
        let _ = writeln!(
            s,
            r##"<text x="{}" y="{}" fill="#57606a">(no series)</text>"##,
            x + 12,
            y + TITLE_H + 16
        );
    }
    for (i, (label, value)) in p.rows.iter().enumerate() {
        let row_y = y + TITLE_H + i as u32 * ROW_H;
        let title = bar_title(&p.title, label, *value);
        let label_text = format!(
            r##"<text x="{}" y="{}" fill="#1b1f23">{}</text>"##,
            x + 12,
            row_y + 13,
            escape(label)
        );
        let Some(color) = p.color else {
            let _ = writeln!(
                s,
                r##"<g><title>{title}</title>{label_text}<text x="{}" y="{}" text-anchor="end" font-weight="bold" fill="#1b1f23">{}</text></g>"##,
                x + PANEL_W - 16,
                row_y + 13,
                number(*value)
            );
            continue;
        };
        // Bars scale to the panel's largest value; a non-zero value always shows a sliver.
        let w = if *value > 0.0 && max > 0.0 {
            ((value / max) * f64::from(BAR_MAX_W)).round().max(2.0) as u32
        } else {
            0
        };
        let bar_x = x + 12 + LABEL_W;
        let _ = writeln!(
            s,
            r##"<g><title>{title}</title>{label_text}<rect x="{bar_x}" y="{}" width="{w}" height="16" rx="2" fill="{color}"/><text x="{}" y="{}" fill="#1b1f23">{}</text></g>"##,
            row_y + 1,
            bar_x + w + 6,
            row_y + 13,
            number(*value)
        );
    }
}

#[test]
fn a_bar_is_scaled_to_its_panel_and_titled_with_its_value() {
    let svg = render(
        "h",
        "s",
        &[Panel {
            title: "Exits, by cause".into(),
            note: "q".into(),
            color: Some("#0969da"),
            rows: vec![("exited".into(), 3.0), ("<oom>".into(), 1.5)],
        }],
    );
    assert!(
        svg.contains("<title>Exits, by cause: exited = 3</title>"),
        "{svg}"
    );
    assert!(
        svg.contains("<title>Exits, by cause: &lt;oom&gt; = 1.50</title>"),
        "{svg}"
    );
    assert!(svg.contains(r#"width="220" height="16""#), "{svg}");
    assert!(svg.contains(r#"width="110" height="16""#), "{svg}");
    assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>\n"));
}

#[test]
fn a_panel_without_colour_lists_its_values_without_bars() {
    let svg = render(
        "h",
        "s",
        &[Panel {
            title: "Audit".into(),
            note: "q".into(),
            color: None,
            rows: vec![("chain intact".into(), 1.0), ("records read".into(), 34.0)],
        }],
    );
    assert!(
        svg.contains("<title>Audit: records read = 34</title>"),
        "{svg}"
    );
    assert!(!svg.contains(r#"height="16""#), "{svg}");
}
