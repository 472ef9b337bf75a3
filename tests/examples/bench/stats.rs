//! Order statistics of a sample: what the tables and the JSON report.

use serde_json::{json, Value};

/// Summary of one sample (milliseconds, operations per second, KiB: the unit is the caller's).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub p95: f64,
    pub max: f64,
    pub mean: f64,
}

/// Nearest-rank percentile of sorted data: the smallest value with at least `q` of the sample
/// at or below it. No interpolation, so every figure reported is one that was measured.
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

impl Summary {
    /// `None` for an empty sample.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        // The median of an even sample is the mean of the two middle values (the usual
        // definition, and what hyperfine and criterion print); for an odd one both are the same.
        let median = (s[(s.len() - 1) / 2] + s[s.len() / 2]) / 2.0;
        Some(Summary {
            n: s.len(),
            min: s[0],
            p25: nearest_rank(&s, 0.25),
            median,
            p75: nearest_rank(&s, 0.75),
            p95: nearest_rank(&s, 0.95),
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        })
    }

    pub fn to_json(&self) -> Value {
        json!({
            "n": self.n,
            "min": round3(self.min),
            "p25": round3(self.p25),
            "median": round3(self.median),
            "p75": round3(self.p75),
            "p95": round3(self.p95),
            "max": round3(self.max),
            "mean": round3(self.mean),
        })
    }
}

/// Three decimals: enough for milliseconds, and keeps the JSON readable.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// `a / b`, or `None` when `b` is zero (a missing baseline figure).
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0).then(|| a / b)
}
