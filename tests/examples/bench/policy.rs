//! Policy cost: the figures of the criterion benches (`policy-injector/benches/harden.rs`),
//! read from criterion's own output after `hack/bench.sh` ran them.

use std::fs;
use std::path::Path;

use serde_json::{json, Value};

pub struct Estimate {
    pub name: String,
    /// Nanoseconds per iteration.
    pub median_ns: f64,
    pub median_low_ns: f64,
    pub median_high_ns: f64,
    pub mean_ns: f64,
}

/// Every benchmark under `criterion_dir` (`target/criterion`), from `<name>/new/estimates.json`.
pub fn read(criterion_dir: &Path) -> Result<Vec<Estimate>, String> {
    let entries = fs::read_dir(criterion_dir).map_err(|e| {
        format!(
            "{}: {e} (run the criterion benches first)",
            criterion_dir.display()
        )
    })?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let file = e.path().join("new").join("estimates.json");
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let v: Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
        let num = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_f64)
                .ok_or_else(|| format!("{}: no {p}", file.display()))
        };
        out.push(Estimate {
            name: e.file_name().to_string_lossy().into_owned(),
            median_ns: num("/median/point_estimate")?,
            median_low_ns: num("/median/confidence_interval/lower_bound")?,
            median_high_ns: num("/median/confidence_interval/upper_bound")?,
            mean_ns: num("/mean/point_estimate")?,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    if out.is_empty() {
        return Err(format!(
            "no criterion estimates under {}",
            criterion_dir.display()
        ));
    }
    Ok(out)
}

/// A duration in the unit that reads best.
pub fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

pub fn to_json(estimates: &[Estimate]) -> Value {
    json!({
        "source": "cargo bench -p policy-injector --bench harden (criterion)",
        "benches": estimates.iter().map(|e| json!({
            "name": e.name,
            "median_ns": e.median_ns.round(),
            "median_ci95_ns": [e.median_low_ns.round(), e.median_high_ns.round()],
            "mean_ns": e.mean_ns.round(),
        })).collect::<Vec<_>>(),
    })
}
