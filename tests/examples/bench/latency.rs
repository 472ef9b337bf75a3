//! Start-to-exit latency of `ctr run --rm IMAGE ID true`, the runtimes interleaved.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::contenders::{Bench, BenchResult, Contender};
use crate::procfs::loadavg;
use crate::stats::{ratio, round3, Summary};

pub struct Latency {
    /// Milliseconds per run, in the order they ran.
    pub samples: BTreeMap<Contender, Vec<f64>>,
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

/// `warmup` untimed runs of each runtime (page cache, snapshot metadata, the first runsc
/// exec), then `runs` timed rounds. Each round runs every runtime once, in an order rotated by
/// one each round (A B C, B C A, C A B, ...): drift in the machine's load then hits all of
/// them alike, and no runtime always follows the same one.
pub fn measure(
    b: &Bench,
    who_all: &[Contender],
    runs: usize,
    warmup: usize,
) -> BenchResult<Latency> {
    for _ in 0..warmup {
        for &who in who_all {
            b.run_true(who)?;
        }
    }
    let load_before = loadavg();
    let mut samples: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
    let n = who_all.len();
    for round in 0..runs {
        for k in 0..n {
            let who = who_all[(round + k) % n];
            let d = b.run_true(who)?;
            samples
                .entry(who)
                .or_default()
                .push(d.as_secs_f64() * 1000.0);
        }
        eprint!("\r  latency: round {}/{runs}", round + 1);
    }
    eprintln!();
    Ok(Latency {
        samples,
        load_before,
        load_after: loadavg(),
    })
}

impl Latency {
    pub fn summary(&self, who: Contender) -> Option<Summary> {
        self.samples.get(&who).and_then(|s| Summary::of(s))
    }

    /// (median ratio, p95 ratio) of ours over the Go shim's.
    pub fn ratios(&self) -> Option<(f64, f64)> {
        let ours = self.summary(Contender::Hardened)?;
        let go = self.summary(Contender::GoShimRunsc)?;
        Some((ratio(ours.median, go.median)?, ratio(ours.p95, go.p95)?))
    }

    pub fn to_json(&self) -> Value {
        let mut runtimes = serde_json::Map::new();
        for (who, s) in &self.samples {
            runtimes.insert(
                who.key().to_string(),
                json!({
                    "label": who.label(),
                    "samples_ms": s.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "summary_ms": Summary::of(s).map(|s| s.to_json()),
                }),
            );
        }
        let (median_ratio, p95_ratio) = self.ratios().unzip();
        json!({
            "command": "ctr run --rm --runtime RUNTIME IMAGE ID true",
            "runtimes": runtimes,
            "ratio_hardened_over_go_shim": {
                "median": median_ratio.map(round3),
                "p95": p95_ratio.map(round3),
                "target": "<= 1.0",
            },
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
        })
    }
}
