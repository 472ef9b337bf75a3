//! What the output bound costs a container that writes a lot: `ctr run --rm IMAGE ID dd
//! if=/dev/zero bs=1M count=1024` (1 GiB to stdout) through our shim under three policies,
//! interleaved: the default (the fifo goes to runsc, no copy in the shim), `[output] max_bytes`
//! above 1 GiB (the shim reads, hashes and writes every byte, the bound never reached), and
//! `[lifetime] idle_timeout` alone (the shim interposes to count output: `splice`, no hash).
//! The bench reads ctr's stdout and counts it: a run that did not deliver exactly 1 GiB is a
//! failure, not a sample. Each wall time includes the sandbox's start and stop (~0.3 s here).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gvisor_hardened_tests::{unique_id, Run, Runtime};
use serde_json::{json, Value};

use crate::contenders::{Bench, BenchResult};
use crate::stats::{ratio, round3, Summary};

const GIB: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Case {
    Direct,
    Bounded,
    IdleOnly,
}

impl Case {
    const ALL: [Case; 3] = [Case::Direct, Case::Bounded, Case::IdleOnly];

    fn key(self) -> &'static str {
        match self {
            Case::Direct => "direct",
            Case::Bounded => "bounded",
            Case::IdleOnly => "idle_timeout_only",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Case::Direct => "default policy (fifo to runsc, no copy)",
            Case::Bounded => "`[output] max_bytes = \"2Gi\"` (copied, hashed)",
            Case::IdleOnly => "`[lifetime] idle_timeout` only (spliced, counted)",
        }
    }

    fn policy_extra(self) -> &'static str {
        match self {
            Case::Direct => "",
            Case::Bounded => "[output]\nmax_bytes = \"2Gi\"\n",
            Case::IdleOnly => "[lifetime]\nidle_timeout = \"10m\"\n",
        }
    }
}

pub struct OutputThroughput {
    /// Wall seconds per run, per case.
    pub samples: BTreeMap<Case, Vec<f64>>,
    pub failures: Vec<String>,
}

fn write_policy(dir: &Path, case: Case) -> std::io::Result<PathBuf> {
    let path = dir.join(format!("output-{}.toml", case.key()));
    let text = format!(
        "[audit]\npath = \"{}\"\n{}",
        dir.join("audit.jsonl").display(),
        case.policy_extra()
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

/// One run: wall time from `ctr run` to its exit, and the bytes ctr printed.
fn run_once(b: &Bench, policy: &Path) -> BenchResult<(Duration, u64, String)> {
    let id = unique_id("bout");
    let run = Run::new(&b.image, &id)
        .runtime(Runtime::hardened_with_policy(policy))
        .cmd(["dd", "if=/dev/zero", "bs=1M", "count=1024"]);
    let mut ctr = b.c.ctr().args(run.ctr_args_for(&b.c));
    ctr.command_mut()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = ctr.spawn()?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let errors = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        match out.read(&mut buf)? {
            0 => break,
            k => n += k as u64,
        }
    }
    let status = child.wait()?;
    let elapsed = started.elapsed();
    let stderr = errors.join().unwrap_or_default();
    if !status.success() {
        return Err(format!("{id}: ctr exited {status}: {stderr}").into());
    }
    Ok((elapsed, n, stderr))
}

pub fn measure(b: &Bench, runs: usize, warmup: usize) -> BenchResult<OutputThroughput> {
    let mut policies = BTreeMap::new();
    for case in Case::ALL {
        policies.insert(case, write_policy(b.c.dir(), case)?);
    }
    let mut samples: BTreeMap<Case, Vec<f64>> = BTreeMap::new();
    let mut failures = Vec::new();
    for round in 0..warmup + runs {
        for case in Case::ALL {
            match run_once(b, &policies[&case]) {
                Ok((elapsed, bytes, _)) if bytes == GIB => {
                    if round >= warmup {
                        samples.entry(case).or_default().push(elapsed.as_secs_f64());
                    }
                }
                Ok((_, bytes, stderr)) => failures.push(format!(
                    "{}: ctr printed {bytes} bytes, not {GIB}: {stderr}",
                    case.key()
                )),
                Err(e) => failures.push(format!("{}: {e}", case.key())),
            }
        }
    }
    Ok(OutputThroughput { samples, failures })
}

impl OutputThroughput {
    fn median(&self, case: Case) -> Option<f64> {
        self.samples
            .get(&case)
            .and_then(|s| Summary::of(s))
            .map(|s| s.median)
    }

    pub fn markdown(&self) -> String {
        let mut o = String::from(
            "**Output, 1 GiB to stdout** (`dd if=/dev/zero bs=1M count=1024` through `ctr run --rm`, \
             interleaved; wall time includes the sandbox's start and stop)\n\n\
             | policy | runs | median wall | MiB/s | time vs default |\n|---|---|---|---|---|\n",
        );
        let direct = self.median(Case::Direct);
        for case in Case::ALL {
            let Some(s) = self.samples.get(&case).and_then(|s| Summary::of(s)) else {
                o.push_str(&format!("| {} | 0 | - | - | - |\n", case.label()));
                continue;
            };
            let vs = direct
                .and_then(|d| ratio(s.median, d))
                .map_or("-".into(), |r| format!("{r:.2}x"));
            o.push_str(&format!(
                "| {} | {} | {:.2} s (min {:.2}, max {:.2}) | {:.0} | {vs} |\n",
                case.label(),
                s.n,
                s.median,
                s.min,
                s.max,
                1024.0 / s.median
            ));
        }
        if !self.failures.is_empty() {
            o.push_str(&format!("\nFailed runs: {}\n", self.failures.join("; ")));
        }
        o
    }

    pub fn to_json(&self) -> Value {
        let cases: serde_json::Map<String, Value> = Case::ALL
            .iter()
            .filter_map(|c| {
                let s = Summary::of(self.samples.get(c)?)?;
                Some((
                    c.key().to_string(),
                    json!({
                        "wall_s": s.to_json(),
                        "mib_per_s_at_median": round3(1024.0 / s.median),
                    }),
                ))
            })
            .collect();
        json!({ "bytes": GIB, "cases": cases, "failures": self.failures })
    }
}
