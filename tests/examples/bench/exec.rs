//! Tool-call latency: `ctr task exec --exec-id X ID true` into a sandbox that is already
//! running, per runtime, interleaved. What an agent pays per tool call when its sandbox stays up
//! (the shim's Exec and Start of the process, `runsc exec` or `runc exec`, the exit back to ctr).

use std::collections::BTreeMap;
use std::time::Instant;

use gvisor_hardened_tests::unique_id;
use serde_json::{json, Value};

use crate::contenders::{Bench, BenchResult, Contender};
use crate::procfs::loadavg;
use crate::stats::{ratio, round3, Summary};

pub struct ExecLatency {
    /// Milliseconds per exec, in the order they ran.
    pub samples: BTreeMap<Contender, Vec<f64>>,
    pub failed: Vec<String>,
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

/// One `sleep` sandbox per runtime, `warmup` untimed execs into each, then `runs` rounds of one
/// exec per runtime in an order rotated each round. A failed exec is no sample (it is listed).
pub fn measure(
    b: &Bench,
    who_all: &[Contender],
    runs: usize,
    warmup: usize,
) -> BenchResult<ExecLatency> {
    let mut running = Vec::new();
    for &who in who_all {
        let id = unique_id(&format!("bx{}", who.short()));
        b.start_sleeper(who, &id)?;
        let shim = b.shim_pid(&id).ok();
        running.push((who, id, shim));
    }
    let result = rounds(b, &running, runs, warmup);
    for (_, id, shim) in &running {
        b.remove(id, *shim)?;
    }
    result
}

fn rounds(
    b: &Bench,
    running: &[(Contender, String, Option<i32>)],
    runs: usize,
    warmup: usize,
) -> BenchResult<ExecLatency> {
    let one = |id: &str| -> BenchResult<Result<f64, String>> {
        let t = Instant::now();
        let out = b.c.exec(id, &[], ["true"]).output()?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        Ok(if out.success() {
            Ok(ms)
        } else {
            Err(out.stderr.trim().to_string())
        })
    };
    for _ in 0..warmup {
        for (_, id, _) in running {
            one(id)?.map_err(|e| format!("warm-up exec into {id}: {e}"))?;
        }
    }
    let load_before = loadavg();
    let mut samples: BTreeMap<Contender, Vec<f64>> = BTreeMap::new();
    let mut failed = Vec::new();
    let n = running.len();
    for round in 0..runs {
        for k in 0..n {
            let (who, id, _) = &running[(round + k) % n];
            match one(id)? {
                Ok(ms) => samples.entry(*who).or_default().push(ms),
                Err(e) => failed.push(format!("{}: {e}", who.label())),
            }
        }
        eprint!("\r  exec: round {}/{runs}", round + 1);
    }
    eprintln!();
    Ok(ExecLatency {
        samples,
        failed,
        load_before,
        load_after: loadavg(),
    })
}

impl ExecLatency {
    fn summary(&self, who: Contender) -> Option<Summary> {
        self.samples.get(&who).and_then(|s| Summary::of(s))
    }

    pub fn markdown(&self) -> String {
        let go = self.summary(Contender::GoShimRunsc);
        let mut o = String::from(
            "**Tool-call latency**, `ctr task exec ID true` into a running `sleep` sandbox, runtimes interleaved:\n\n\
             | runtime | execs | median ms | p95 ms | min ms | max ms | median vs Go shim + runsc |\n|---|---:|---:|---:|---:|---:|---:|\n",
        );
        for (&who, s) in &self.samples {
            let Some(s) = Summary::of(s) else { continue };
            let r = go.as_ref().and_then(|g| ratio(s.median, g.median));
            o.push_str(&format!(
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |\n",
                who.label(),
                s.n,
                s.median,
                s.p95,
                s.min,
                s.max,
                r.map_or("-".into(), |r| format!("{r:.2}"))
            ));
        }
        o.push_str(&format!(
            "\nLoad during: {:.2} {:.2} {:.2} -> {:.2} {:.2} {:.2}. Failed execs: {}.\n",
            self.load_before[0],
            self.load_before[1],
            self.load_before[2],
            self.load_after[0],
            self.load_after[1],
            self.load_after[2],
            if self.failed.is_empty() {
                "none".to_string()
            } else {
                self.failed.join("; ")
            }
        ));
        o
    }

    pub fn to_json(&self) -> Value {
        json!({
            "command": "ctr task exec --exec-id X ID true",
            "load_before": self.load_before,
            "load_after": self.load_after,
            "failed": self.failed,
            "runtimes": self.samples.iter().map(|(who, s)| (who.key().to_string(), json!({
                "label": who.label(),
                "summary_ms": Summary::of(s).map(|x| x.to_json()),
                "samples_ms": s.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
            }))).collect::<serde_json::Map<_, _>>(),
        })
    }
}
