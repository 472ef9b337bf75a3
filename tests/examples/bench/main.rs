//! The benchmark driver behind `hack/bench.sh`: our shim against containerd's Go shim driving
//! runsc (`tests/baseline/runsc-baseline`) and against plain runc, on one private containerd.
//!
//! ```text
//! cargo run --release -p gvisor-hardened-tests --example bench -- [OPTIONS]
//!   --out DIR            where results.json, latency.svg and summary.md go (target/bench)
//!   --runs N             timed start-to-exit runs per runtime (30)
//!   --warmup N           untimed runs per runtime first (2)
//!   --levels 1,10,30     concurrent sandboxes for the memory/scaling measurement
//!   --concurrency 1,4    churn workers
//!   --churn-runs N       sandboxes per churn batch (20)
//!   --churn-rounds N     batches per runtime and concurrency (2)
//!   --criterion DIR      criterion's output (target/criterion) to include the policy figures
//!   --only LIST          any of latency,exec,scaling,churn,pods,refill,syscalls,engines,output,
//!                        egress
//!                        (all by default)
//!   --exec-runs N        timed `ctr task exec ID true` per runtime into a running sandbox (30)
//!   --syscall-rounds N   rounds of the syscall-heavy workload (create + find) per runtime (7)
//!   --output-runs N      timed 1 GiB-to-stdout runs per output policy (3)
//!   --engine-runs N      timed runs per runtime and engine, Docker and Podman (20)
//!   --guards N           running containers whose guard memory is measured (5)
//!   --pod-rounds N       pods per handler (10)
//!   --egress-rounds N    egress rounds: a 100 MiB GET and CONNECT and small requests per way (10)
//!   --egress-small N     small requests per round, way and kind (20)
//!   --egress-tunnels L   idle tunnels held open for the memory readings (0,10,100)
//!   --shim PATH          the shim binary (default: $GVH_SHIM_BINARY or next to this binary)
//!   --log-level LEVEL    containerd's (info; debug also starts the shims with -debug, for
//!                        profiling from their timestamps, not for figures)
//!   --experiment-runsc PATH  adds a 4th runtime to the latency runs: our shim with this runsc
//!                        (not published; for testing a proposed fix, see hack/bench/README.md)
//!   --containerd-env K=V environment of containerd, inherited by every shim it starts
//!                        (repeatable; for experiments such as MALLOC_ARENA_MAX=1)
//! ```
//!
//! Needs root, like the integration tests. Nothing here is a test: no figure is asserted.

mod churn;
mod contenders;
mod egress;
mod egress_recipe;
mod egress_report;
mod egress_upstream;
mod engines;
mod exec;
mod latency;
mod machine;
mod output;
mod pods;
mod policy;
mod procfs;
mod refill;
mod report;
mod scaling;
mod stats;
mod svg;
mod syscalls;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gvisor_hardened_tests::{shim_binary, Containerd, ContainerdOptions, TestImage};
use serde_json::json;

use contenders::{Bench, BenchResult, Contender};
use procfs::loadavg;

struct Args {
    out: PathBuf,
    runs: usize,
    warmup: usize,
    exec_runs: usize,
    syscall_rounds: usize,
    levels: Vec<usize>,
    concurrency: Vec<usize>,
    churn_runs: usize,
    churn_rounds: usize,
    pod_rounds: usize,
    engine_runs: usize,
    guards: usize,
    output_runs: usize,
    egress_rounds: usize,
    egress_small: usize,
    egress_tunnels: Vec<usize>,
    criterion: Option<PathBuf>,
    only: Vec<String>,
    shim: Option<PathBuf>,
    log_level: String,
    containerd_env: Vec<(String, String)>,
    experiment_runsc: Option<String>,
}

fn list(s: &str) -> BenchResult<Vec<usize>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|e| format!("{x:?}: {e}").into())
        })
        .collect()
}

fn parse_args() -> BenchResult<Args> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut a = Args {
        out: workspace.join("target").join("bench"),
        runs: 30,
        warmup: 2,
        exec_runs: 30,
        syscall_rounds: 7,
        levels: vec![1, 10, 30],
        concurrency: vec![1, 4],
        churn_runs: 20,
        churn_rounds: 2,
        pod_rounds: 10,
        engine_runs: 20,
        guards: 5,
        output_runs: 3,
        egress_rounds: 10,
        egress_small: 20,
        egress_tunnels: vec![0, 10, 100],
        criterion: None,
        only: vec![
            "latency".into(),
            "exec".into(),
            "scaling".into(),
            "churn".into(),
            "pods".into(),
            "refill".into(),
            "syscalls".into(),
            "engines".into(),
            "output".into(),
            "egress".into(),
        ],
        shim: None,
        log_level: "info".into(),
        containerd_env: Vec::new(),
        experiment_runsc: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--out" => a.out = value()?.into(),
            "--runs" => a.runs = value()?.parse()?,
            "--warmup" => a.warmup = value()?.parse()?,
            "--exec-runs" => a.exec_runs = value()?.parse()?,
            "--syscall-rounds" => a.syscall_rounds = value()?.parse()?,
            "--levels" => a.levels = list(&value()?)?,
            "--concurrency" => a.concurrency = list(&value()?)?,
            "--churn-runs" => a.churn_runs = value()?.parse()?,
            "--churn-rounds" => a.churn_rounds = value()?.parse()?,
            "--pod-rounds" => a.pod_rounds = value()?.parse()?,
            "--engine-runs" => a.engine_runs = value()?.parse()?,
            "--guards" => a.guards = value()?.parse()?,
            "--output-runs" => a.output_runs = value()?.parse()?,
            "--egress-rounds" => a.egress_rounds = value()?.parse()?,
            "--egress-small" => a.egress_small = value()?.parse()?,
            "--egress-tunnels" => a.egress_tunnels = list(&value()?)?,
            "--criterion" => a.criterion = Some(value()?.into()),
            "--only" => a.only = value()?.split(',').map(str::to_string).collect(),
            "--shim" => a.shim = Some(value()?.into()),
            "--log-level" => a.log_level = value()?,
            "--experiment-runsc" => a.experiment_runsc = Some(value()?),
            "--containerd-env" => {
                let kv = value()?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--containerd-env {kv:?}: not KEY=VALUE"))?;
                a.containerd_env.push((k.to_string(), v.to_string()));
            }
            other => {
                return Err(format!(
                    "unknown option {other} (see the top of tests/examples/bench/main.rs)"
                )
                .into())
            }
        }
    }
    if a.runs == 0
        || a.levels.contains(&0)
        || a.concurrency.contains(&0)
        || a.egress_rounds == 0
        || a.egress_small == 0
    {
        return Err(
            "--runs, --levels, --concurrency, --egress-rounds and --egress-small must be positive"
                .into(),
        );
    }
    Ok(a)
}

/// The global flags `tests/baseline/runsc-baseline` gives the stack's runsc, from the file it
/// keeps them in (written on its first call; see the wrapper).
fn baseline_flags() -> String {
    let Ok(dir) = gvisor_hardened_tests::stack::bin_dir() else {
        return "(unknown)".into();
    };
    let key: String = dir
        .join("runsc")
        .to_string_lossy()
        .split('/')
        .map(|p| format!("_{p}"))
        .collect();
    std::fs::read_to_string(format!(
        "/run/gvisor-hardened-tests/runsc-baseline/flags{key}"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_else(|_| "(not run)".into())
}

fn main() -> BenchResult<()> {
    let args = parse_args()?;
    let shim = match &args.shim {
        Some(p) => p.clone(),
        None => shim_binary()?,
    };
    let machine = machine::Machine::probe(&shim);
    eprintln!("bench: {}", machine.one_line());
    eprintln!("bench: shim {}", shim.display());
    let load_start = loadavg();

    // Production-like logging: at "debug" containerd starts every shim with -debug as well.
    let c = Containerd::start(ContainerdOptions {
        log_level: args.log_level.clone(),
        env: args.containerd_env.clone(),
        ..ContainerdOptions::with_shim(&shim)
    })?;
    let image = TestImage::ensure()?;
    c.import(&image)?;
    let policy = contenders::write_policy(c.dir(), "bench-policy.toml", None)?;
    let experiment_policy = match &args.experiment_runsc {
        Some(r) => Some(contenders::write_policy(
            c.dir(),
            "experiment-policy.toml",
            Some(r),
        )?),
        None => None,
    };
    let b = Bench {
        image: image.reference().to_string(),
        policy,
        experiment_policy,
        c,
        failures: Default::default(),
        attempts: Default::default(),
    };
    let want = |x: &str| args.only.iter().any(|o| o == x);

    let lat = if want("latency") {
        eprintln!(
            "bench: latency, {} runs each (+{} warm-up)",
            args.runs, args.warmup
        );
        let mut who = Contender::ALL.to_vec();
        if b.experiment_policy.is_some() {
            who.push(Contender::HardenedExperiment);
        }
        Some(latency::measure(&b, &who, args.runs, args.warmup)?)
    } else {
        None
    };
    let exec = if want("exec") {
        eprintln!(
            "bench: tool-call latency (exec into a running sandbox), {} each (+{} warm-up)",
            args.exec_runs, args.warmup
        );
        Some(exec::measure(
            &b,
            &Contender::ALL,
            args.exec_runs,
            args.warmup,
        )?)
    } else {
        None
    };
    let mut levels = BTreeMap::new();
    if want("scaling") {
        eprintln!("bench: memory and scaling at {:?} sandboxes", args.levels);
        levels = scaling::measure(&b, &args.levels, &Contender::GVISOR)?;
        // runc at one sandbox, for reference: the same Go shim binary, no gVisor below it.
        levels.insert(
            (1, Contender::Runc),
            scaling::measure_level(&b, Contender::Runc, 1)?,
        );
    }
    let churn = if want("churn") {
        eprintln!("bench: churn at concurrency {:?}", args.concurrency);
        churn::measure(&b, &args.concurrency, args.churn_runs, args.churn_rounds)?
    } else {
        Vec::new()
    };
    let output = if want("output") {
        eprintln!(
            "bench: 1 GiB to stdout, {} runs per output policy (+1 warm-up)",
            args.output_runs
        );
        Some(output::measure(&b, args.output_runs, 1)?)
    } else {
        None
    };
    let pods = if want("pods") {
        eprintln!("bench: pods through CRI, {} per handler", args.pod_rounds);
        Some(pods::measure(&shim, args.pod_rounds)?)
    } else {
        None
    };
    let refill = if want("refill") {
        eprintln!("bench: warm pool refill after a burst of claims, against running pods");
        Some(refill::measure(&shim)?)
    } else {
        None
    };
    let syscalls = if want("syscalls") {
        eprintln!(
            "bench: syscall-heavy workload, {} rounds (+1 warm-up)",
            args.syscall_rounds
        );
        Some(syscalls::measure(&b, args.syscall_rounds, 1)?)
    } else {
        None
    };
    let engines = if want("engines") {
        eprintln!(
            "bench: Docker and Podman, {} runs each (+{} warm-up)",
            args.engine_runs, args.warmup
        );
        Some(engines::measure(
            args.engine_runs,
            args.warmup,
            args.guards,
        )?)
    } else {
        None
    };
    let egress = if want("egress") {
        // One warm-up round at most: a round moves 400 MiB per way.
        let warmup = args.warmup.min(1);
        eprintln!(
            "bench: egress, {} rounds of {} small requests (+{warmup} warm-up)",
            args.egress_rounds, args.egress_small
        );
        Some(egress::measure(
            &b,
            &egress::Options {
                rounds: args.egress_rounds,
                warmup,
                small: args.egress_small,
                tunnels: args.egress_tunnels.clone(),
            },
        )?)
    } else {
        None
    };
    let load_end = loadavg();
    let Bench {
        c,
        failures,
        attempts,
        ..
    } = b;
    let failures = failures.into_inner().unwrap();
    let attempts = attempts.into_inner().unwrap();
    let teardown = c.shutdown();
    if !teardown.is_clean() {
        eprintln!("bench: containerd shutdown had to force: {teardown}");
    }

    let policy = match &args.criterion {
        Some(dir) => Some(policy::read(dir)?),
        None => None,
    };
    let report = report::Report {
        machine: &machine,
        load_start,
        load_end,
        latency: lat.as_ref(),
        levels: &levels,
        churn: &churn,
        concurrencies: &args.concurrency,
        policy: policy.as_deref(),
        failures: &failures,
        attempts: &attempts,
    };
    let mut markdown = report.markdown();
    if let Some(x) = &exec {
        markdown.push_str(&format!("{}\n", x.markdown()));
    }
    match &pods {
        Some(p) => markdown.push_str(&format!("\n{}", p.markdown())),
        None => markdown.push_str("\n**Pods**: not measured in this run (`--only pods`).\n"),
    }
    if let Some(x) = &refill {
        markdown.push_str(&format!("\n{}", x.markdown()));
    }
    if let Some(x) = &syscalls {
        markdown.push_str(&format!("\n{}", x.markdown()));
    }
    if let Some(e) = &engines {
        markdown.push_str(&format!("\n{}", e.markdown()));
    }
    if let Some(o) = &output {
        markdown.push_str(&format!("\n{}", o.markdown()));
    }
    if let Some(e) = &egress {
        markdown.push_str(&format!("\n{}", e.markdown()));
    }
    println!("\n{markdown}");

    std::fs::create_dir_all(&args.out)?;
    let results = json!({
        "schema": 1,
        "unix_time": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs(),
        "machine": machine.to_json(),
        "loadavg_start": load_start,
        "loadavg_end": load_end,
        "config": {
            "runs": args.runs, "warmup": args.warmup, "levels": args.levels,
            "concurrency": args.concurrency, "churn_runs": args.churn_runs,
            "churn_rounds": args.churn_rounds, "containerd_log_level": args.log_level,
            "containerd_env": args.containerd_env.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
            "hardened_policy": "embedded default, [audit] path moved into the bench dir, passed as ConfigPath",
            "experiment_runsc": args.experiment_runsc,
            "go_shim_runsc": format!("io.containerd.runc.v2 + tests/baseline/runsc-baseline (runsc {})", baseline_flags()),
            "exec_runs": args.exec_runs,
            "syscall_rounds": args.syscall_rounds,
        },
        "latency": lat.as_ref().map(|l| l.to_json()),
        "scaling": levels.values().map(|l| l.to_json()).collect::<Vec<_>>(),
        "churn": (!churn.is_empty()).then(|| churn::to_json(&churn, &args.concurrency)),
        "policy": policy.as_deref().map(policy::to_json),
        "run_true_attempts": attempts.iter().map(|(who, n)| (who.key().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "failed_runs": failures.iter().map(|(who, f)| (who.key().to_string(), json!(f.iter().map(|x| json!({
            "id": x.id, "elapsed_ms": stats::round3(x.elapsed_ms), "stderr": x.stderr,
        })).collect::<Vec<_>>()))).collect::<serde_json::Map<_, _>>(),
        "exec": exec.as_ref().map(|x| x.to_json()),
        "syscalls": syscalls.as_ref().map(|x| x.to_json()),
        "pods": pods.as_ref().map(|p| p.to_json()),
        "refill": refill.as_ref().map(|r| r.to_json()),
        "engines": engines.as_ref().map(|e| e.to_json()),
        "output": output.as_ref().map(|o| o.to_json()),
        "egress": egress.as_ref().map(|e| e.to_json()),
        "containerd_shutdown_clean": teardown.is_clean(),
    });
    let json_path = args.out.join("results.json");
    std::fs::write(&json_path, serde_json::to_string_pretty(&results)? + "\n")?;
    std::fs::write(args.out.join("summary.md"), &markdown)?;
    if let Some(e) = &egress {
        // On their own as well: the egress section is often run alone (`--only egress`), and
        // publishing it must not replace the other sections' published figures.
        std::fs::write(args.out.join("egress.md"), e.markdown())?;
        std::fs::write(
            args.out.join("egress.json"),
            serde_json::to_string_pretty(&json!({
                "machine": machine.to_json(),
                "egress": e.to_json(),
            }))? + "\n",
        )?;
    }
    if let Some(l) = &lat {
        let colors = ["#1f77b4", "#d62728", "#7f7f7f", "#2ca02c"];
        let series: Vec<svg::Series> = [
            Contender::Hardened,
            Contender::GoShimRunsc,
            Contender::Runc,
            Contender::HardenedExperiment,
        ]
        .iter()
        .zip(colors)
        .filter_map(|(who, color)| {
            l.samples.get(who).map(|s| svg::Series {
                label: who.label(),
                color,
                samples: s,
            })
        })
        .collect();
        let chart = svg::render(
            "ctr run --rm IMAGE ID true: start-to-exit latency",
            &format!(
                "{} runs each, interleaved; {} CPUs, kernel {}, {}",
                args.runs, machine.cpus, machine.kernel, machine.runsc
            ),
            "ms",
            &series,
        );
        std::fs::write(args.out.join("latency.svg"), chart)?;
    }
    eprintln!(
        "bench: wrote {} (and summary.md, latency.svg)",
        json_path.display()
    );
    Ok(())
}
