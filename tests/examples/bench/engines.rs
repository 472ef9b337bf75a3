//! Docker and Podman: `ENGINE run --rm IMAGE true` through runsc-hardened against the same
//! engine with plain runsc registered beside it, given the global flags runsc-hardened ends up
//! passing under the default policy (`--network=none --oci-seccomp`), and against the engine's
//! runc (no sandbox: the floor a user compares with), interleaved in one run; the same three
//! for a tool call, `ENGINE exec NAME true` into a running container of each; and the memory
//! of the guard, runsc-hardened's one process per running container.

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
    pub runc: Vec<f64>,
}

pub struct Engines {
    pub latency: Vec<EngineLatency>,
    /// `ENGINE exec NAME true`, one running container per runtime; `engine` names the engine.
    pub exec: Vec<EngineLatency>,
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

/// runc as Debian installs it, the one both engines run by default.
const RUNC: &str = "/usr/sbin/runc";

/// `warmup` untimed rounds, then `runs` rounds of one run each, the order rotated every round
/// so that none of the three always follows another.
fn interleave(
    engine: &'static str,
    runs: usize,
    warmup: usize,
    mut hardened: impl FnMut() -> BenchResult<f64>,
    mut baseline: impl FnMut() -> BenchResult<f64>,
    mut runc: impl FnMut() -> BenchResult<f64>,
) -> BenchResult<EngineLatency> {
    for _ in 0..warmup {
        hardened()?;
        baseline()?;
        runc()?;
    }
    let mut l = EngineLatency {
        engine,
        hardened: Vec::new(),
        baseline: Vec::new(),
        runc: Vec::new(),
    };
    for round in 0..runs {
        for slot in 0..3 {
            match (round + slot) % 3 {
                0 => l.hardened.push(hardened()?),
                1 => l.baseline.push(baseline()?),
                _ => l.runc.push(runc()?),
            }
        }
        eprint!("\r  {engine}: round {}/{runs}", round + 1);
    }
    eprintln!();
    Ok(l)
}

/// `ENGINE exec NAME true` into a running `sleep` container of each runtime (given by its
/// `run` arguments: hardened, plain runsc, runc), interleaved; the containers are removed with
/// `remove` after.
fn tool_calls(
    engine: &'static str,
    runs: usize,
    warmup: usize,
    command: impl Fn() -> EngineCommand,
    runtimes: [Vec<String>; 3],
    remove: &[&str],
) -> BenchResult<EngineLatency> {
    let names = ["exec-hardened", "exec-runsc", "exec-runc"];
    for (name, args) in names.iter().zip(runtimes) {
        command()
            .args(["run", "-d", "--name", name, "--network", "none"])
            .args(args)
            .args([TEST_IMAGE_REF, "sleep", "600"])
            .checked()?;
    }
    let exec = |name: &str| command().args(["exec", name, "true"]);
    let l = interleave(
        engine,
        runs,
        warmup,
        || timed(exec(names[0])),
        || timed(exec(names[1])),
        || timed(exec(names[2])),
    )?;
    for name in names {
        command().args(remove).arg(name).checked()?;
    }
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
        || timed(docker_run("runc")),
    )?;
    let runtime = |r: &str| vec!["--runtime".to_string(), r.to_string()];
    let docker_exec = tool_calls(
        "docker",
        runs,
        warmup,
        || d.docker(),
        [runtime(HARDENED), runtime(BASELINE), runtime("runc")],
        &["rm", "-f"],
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
    // Podman's default RLIMIT_NOFILE and RLIMIT_NPROC are above what this machine lets runc
    // set without CAP_SYS_RESOURCE (runc fails with EPERM; runsc applies them inside its
    // sandbox). Measured: `--ulimit host` is not enough, these work, and `true` needs neither.
    let runc_args = || -> Vec<String> {
        vec![
            "--runtime".into(),
            RUNC.into(),
            "--ulimit".into(),
            "nofile=1024:1024".into(),
            "--ulimit".into(),
            "nproc=1024:1024".into(),
            "--cgroup-parent".into(),
            format!("/{}", p.cgroup_parent()),
        ]
    };
    let podman = interleave(
        "podman",
        runs,
        warmup,
        || timed(podman_run(p.hardened_args(&policy))),
        || timed(podman_run(p.baseline_args())),
        || timed(podman_run(runc_args())),
    )?;
    let podman_exec = tool_calls(
        "podman",
        runs,
        warmup,
        || p.podman(),
        [p.hardened_args(&policy), p.baseline_args(), runc_args()],
        &["rm", "-f", "-t", "0"],
    )?;
    let forced = p.shutdown();
    if !forced.is_clean() {
        eprintln!("bench: podman teardown had to force: {forced}");
    }
    Ok(Engines {
        latency: vec![docker, podman],
        exec: vec![docker_exec, podman_exec],
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
    /// Median and p95 of `l`'s hardened runs over `other`'s.
    fn ratios(l: &EngineLatency, other: &[f64]) -> Option<(f64, f64)> {
        let h = Summary::of(&l.hardened)?;
        let b = Summary::of(other)?;
        Some((ratio(h.median, b.median)?, ratio(h.p95, b.p95)?))
    }

    /// One table row per engine: the three runtimes and the hardened runtime's ratios.
    fn rows(ls: &[EngineLatency]) -> String {
        let mut s = String::from(
            "| engine | gvisor-hardened median / p95 ms | runsc median / p95 ms | runc median / p95 ms | over runsc median / p95 | over runc median / p95 |\n|---|---|---|---|---|---|\n",
        );
        for l in ls {
            let (h, b, r) = (
                Summary::of(&l.hardened),
                Summary::of(&l.baseline),
                Summary::of(&l.runc),
            );
            let (Some(h), Some(b), Some(r)) = (h, b, r) else {
                continue;
            };
            let (bm, bp) = Self::ratios(l, &l.baseline).unwrap_or((f64::NAN, f64::NAN));
            let (rm, rp) = Self::ratios(l, &l.runc).unwrap_or((f64::NAN, f64::NAN));
            s.push_str(&format!(
                "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.3} / {:.3} | {:.2} / {:.2} |\n",
                l.engine, h.median, h.p95, b.median, b.p95, r.median, r.p95, bm, bp, rm, rp
            ));
        }
        s
    }

    pub fn markdown(&self) -> String {
        let mut s = format!(
            "**Docker and Podman** (`ENGINE run --rm --network none IMAGE true`, interleaved; runsc: plain runsc registered with `--network=none --oci-seccomp`, target over it <= {TARGET_RATIO}; runc: the engine's runc, no sandbox)\n\n{}",
            Self::rows(&self.latency)
        );
        s.push_str(&format!(
            "\n**Tool calls through the engines** (`ENGINE exec NAME true` into a running `sleep` container of each runtime, interleaved)\n\n{}",
            Self::rows(&self.exec)
        ));
        let (n, m) = self.guard;
        s.push_str(&format!(
            "\nGuard memory ({n} running containers): RSS {:.0} KiB, PSS {:.0} KiB, private {:.0} KiB per guard.\n",
            m.rss, m.pss, m.private
        ));
        s
    }

    fn json_rows(ls: &[EngineLatency], command: &str) -> Vec<Value> {
        ls.iter()
            .map(|l| {
                let (median, p95) = Self::ratios(l, &l.baseline).unzip();
                let (runc_median, runc_p95) = Self::ratios(l, &l.runc).unzip();
                json!({
                    "engine": l.engine,
                    "command": format!("{} {command}", l.engine),
                    "hardened_ms": l.hardened.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "baseline_ms": l.baseline.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "runc_ms": l.runc.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "hardened_summary_ms": Summary::of(&l.hardened).map(|s| s.to_json()),
                    "baseline_summary_ms": Summary::of(&l.baseline).map(|s| s.to_json()),
                    "runc_summary_ms": Summary::of(&l.runc).map(|s| s.to_json()),
                    "ratio_hardened_over_runsc": {"median": median.map(round3), "p95": p95.map(round3), "target": TARGET_RATIO},
                    "ratio_hardened_over_runc": {"median": runc_median.map(round3), "p95": runc_p95.map(round3)},
                })
            })
            .collect()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "engines": Self::json_rows(&self.latency, "run --rm --network none --runtime RUNTIME IMAGE true"),
            "exec": Self::json_rows(&self.exec, "exec NAME true (NAME: a running `sleep 600` of the runtime)"),
            "guard_memory_per_container": {"containers": self.guard.0, "kib": self.guard.1.to_json()},
        })
    }
}
