//! The runtimes compared, and the `ctr` operations every measurement is made of.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gvisor_hardened_tests::{
    inspect, poll_until, unique_id, Containerd, HarnessError, Run, Runtime,
};

use crate::procfs;

pub type BenchResult<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// One runtime in the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contender {
    /// Our shim, `io.containerd.gvisor-hardened.v1`, with the default policy.
    Hardened,
    /// containerd's Go shim (`io.containerd.runc.v2`) driving runsc through the
    /// `tests/baseline/runsc-baseline` wrapper (`--platform=ptrace --network=none`).
    GoShimRunsc,
    /// Plain runc through containerd's Go shim: no sandbox, the floor.
    Runc,
    /// Experiment (`--experiment-runsc`): our shim with another runsc in its policy, e.g. one
    /// that answers the feature queries from a cache. Never part of the published comparison.
    HardenedExperiment,
}

impl Contender {
    pub const ALL: [Contender; 3] = [Contender::Hardened, Contender::GoShimRunsc, Contender::Runc];
    /// The two gVisor runtimes (memory and churn compare shims driving the same runsc).
    pub const GVISOR: [Contender; 2] = [Contender::Hardened, Contender::GoShimRunsc];

    /// Key in the JSON.
    pub fn key(self) -> &'static str {
        match self {
            Contender::Hardened => "hardened",
            Contender::GoShimRunsc => "go_shim_runsc",
            Contender::Runc => "runc",
            Contender::HardenedExperiment => "hardened_experiment",
        }
    }

    /// Name in tables and the chart.
    pub fn label(self) -> &'static str {
        match self {
            Contender::Hardened => "gvisor-hardened (ours)",
            Contender::GoShimRunsc => "Go shim + runsc",
            Contender::Runc => "Go shim + runc",
            Contender::HardenedExperiment => "ours, experiment runsc",
        }
    }

    /// Short name for narrow columns and ids.
    pub fn short(self) -> &'static str {
        match self {
            Contender::Hardened => "ours",
            Contender::GoShimRunsc => "go",
            Contender::Runc => "runc",
            Contender::HardenedExperiment => "exp",
        }
    }
}

/// Failed attempts at one sample after which the bench gives up: a runtime that fails that
/// often is broken, not slow. (Each failure is reported with the rate per runtime.)
const MAX_ATTEMPTS_PER_SAMPLE: usize = 10;

/// A `ctr run` that exited non-zero: the runtime failed the container (the harness itself
/// worked). Kept for the report, never counted as a sample.
#[derive(Debug, Clone)]
pub struct Failure {
    pub id: String,
    pub elapsed_ms: f64,
    pub stderr: String,
}

/// Everything a measurement needs: the containerd, the image, and our shim's policy file.
pub struct Bench {
    pub c: Containerd,
    pub image: String,
    /// The default policy with only the audit log moved into the containerd directory (so a
    /// bench run does not grow the host's audit log). Passed as the runtime options'
    /// `ConfigPath`, the way a CRI handler configures it.
    pub policy: PathBuf,
    /// The policy of [`Contender::HardenedExperiment`], when the experiment runs.
    pub experiment_policy: Option<PathBuf>,
    /// Failed runs per runtime, over the whole bench.
    pub failures: Mutex<BTreeMap<Contender, Vec<Failure>>>,
    /// `ctr run --rm ... true` attempts per runtime (successful and failed).
    pub attempts: Mutex<BTreeMap<Contender, usize>>,
}

impl Bench {
    pub fn runtime(&self, who: Contender) -> Runtime {
        match who {
            Contender::Hardened => Runtime::hardened_with_policy(&self.policy),
            Contender::GoShimRunsc => Runtime::Baseline,
            Contender::Runc => Runtime::Runc,
            Contender::HardenedExperiment => Runtime::hardened_with_policy(
                self.experiment_policy
                    .as_ref()
                    .expect("the experiment contender runs only with its policy"),
            ),
        }
    }

    /// `ctr run --rm IMAGE ID true` to completion; returns its wall time. A run that exits
    /// non-zero is no sample (a failed run must not pass for a fast one): it is recorded in
    /// [`failures`](Self::failures) and retried with a new id, up to
    /// [`MAX_ATTEMPTS_PER_SAMPLE`] attempts.
    pub fn run_true(&self, who: Contender) -> BenchResult<Duration> {
        let mut failed = 0;
        loop {
            *self.attempts.lock().unwrap().entry(who).or_default() += 1;
            let id = unique_id(&format!("b{}", who.short()));
            let run = Run::new(&self.image, &id)
                .runtime(self.runtime(who))
                .cmd(["true"]);
            let t = Instant::now();
            let out = self.c.run_output(&run)?;
            let elapsed = t.elapsed();
            match out.checked() {
                Ok(_) => return Ok(elapsed),
                Err(HarnessError::CommandFailed { stderr, .. }) => {
                    eprintln!("\n  {}: {id} failed: {}", who.label(), stderr.trim());
                    self.failures
                        .lock()
                        .unwrap()
                        .entry(who)
                        .or_default()
                        .push(Failure {
                            id,
                            elapsed_ms: elapsed.as_secs_f64() * 1000.0,
                            stderr: stderr.trim().to_string(),
                        });
                    failed += 1;
                    if failed >= MAX_ATTEMPTS_PER_SAMPLE {
                        return Err(format!(
                            "{}: {failed} attempts in a row failed, last: {}",
                            who.label(),
                            stderr.trim()
                        )
                        .into());
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `ctr run --detach IMAGE ID sleep 3600`: returns once the task started, with the time
    /// that took.
    pub fn start_sleeper(&self, who: Contender, id: &str) -> BenchResult<Duration> {
        let run = Run::new(&self.image, id)
            .runtime(self.runtime(who))
            .detach()
            .cmd(["sleep", "3600"]);
        let t = Instant::now();
        let out = self.c.run_output(&run)?;
        let elapsed = t.elapsed();
        out.checked()?;
        Ok(elapsed)
    }

    /// The pid of the shim serving `id`.
    pub fn shim_pid(&self, id: &str) -> BenchResult<i32> {
        let ns = self.c.namespace();
        Ok(poll_until(
            "the shim process",
            Duration::from_secs(10),
            || procfs::shim_pid(ns, id),
        )?)
    }

    /// Kills and removes a detached container, then waits until its shim has exited, so the
    /// next measurement starts from an empty machine.
    pub fn remove(&self, id: &str, shim_pid: Option<i32>) -> BenchResult<()> {
        self.c
            .ctr()
            .args(["task", "delete", "--force", id])
            .checked()?;
        self.c.ctr().args(["containers", "delete", id]).checked()?;
        if let Some(pid) = shim_pid {
            poll_until("the shim to exit", Duration::from_secs(30), || {
                (!inspect::is_alive(pid)).then_some(())
            })?;
        }
        Ok(())
    }
}

/// Writes the bench policy next to the containerd's other files: the default policy with the
/// audit log moved into the bench's directory and, for experiments, another runsc.
pub fn write_policy(dir: &Path, name: &str, runsc: Option<&str>) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    let audit = dir.join("audit.jsonl");
    let mut text = format!(
        "# The default policy; only the audit log moves into the bench's directory.\n\
         [audit]\npath = \"{}\"\n",
        audit.display()
    );
    if let Some(runsc) = runsc {
        text.push_str(&format!("[runsc]\npath = \"{runsc}\"\n"));
    }
    std::fs::write(&path, text)?;
    Ok(path)
}
