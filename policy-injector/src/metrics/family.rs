//! Metric families and their Prometheus text exposition (format 0.0.4).
//!
//! Label values come from the audit log, which any writer on the node (or an attacker who can
//! append to it) controls, so every family keeps at most [`MAX_SERIES`] label sets; the rest
//! are counted in one more, the overflow set, whose values are all [`OVERFLOW`]. A scrape's
//! size and the exporter's memory stay bounded whatever the log says.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Label sets per family before new ones fold into the overflow set.
pub const MAX_SERIES: usize = 500;

/// Every label value of the overflow set.
pub const OVERFLOW: &str = "_other";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// A counter or gauge: one value per label set.
#[derive(Debug, Clone)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    series: BTreeMap<Vec<String>, f64>,
}

impl Family {
    pub fn new(
        name: &'static str,
        kind: Kind,
        labels: &'static [&'static str],
        help: &'static str,
    ) -> Family {
        let mut series = BTreeMap::new();
        if labels.is_empty() {
            // A family without labels always has its one sample, 0 until something happens.
            series.insert(Vec::new(), 0.0);
        }
        Family {
            name,
            help,
            kind,
            labels,
            series,
        }
    }

    /// Adds `by` to the series of `values` (given in the order of the family's labels).
    pub fn add(&mut self, values: &[&str], by: f64) {
        *self.slot(values) += by;
    }

    pub fn inc(&mut self, values: &[&str]) {
        self.add(values, 1.0);
    }

    pub fn set(&mut self, values: &[&str], to: f64) {
        *self.slot(values) = to;
    }

    /// The current value of a series (0 when it has none), for tests and callers that compare.
    pub fn get(&self, values: &[&str]) -> f64 {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.series.get(&key).copied().unwrap_or(0.0)
    }

    fn slot(&mut self, values: &[&str]) -> &mut f64 {
        debug_assert_eq!(values.len(), self.labels.len(), "{}", self.name);
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let key = if self.series.contains_key(&key) || self.series.len() < MAX_SERIES {
            key
        } else {
            vec![OVERFLOW.to_string(); self.labels.len()]
        };
        self.series.entry(key).or_insert(0.0)
    }

    pub fn render(&self, out: &mut String) {
        header(out, self.name, self.help, self.kind.as_str());
        for (values, v) in &self.series {
            sample(out, self.name, self.labels, values, None, *v);
        }
    }
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// A histogram: per label set, cumulative bucket counts, the sum and the count.
#[derive(Debug, Clone)]
pub struct Histogram {
    name: &'static str,
    help: &'static str,
    labels: &'static [&'static str],
    /// Upper bounds, ascending; `+Inf` is implied.
    bounds: &'static [f64],
    series: BTreeMap<Vec<String>, Buckets>,
}

#[derive(Debug, Clone, Default)]
struct Buckets {
    /// Per bound, the observations at or under it (not cumulative: summed when rendered).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(
        name: &'static str,
        labels: &'static [&'static str],
        bounds: &'static [f64],
        help: &'static str,
    ) -> Histogram {
        Histogram {
            name,
            help,
            labels,
            bounds,
            series: BTreeMap::new(),
        }
    }

    pub fn observe(&mut self, values: &[&str], v: f64) {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let key = if self.series.contains_key(&key) || self.series.len() < MAX_SERIES {
            key
        } else {
            vec![OVERFLOW.to_string(); self.labels.len()]
        };
        let b = self.series.entry(key).or_insert_with(|| Buckets {
            counts: vec![0; self.bounds.len()],
            ..Buckets::default()
        });
        if let Some(i) = self.bounds.iter().position(|le| v <= *le) {
            b.counts[i] += 1;
        }
        b.sum += v;
        b.count += 1;
    }

    /// Observations of a label set (for tests).
    pub fn count(&self, values: &[&str]) -> u64 {
        let key: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        self.series.get(&key).map_or(0, |b| b.count)
    }

    pub fn render(&self, out: &mut String) {
        header(out, self.name, self.help, "histogram");
        let bucket = format!("{}_bucket", self.name);
        let mut with_le: Vec<&'static str> = self.labels.to_vec();
        with_le.push("le");
        for (values, b) in &self.series {
            let mut cumulative = 0;
            for (le, n) in self.bounds.iter().zip(&b.counts) {
                cumulative += n;
                let le = format_value(*le);
                sample(out, &bucket, &with_le, values, Some(&le), cumulative as f64);
            }
            sample(out, &bucket, &with_le, values, Some("+Inf"), b.count as f64);
            sample(
                out,
                &format!("{}_sum", self.name),
                self.labels,
                values,
                None,
                b.sum,
            );
            sample(
                out,
                &format!("{}_count", self.name),
                self.labels,
                values,
                None,
                b.count as f64,
            );
        }
    }
}

fn header(out: &mut String, name: &str, help: &str, kind: &str) {
    // HELP text escapes only backslash and newline (the exposition format's rule).
    let help = help.replace('\\', "\\\\").replace('\n', "\\n");
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample line; `extra` is the value of a last label not in `values` (a bucket's `le`).
fn sample(
    out: &mut String,
    name: &str,
    labels: &[&str],
    values: &[String],
    extra: Option<&str>,
    v: f64,
) {
    out.push_str(name);
    let all: Vec<&str> = values.iter().map(String::as_str).chain(extra).collect();
    if !labels.is_empty() {
        out.push('{');
        for (i, (label, value)) in labels.iter().zip(&all).enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", escape_label(value));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {}", format_value(v));
}

/// A label value as the format quotes it: backslash, double quote and newline escaped.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn format_value(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    if v.is_nan() {
        return "NaN".to_string();
    }
    // Rust prints whole floats without a fraction ("3") and others in the shortest form that
    // reads back the same, both of which Prometheus parses.
    format!("{v}")
}
