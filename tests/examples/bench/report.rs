//! The tables: markdown, printed on stdout and written for the README.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::churn::{self, Batch};
use crate::contenders::{Contender, Failure};
use crate::latency::Latency;
use crate::machine::Machine;
use crate::policy::{human_ns, Estimate};
use crate::scaling::Level;
use crate::stats::{ratio, Summary};

/// Issue 18's targets on the current stack: ours / the Go shim's start-to-exit median, and our
/// shim's PSS as a share of the Go shim's.
pub const LATENCY_TARGET: f64 = 0.85;
pub const PSS_TARGET: f64 = 0.35;

pub struct Report<'a> {
    pub machine: &'a Machine,
    pub load_start: [f64; 3],
    pub load_end: [f64; 3],
    pub latency: Option<&'a Latency>,
    pub levels: &'a BTreeMap<(usize, Contender), Level>,
    pub churn: &'a [Batch],
    pub concurrencies: &'a [usize],
    pub policy: Option<&'a [Estimate]>,
    pub failures: &'a BTreeMap<Contender, Vec<Failure>>,
    pub attempts: &'a BTreeMap<Contender, usize>,
}

fn mib(kib: f64) -> String {
    format!("{:.1}", kib / 1024.0)
}

fn load(l: [f64; 3]) -> String {
    format!("{:.2} {:.2} {:.2}", l[0], l[1], l[2])
}

fn pct(r: Option<f64>) -> String {
    r.map_or("-".into(), |r| format!("{:.0}%", r * 100.0))
}

impl Report<'_> {
    pub fn markdown(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(o, "Machine: {}", self.machine.one_line());
        let _ = writeln!(
            o,
            "Load average (1/5/15 min): {} at the start, {} at the end.\n",
            load(self.load_start),
            load(self.load_end)
        );
        self.failures_table(&mut o);
        if let Some(l) = self.latency {
            self.latency_table(&mut o, l);
        }
        if !self.levels.is_empty() {
            self.memory_tables(&mut o);
        }
        if !self.churn.is_empty() {
            self.churn_table(&mut o);
        }
        if let Some(p) = self.policy {
            let _ = writeln!(
                o,
                "**Policy cost** (criterion, `policy-injector/benches/harden.rs`):\n"
            );
            let _ = writeln!(
                o,
                "| bench | median | 95% CI of the median |\n|---|---:|---:|"
            );
            for e in p {
                let _ = writeln!(
                    o,
                    "| `{}` | {} | {} – {} |",
                    e.name,
                    human_ns(e.median_ns),
                    human_ns(e.median_low_ns),
                    human_ns(e.median_high_ns)
                );
            }
            o.push('\n');
        }
        o
    }

    /// Runs that failed (and were retried with a new id): they are not in any figure, and a
    /// non-zero count is a bug to fix, so it comes first.
    fn failures_table(&self, o: &mut String) {
        if self.failures.values().all(Vec::is_empty) {
            let _ = writeln!(o, "Failed runs: none.\n");
            return;
        }
        let _ = writeln!(
            o,
            "**Failed runs** of `ctr run --rm ... true` (latency and churn; left out of every figure, each retried with a new id):\n\n| runtime | failed | of attempts | error |\n|---|---:|---:|---|"
        );
        for (who, f) in self.failures {
            let mut by_error: BTreeMap<&str, usize> = BTreeMap::new();
            for x in f {
                *by_error.entry(x.stderr.as_str()).or_default() += 1;
            }
            let attempts = self.attempts.get(who).copied().unwrap_or(0);
            for (err, k) in by_error {
                let _ = writeln!(
                    o,
                    "| {} | {k} ({:.0}%) | {attempts} | `{}` |",
                    who.label(),
                    100.0 * k as f64 / attempts.max(1) as f64,
                    err.replace('|', "\\|")
                );
            }
        }
        o.push('\n');
    }

    fn latency_table(&self, o: &mut String, l: &Latency) {
        let go = l.summary(Contender::GoShimRunsc);
        let _ = writeln!(
            o,
            "**Start-to-exit latency**, `ctr run --rm IMAGE ID true`, runtimes interleaved:\n"
        );
        let _ = writeln!(
            o,
            "| runtime | runs | median ms | p95 ms | min ms | max ms | median vs Go shim + runsc |\n|---|---:|---:|---:|---:|---:|---:|"
        );
        for (&who, samples) in &l.samples {
            let Some(s) = crate::stats::Summary::of(samples) else {
                continue;
            };
            let r = go.as_ref().and_then(|g| ratio(s.median, g.median));
            let _ = writeln!(
                o,
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                who.label(),
                s.n,
                s.median,
                s.p95,
                s.min,
                s.max,
                r.map_or("-".into(), |r| format!("{r:.2}"))
            );
        }
        if let Some((m, p)) = l.ratios() {
            let verdict = if m <= LATENCY_TARGET {
                "meets"
            } else {
                "misses"
            };
            let _ = writeln!(
                o,
                "\nRatio ours / Go shim: median **{m:.2}**, p95 {p:.2} ({verdict} the target <= {LATENCY_TARGET}). Load during: {} -> {}.\n",
                load(l.load_before),
                load(l.load_after)
            );
        }
    }

    fn memory_tables(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "**Shim memory and scaling**: N sandboxes (`sleep`) started at once with `ctr run --detach`, measured while all run. \
             Shim = the shim processes only; sandbox = shim + everything below it (runsc-sandbox, its ptrace stubs, runsc-gofer), per sandbox. MiB. \
             RSS counts shared pages in full; PSS splits them among every process mapping them, including other users' processes of the same \
             shim binary on the machine (column \"other users\"); private is what one more shim adds.\n"
        );
        let _ = writeln!(
            o,
            "| N | runtime | shim RSS each | shim PSS each | shim private each | shims PSS total | sandbox PSS each | start median ms | start p95 ms | all N started ms | other users of the shim binary | load before |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        for ((n, who), lv) in self.levels {
            let each = lv.shims.per(*n);
            let total_each = (lv.shims + lv.sandboxes).per(*n);
            let s = lv.start_summary();
            let _ = writeln!(
                o,
                "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} |",
                who.label(),
                mib(each.rss),
                mib(each.pss),
                mib(each.private),
                mib(lv.shims.pss as f64),
                mib(total_each.pss),
                s.as_ref()
                    .map_or("-".into(), |s| format!("{:.0}", s.median)),
                s.as_ref().map_or("-".into(), |s| format!("{:.0}", s.p95)),
                lv.burst_ms,
                lv.foreign_same_shim,
                load(lv.load_before)
            );
        }
        let _ = writeln!(
            o,
            "\nOur shim as a share of the Go shim's (target: PSS <= {:.0}%):\n\n| N | RSS | PSS | private |\n|---:|---:|---:|---:|",
            PSS_TARGET * 100.0
        );
        let ns: Vec<usize> = {
            let mut v: Vec<usize> = self.levels.keys().map(|(n, _)| *n).collect();
            v.dedup();
            v
        };
        for n in ns {
            let (Some(a), Some(b)) = (
                self.levels.get(&(n, Contender::Hardened)),
                self.levels.get(&(n, Contender::GoShimRunsc)),
            ) else {
                continue;
            };
            let _ = writeln!(
                o,
                "| {n} | {} | {} | {} |",
                pct(ratio(a.shims.rss as f64, b.shims.rss as f64)),
                pct(ratio(a.shims.pss as f64, b.shims.pss as f64)),
                pct(ratio(a.shims.private as f64, b.shims.private as f64)),
            );
        }
        o.push('\n');
    }

    fn churn_table(&self, o: &mut String) {
        let _ = writeln!(
            o,
            "**Churn**: sandboxes created and destroyed per second (`ctr run --rm ... true` back to back per worker; median of the rounds; a failed run adds its time but no sandbox):\n"
        );
        let _ = writeln!(
            o,
            "| concurrency | {} | {} | ours / Go shim |\n|---:|---:|---:|---:|",
            Contender::Hardened.label(),
            Contender::GoShimRunsc.label()
        );
        for &k in self.concurrencies {
            let m = |who| Summary::of(&churn::rates(self.churn, who, k)).map(|s| s.median);
            let (a, b) = (m(Contender::Hardened), m(Contender::GoShimRunsc));
            let r = a.zip(b).and_then(|(a, b)| ratio(a, b));
            let f = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.2}"));
            let _ = writeln!(o, "| {k} | {} | {} | {} |", f(a), f(b), f(r));
        }
        o.push('\n');
    }
}
