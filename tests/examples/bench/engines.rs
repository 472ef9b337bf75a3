//! Docker and Podman: `ENGINE run --rm IMAGE true` through runsc-hardened against the same
//! engine with plain runsc registered beside it, given the global flags runsc-hardened ends up
//! passing under the default policy (`--network=none --oci-seccomp`), interleaved in one run;
//! and the memory of the guard, runsc-hardened's one process per running container.

use std::time::Instant;

use gvisor_hardened_tests::docker::{DockerOptions, Dockerd};
use gvisor_hardened_tests::engine::{EngineCommand, BASELINE, HARDENED};
use gvisor_hardened_tests::podman::Podman;
use gvisor_hardened_tests::TEST_IMAGE_REF;
use serde_json::{json, Value};

use crate::contenders::BenchResult;
use crate::procfs::{mem_of, Mem, MemF};
use crate::stats::{ratio, round3, Summary};

/// The target for the hardened runtime over plain runsc on the same engine.
pub const TARGET_RATIO: f64 = 1.05;

pub struct EngineLatency {
    pub engine: &'static str,
    pub hardened: Vec<f64>,
    pub baseline: Vec<f64>,
}

pub struct Engines {
    pub latency: Vec<EngineLatency>,
    /// Guards measured, and their memory per guard.
    pub guard: (usize, MemF),
}

fn timed(cmd: EngineCommand) -> BenchResult<f64> {
    let t = Instant::now();
    let out = cmd.output()?;
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    if !out.success() {
        return Err(format!("{out}").into());
    }
    Ok(ms)
}

/// `warmup` untimed pairs, then `runs` pairs, the order flipped every round.
fn interleave(
    engine: &'static str,
    runs: usize,
    warmup: usize,
    mut hardened: impl FnMut() -> BenchResult<f64>,
    mut baseline: impl FnMut() -> BenchResult<f64>,
) -> BenchResult<EngineLatency> {
    for _ in 0..warmup {
        hardened()?;
        baseline()?;
    }
    let mut l = EngineLatency {
        engine,
        hardened: Vec::new(),
        baseline: Vec::new(),
    };
    for round in 0..runs {
        if round % 2 == 0 {
            l.hardened.push(hardened()?);
            l.baseline.push(baseline()?);
        } else {
            l.baseline.push(baseline()?);
            l.hardened.push(hardened()?);
        }
        eprint!("\r  {engine}: round {}/{runs}", round + 1);
    }
    eprintln!();
    Ok(l)
}

pub fn measure(runs: usize, warmup: usize, guards: usize) -> BenchResult<Engines> {
    let d = Dockerd::start(DockerOptions::default())?;
    d.import_test_image()?;
    let docker_run = |runtime: &str| {
        d.docker().args([
            "run",
            "--rm",
            "--network",
            "none",
            "--runtime",
            runtime,
            TEST_IMAGE_REF,
            "true",
        ])
    };
    let docker = interleave(
        "docker",
        runs,
        warmup,
        || timed(docker_run(HARDENED)),
        || timed(docker_run(BASELINE)),
    )?;
    let guard = guard_memory(&d, guards)?;
    let forced = d.shutdown();
    if !forced.is_clean() {
        eprintln!("bench: dockerd shutdown had to force: {forced}");
    }

    let p = Podman::new()?;
    p.import_test_image()?;
    let policy = p.dir().policy();
    let podman_run = |args: Vec<String>| {
        p.podman()
            .args(["run", "--rm", "--network", "none"])
            .args(args)
            .args([TEST_IMAGE_REF, "true"])
    };
    let podman = interleave(
        "podman",
        runs,
        warmup,
        || timed(podman_run(p.hardened_args(&policy))),
        || timed(podman_run(p.baseline_args())),
    )?;
    let forced = p.shutdown();
    if !forced.is_clean() {
        eprintln!("bench: podman teardown had to force: {forced}");
    }
    Ok(Engines {
        latency: vec![docker, podman],
        guard,
    })
}

/// Starts `n` sleeping containers, reads each guard's memory (the pid Docker waits on), and
/// removes them.
fn guard_memory(d: &Dockerd, n: usize) -> BenchResult<(usize, MemF)> {
    let mut names = Vec::new();
    let mut total = Mem::default();
    for i in 0..n {
        let name = format!("guard-{i}");
        d.docker()
            .args([
                "run",
                "-d",
                "--name",
                &name,
                "--network",
                "none",
                "--runtime",
                HARDENED,
            ])
            .args([TEST_IMAGE_REF, "sleep", "600"])
            .checked()?;
        names.push(name);
    }
    for name in &names {
        let pid: i32 = d
            .docker()
            .args(["inspect", "-f", "{{.State.Pid}}", name])
            .checked()?
            .stdout_trimmed()
            .parse()?;
        total = total + mem_of(pid).ok_or_else(|| format!("no memory figures for guard {pid}"))?;
    }
    for name in &names {
        d.docker().args(["rm", "-f", name]).checked()?;
    }
    Ok((n, total.per(n)))
}

impl Engines {
    fn ratios(l: &EngineLatency) -> Option<(f64, f64)> {
        let h = Summary::of(&l.hardened)?;
        let b = Summary::of(&l.baseline)?;
        Some((ratio(h.median, b.median)?, ratio(h.p95, b.p95)?))
    }

    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "**Docker and Podman** (`ENGINE run --rm --network none IMAGE true`, interleaved; baseline: plain runsc registered with `--network=none --oci-seccomp`)\n\n\
             | engine | gvisor-hardened median / p95 ms | runsc median / p95 ms | ratio median / p95 (target <= 1.05) |\n|---|---|---|---|\n",
        );
        for l in &self.latency {
            let (h, b) = (Summary::of(&l.hardened), Summary::of(&l.baseline));
            let (Some(h), Some(b)) = (h, b) else { continue };
            let (rm, rp) = Self::ratios(l).unwrap_or((f64::NAN, f64::NAN));
            s.push_str(&format!(
                "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.3} / {:.3} |\n",
                l.engine, h.median, h.p95, b.median, b.p95, rm, rp
            ));
        }
        let (n, m) = self.guard;
        s.push_str(&format!(
            "\nGuard memory ({n} running containers): RSS {:.0} KiB, PSS {:.0} KiB, private {:.0} KiB per guard.\n",
            m.rss, m.pss, m.private
        ));
        s
    }

    pub fn to_json(&self) -> Value {
        let engines: Vec<Value> = self
            .latency
            .iter()
            .map(|l| {
                let (median, p95) = Self::ratios(l).unzip();
                json!({
                    "engine": l.engine,
                    "command": format!("{} run --rm --network none --runtime RUNTIME IMAGE true", l.engine),
                    "hardened_ms": l.hardened.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "baseline_ms": l.baseline.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "hardened_summary_ms": Summary::of(&l.hardened).map(|s| s.to_json()),
                    "baseline_summary_ms": Summary::of(&l.baseline).map(|s| s.to_json()),
                    "ratio_hardened_over_runsc": {"median": median.map(round3), "p95": p95.map(round3), "target": TARGET_RATIO},
                })
            })
            .collect();
        json!({
            "engines": engines,
            "guard_memory_per_container": {"containers": self.guard.0, "kib": self.guard.1.to_json()},
        })
    }
}
