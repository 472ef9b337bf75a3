//! Samples, medians, ratios to runc, the goals, and the tables.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::SystemTime;

use gvisor_hardened_tests::stack::Stack;
use serde_json::{json, Value};

use crate::variants::{Kind, Variant};

/// The steps of `workload.sh`, in order, with the goal on the current stack (a multiple of
/// runc's median), if any.
pub const STEPS: &[(&str, &str, Option<f64>)] = &[
    ("python_start_x5", "`python3 -c pass`, 5 times", None),
    ("venv", "`python3 -m venv` (workspace)", None),
    (
        "pip_install",
        "`pip install` gvhdemo-app pytest requests (11 wheels, no cache, HTTPS index)",
        Some(2.0),
    ),
    ("git_clone", "`git clone` over HTTPS (1 branch)", None),
    ("git_fetch", "`git fetch` of a second branch", None),
    ("pytest", "pytest, 300 tests", Some(2.0)),
    (
        "write_1000_files",
        "write 1000 small files (workspace)",
        Some(5.0),
    ),
    ("cp_r_venv", "`cp -r` of the venv (workspace)", Some(5.0)),
    ("ls_la", "`ls -la` of the 1000 files (workspace)", Some(5.0)),
    // What bounds `ls -la` from below: the same listing again (what the sentry kept), the
    // names alone (one process, the directory read, no per-file call) and one process that
    // does nothing.
    ("ls_la_again", "`ls -la` of the 1000 files, again", None),
    ("ls_names", "`ls` of the 1000 files (names only)", None),
    ("spawn_true", "`/bin/true` (one process start)", None),
];

/// One container's run.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds per step that succeeded.
    pub steps: BTreeMap<String, f64>,
    /// Steps that failed, with their exit code.
    pub failures: Vec<String>,
    /// `info` lines (pytest's summary, counts).
    pub info: Vec<String>,
    /// The failed steps' output tails and ctr's stderr, when anything failed.
    pub detail: String,
    /// `ctr run` from exec to exit, seconds (start, the steps, the exit checks, teardown).
    pub wall: f64,
    pub exit: i32,
    pub load: [f64; 3],
}

impl Sample {
    pub fn parse(stdout: &str, wall: f64, exit: i32, stderr: &str, load: [f64; 3]) -> Sample {
        let mut s = Sample {
            steps: BTreeMap::new(),
            failures: Vec::new(),
            info: Vec::new(),
            detail: String::new(),
            wall,
            exit,
            load,
        };
        for line in stdout.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["step", name, a, b] => {
                    if let (Ok(a), Ok(b)) = (a.parse::<f64>(), b.parse::<f64>()) {
                        s.steps.insert(name.to_string(), b - a);
                    }
                }
                ["fail", name, code] => s.failures.push(format!("{name} (exit {code})")),
                ["info", ..] => s.info.push(line[5..].to_string()),
                _ if line.starts_with("  | ") => {
                    s.detail.push_str(line);
                    s.detail.push('\n');
                }
                _ => {}
            }
        }
        if exit != 0 {
            s.detail.push_str(stderr.trim());
        }
        s
    }
}

/// Every sample, per variant index; warm-up rounds kept apart.
pub struct Samples {
    pub timed: Vec<Vec<Sample>>,
    pub warmup: Vec<Vec<Sample>>,
}

impl Samples {
    pub fn new(vars: &[Variant]) -> Samples {
        Samples {
            timed: vec![Vec::new(); vars.len()],
            warmup: vec![Vec::new(); vars.len()],
        }
    }

    pub fn push(&mut self, i: usize, s: Sample, warm: bool) {
        if warm {
            self.warmup[i].push(s);
        } else {
            self.timed[i].push(s);
        }
    }

    fn values(&self, i: usize, step: &str) -> Vec<f64> {
        self.timed[i]
            .iter()
            .filter_map(|s| {
                if step == "wall" {
                    // A container that did not run to its end has no wall time worth a figure.
                    (s.exit == 0).then_some(s.wall)
                } else {
                    s.steps.get(step).copied()
                }
            })
            .collect()
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some((s[(s.len() - 1) / 2] + s[s.len() / 2]) / 2.0)
}

fn min_max(v: &[f64]) -> Option<(f64, f64)> {
    let lo = v.iter().copied().reduce(f64::min)?;
    let hi = v.iter().copied().reduce(f64::max)?;
    Some((lo, hi))
}

/// "1.23" for seconds, finer below 0.1 s and again below 0.01 s.
fn secs(x: f64) -> String {
    if x < 0.01 {
        format!("{x:.4}")
    } else if x < 0.1 {
        format!("{x:.3}")
    } else {
        format!("{x:.2}")
    }
}

pub fn version(binary: &Path) -> String {
    std::process::Command::new(binary)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into())
}

pub struct Report<'a> {
    pub stack: Stack,
    pub variants: &'a [Variant],
    pub samples: &'a Samples,
    pub rounds: usize,
    pub warmup: usize,
    pub load_start: [f64; 3],
    pub load_end: [f64; 3],
    pub started: SystemTime,
    pub runsc: String,
    pub containerd: String,
    pub shutdown_clean: bool,
}

fn load(l: [f64; 3]) -> String {
    format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
}

impl Report<'_> {
    fn runc(&self) -> Option<usize> {
        self.variants.iter().position(|v| v.kind == Kind::Runc)
    }

    fn ratio(&self, i: usize, step: &str) -> Option<f64> {
        let r = self.runc()?;
        let a = median(&self.samples.values(i, step))?;
        let b = median(&self.samples.values(r, step))?;
        (b > 0.0).then(|| a / b)
    }

    fn started_utc(&self) -> String {
        humantime::format_rfc3339_seconds(self.started).to_string()
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "Agent workload, **{} stack** ({}; {}), run started {}, {} timed rounds (+{} warm-up), every variant once per round, order rotated; load average {} at the start, {} at the end. Seconds, median (min-max) of the rounds; each step timed inside the sandbox.\n",
            self.stack.name(),
            self.containerd,
            self.runsc,
            self.started_utc(),
            self.rounds,
            self.warmup,
            load(self.load_start),
            load(self.load_end)
        );
        let _ = write!(o, "| step |");
        for v in self.variants {
            let _ = write!(o, " {} |", v.label);
        }
        let _ = writeln!(o, "\n|---|{}", "---:|".repeat(self.variants.len()));
        let rows = STEPS.iter().map(|(k, l, _)| (*k, *l)).chain([(
            "wall",
            "whole `ctr run --rm` (start, steps, exit, teardown)",
        )]);
        for (key, label) in rows {
            let _ = write!(o, "| {label} |");
            for i in 0..self.variants.len() {
                let vals = self.samples.values(i, key);
                let failed = self.samples.timed[i]
                    .iter()
                    .filter(|s| s.failures.iter().any(|f| f.starts_with(&format!("{key} "))))
                    .count();
                match (median(&vals), min_max(&vals)) {
                    (Some(m), Some((lo, hi))) => {
                        let _ = write!(o, " {} ({}-{})", secs(m), secs(lo), secs(hi));
                    }
                    _ => {
                        let _ = write!(o, " -");
                    }
                }
                if failed > 0 {
                    let _ = write!(o, " **failed {failed}x**");
                }
                let _ = write!(o, " |");
            }
            let _ = writeln!(o);
        }
        if self.runc().is_some() {
            let _ = writeln!(
                o,
                "\nMedian vs runc's median (goal on the current stack in brackets):\n"
            );
            let _ = write!(o, "| step |");
            let others: Vec<usize> = (0..self.variants.len())
                .filter(|i| Some(*i) != self.runc())
                .collect();
            for &i in &others {
                let _ = write!(o, " {} |", self.variants[i].label);
            }
            let _ = writeln!(o, "\n|---|{}", "---:|".repeat(others.len()));
            for (key, label, goal) in STEPS {
                let goal = goal.map_or(String::new(), |g| format!(" [<= {g}x]"));
                let _ = write!(o, "| {label}{goal} |");
                for &i in &others {
                    let _ = write!(
                        o,
                        " {} |",
                        self.ratio(i, key)
                            .map_or("-".into(), |r| format!("{r:.1}x"))
                    );
                }
                let _ = writeln!(o);
            }
        }
        let _ = writeln!(o, "\nGoals ({} stack):\n", self.stack.name());
        for (i, v) in self.variants.iter().enumerate() {
            if !matches!(v.kind, Kind::Hardened { .. }) {
                continue;
            }
            let mut met = Vec::new();
            let mut missed = Vec::new();
            for (key, _, goal) in STEPS {
                let Some(g) = goal else { continue };
                match self.ratio(i, key) {
                    Some(r) if r <= *g => met.push(format!("{key} {r:.1}x")),
                    Some(r) => missed.push(format!("{key} {r:.1}x (goal {g}x)")),
                    None => missed.push(format!("{key}: no figure")),
                }
            }
            let _ = writeln!(
                o,
                "- {}: met {}; missed {}.",
                v.label,
                if met.is_empty() {
                    "none".into()
                } else {
                    met.join(", ")
                },
                if missed.is_empty() {
                    "none".into()
                } else {
                    missed.join(", ")
                }
            );
        }
        let mut notes = Vec::new();
        for (i, v) in self.variants.iter().enumerate() {
            for s in &self.samples.timed[i] {
                if !s.failures.is_empty() {
                    notes.push(format!(
                        "{}: {} failed: {}",
                        v.label,
                        s.failures.join(", "),
                        s.detail.trim().replace('\n', " / ")
                    ));
                }
            }
            if let Some(s) = self.samples.timed[i].first() {
                notes.push(format!("{}: {}", v.label, s.info.join("; ")));
            }
        }
        let _ = writeln!(
            o,
            "\nPer variant (first timed round's `info`, and every failure):\n"
        );
        for n in notes {
            let _ = writeln!(o, "- {n}");
        }
        if !self.shutdown_clean {
            let _ = writeln!(o, "\ncontainerd's shutdown had to force.");
        }
        o
    }

    pub fn to_json(&self) -> Value {
        let sample = |s: &Sample| {
            json!({
                "steps_s": s.steps,
                "wall_s": s.wall,
                "exit": s.exit,
                "failures": s.failures,
                "detail": s.detail,
                "info": s.info,
                "load_before": s.load,
            })
        };
        json!({
            "schema": 1,
            "stack": self.stack.name(),
            "containerd": self.containerd,
            "runsc": self.runsc,
            "started": self.started_utc(),
            "rounds": self.rounds,
            "warmup": self.warmup,
            "loadavg_start": self.load_start,
            "loadavg_end": self.load_end,
            "steps": STEPS.iter().map(|(k, l, g)| json!({"key": k, "label": l, "goal_vs_runc": g})).collect::<Vec<_>>(),
            "variants": self.variants.iter().enumerate().map(|(i, v)| json!({
                "key": v.key,
                "label": v.label,
                "platform": v.platform,
                "median_s": STEPS.iter().map(|(k, _, _)| (k.to_string(), json!(median(&self.samples.values(i, k))))).chain([("wall".to_string(), json!(median(&self.samples.values(i, "wall"))))]).collect::<serde_json::Map<_, _>>(),
                "vs_runc": STEPS.iter().map(|(k, _, _)| (k.to_string(), json!(self.ratio(i, k)))).collect::<serde_json::Map<_, _>>(),
                "samples": self.samples.timed[i].iter().map(sample).collect::<Vec<_>>(),
                "warmup": self.samples.warmup[i].iter().map(sample).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
