//! Pods through a real kubelet (`hack/kube-node.sh`'s one-node cluster): how long a pod takes
//! from `kubectl create` to Ready, and what an idle pod costs the node, for the
//! `gvisor-hardened` RuntimeClass (cold, and from a warm pool) against runc. A measurement, not
//! a test: nothing is asserted.
//!
//! ```text
//! cargo build --release -p containerd-shim-gvisor-hardened -p runsc-hardened
//! GVH_SHIM_BINARY=target/release/containerd-shim-gvisor-hardened-v1 \
//!   cargo run --release -p gvisor-hardened-tests --example kube-pods -- [PODS=20] [IDLE=10]
//! ```
//!
//! - Create to Ready: PODS pods per runtime, one at a time, the runtimes interleaved and their
//!   order rotated every round. Each is timed from just before `kubectl create` to the moment a
//!   `kubectl get -w` that runs throughout prints the pod's Ready condition True (so every
//!   runtime pays the same kubectl start-up). Deleting a pod is not timed.
//! - The warm pool: the `gvisor-hardened-tool` RuntimeClass's policy is replaced, for the run,
//!   by the default policy with `[pool] size = 2`, so its pods are the default class's pods
//!   claiming a booted sandbox. Before each of its timed pods the bench waits, untimed, until
//!   the pool is full again; pods that found it empty anyway are counted.
//! - Idle memory: IDLE pods of one runtime at once, all Ready, then 10 s to settle; the PSS of
//!   each pod's shim and everything under it (runc: the pause and `sleep` processes; ours: the
//!   runsc sandbox and gofer, whose PSS includes the sandbox's guest memory), summed and divided
//!   by IDLE. Processes the node runs anyway (containerd, kubelet) are not counted. Not for the
//!   warm pool: a claimed sandbox is not under its pod's shim (the filler booted it).
//!
//! Prints a Markdown table and one JSON line. Needs root, the Kubernetes build (`hack/deps.sh
//! --only kubernetes`) and no other node up (one at a time, like the kube_* tests).

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::panic::{self, AssertUnwindSafe};
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use gvisor_hardened_tests::cri::SHIPPED_DEFAULT_POLICY;
use gvisor_hardened_tests::kube::cases::{ns, sandbox_id, setup, sleeper, Ctx, READY};
use gvisor_hardened_tests::kube::{KubeNode, PodWatch, PolicyOverride};
use gvisor_hardened_tests::shim_binary;

const NS: &str = "bench";
/// One way to run the bench's pods.
#[derive(Clone, Copy)]
struct Runtime {
    class: Option<&'static str>,
    /// Pod names start with it.
    name: &'static str,
    label: &'static str,
    shim_name: &'static str,
    /// Its pods claim from the warm pool.
    warm: bool,
}
const RUNTIMES: [Runtime; 3] = [
    Runtime {
        class: None,
        name: "runc",
        label: "runc",
        shim_name: "containerd-shim-runc-v2",
        warm: false,
    },
    Runtime {
        class: Some("gvisor-hardened"),
        name: "cold",
        label: "gvisor-hardened",
        shim_name: "containerd-shim-gvisor-hardened-v1",
        warm: false,
    },
    Runtime {
        class: Some(WARM_CLASS),
        name: "warm",
        label: "gvisor-hardened, warm pool",
        shim_name: "containerd-shim-gvisor-hardened-v1",
        warm: true,
    },
];
/// The RuntimeClass whose policy becomes the pooled default one for the run.
const WARM_CLASS: &str = "gvisor-hardened-tool";
const POOL_SIZE: usize = 2;

/// `kubectl get pods -w`, one `NAME READY` line per change, stamped as it arrives.
fn watch(node: &KubeNode) -> Result<(std::process::Child, mpsc::Receiver<(String, Instant)>)> {
    let mut child = node
        .kubectl_command()
        .args(["get", "pods", "-n", NS, "-w", "-o"])
        .arg(r#"jsonpath={.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}"#)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("kubectl get -w")?;
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
            if let Some(name) = line.strip_suffix(" True") {
                if tx.send((name.to_string(), Instant::now())).is_err() {
                    return;
                }
            }
        }
    });
    Ok((child, rx))
}

fn ready_at(rx: &mpsc::Receiver<(String, Instant)>, name: &str) -> Result<Instant> {
    let deadline = Instant::now() + READY;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let (n, at) = rx
            .recv_timeout(left)
            .map_err(|_| anyhow!("pod {name} not Ready within {READY:?}"))?;
        if n == name {
            return Ok(at);
        }
    }
}

fn delete(ctx: &Ctx, names: &[String]) -> Result<()> {
    ctx.node
        .kubectl()
        .args(["-n", NS, "delete", "pod", "--grace-period=1", "--wait"])
        .args(names)
        .checked()
        .map(drop)
        .map_err(|e| anyhow!("deleting {names:?}: {e}"))
}

/// Median and 95th percentile (nearest rank) of `v`, in ms.
fn median_p95(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let rank = ((0.95 * n as f64).ceil() as usize).clamp(1, n);
    (median, v[rank - 1])
}

/// pid -> parent pid, for every process.
fn parents() -> BTreeMap<i32, i32> {
    let mut map = BTreeMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: fields follow the last ')'.
        if let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse().ok())
        {
            map.insert(pid, ppid);
        }
    }
    map
}

fn pss_kib(pid: i32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The PSS of `root` and every process under it, in KiB, and how many processes that was.
fn tree_pss(root: i32, parents: &BTreeMap<i32, i32>) -> (u64, usize) {
    let mut stack = vec![root];
    let (mut total, mut count) = (0, 0);
    while let Some(pid) = stack.pop() {
        total += pss_kib(pid);
        count += 1;
        stack.extend(parents.iter().filter(|(_, &pp)| pp == pid).map(|(&p, _)| p));
    }
    (total, count)
}

/// The shim serving sandbox `sandbox`: the `shim_name` process whose command line names it.
fn shim_of(shim_name: &str, sandbox: &str) -> Result<i32> {
    gvisor_hardened_tests::inspect::processes()
        .into_iter()
        .find(|p| p.cmdline.contains(shim_name) && p.cmdline.contains(sandbox))
        .map(|p| p.pid)
        .ok_or_else(|| anyhow!("no {shim_name} for sandbox {sandbox}"))
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let pods: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(20);
    let idle: usize = args.next().map(|s| s.parse()).transpose()?.unwrap_or(10);
    if pods == 0 || idle == 0 {
        bail!("PODS and IDLE must be positive");
    }
    let shim = shim_binary()?;
    eprintln!("kube-pods: shim {}", shim.display());
    let node = KubeNode::up()?;
    // The harness's setup panics on failure: the node goes down either way.
    let installed = match panic::catch_unwind(AssertUnwindSafe(|| setup(&node, &shim))) {
        Ok(installed) => installed,
        Err(_) => {
            let _ = node.down();
            bail!("setting up the node failed (see above)");
        }
    };
    let ctx = Ctx { node, installed };
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| -> Result<String> {
        let pooled = format!("{SHIPPED_DEFAULT_POLICY}\n[pool]\nsize = {POOL_SIZE}\n");
        let _override =
            PolicyOverride::write(&ctx.node, &ctx.installed, WARM_CLASS, &pooled, |t| {
                Ok(t.to_string())
            })?;
        measure(&ctx, pods, idle)
    }));
    if !matches!(outcome, Ok(Ok(_))) {
        // The node's directory goes with it: its logs are kept for the failure's cause.
        let keep = std::env::temp_dir().join("kube-pods-logs");
        let _ = std::process::Command::new("cp")
            .arg("-a")
            .arg(ctx.node.dir().join("logs"))
            .arg(&keep)
            .status();
        // And the warm pool's templates and boot specs.
        let _ = std::process::Command::new("cp")
            .arg("-a")
            .arg(ctx.installed.layout.runsc_root_base().join(".pool"))
            .arg(keep.join("pool"))
            .status();
        eprintln!("kube-pods: the node's logs are in {}", keep.display());
    }
    // The warm sandboxes left go before the node does.
    let drained = ctx
        .installed
        .layout
        .drain_pools(&ctx.installed.layout.shim_path());
    let down = ctx.node.down();
    if !drained.as_ref().is_ok_and(|o| o.status.success()) {
        bail!("pool-drain: {drained:?}");
    }
    let report = match outcome {
        Ok(r) => r?,
        Err(_) => bail!("the measurement panicked (see above)"),
    };
    down.map_err(|e| anyhow!("kube-node.sh down: {e}"))?;
    println!("{report}");
    Ok(())
}

/// How many warm sandboxes the pooled class holds ready (0 before its first pod).
fn pool_ready(ctx: &Ctx) -> usize {
    ctx.installed
        .policy_path(WARM_CLASS)
        .map_or(0, |p| ctx.installed.layout.pool_ready(&p))
}

/// Whether pod sandbox `sandbox` claimed a warm sandbox (its `pool-sandbox-claimed` record).
fn claimed(ctx: &Ctx, sandbox: &str) -> bool {
    ctx.installed.audit_log().lines().any(|l| {
        serde_json::from_str::<serde_json::Value>(l)
            .is_ok_and(|r| r["event"] == "pool-sandbox-claimed" && r["container_id"] == sandbox)
    })
}

fn measure(ctx: &Ctx, pods: usize, idle: usize) -> Result<String> {
    ns(ctx, NS);
    let load_before = fs::read_to_string("/proc/loadavg")?;
    let (mut watcher, rx) = watch(&ctx.node)?;
    // One untimed pod per runtime first: image layers unpacked, caches warm, the pool's
    // template written (its filler starts then).
    for rt in RUNTIMES {
        let name = format!("first-{}", rt.name);
        ctx.node
            .create(&sleeper(&name, NS, rt.class).to_yaml())?
            .checked()?;
        ready_at(&rx, &name)?;
        delete(ctx, &[name])?;
    }
    let mut samples: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut cold_warm_pods = 0;
    for round in 0..pods {
        let mut order = RUNTIMES.to_vec();
        order.rotate_left(round % RUNTIMES.len());
        for rt in order {
            if rt.warm {
                // Untimed: the refill after the last warm pod is over, so its boots neither
                // slow this pod nor leave it without a warm sandbox.
                let deadline = Instant::now() + Duration::from_secs(60);
                while pool_ready(ctx) < POOL_SIZE {
                    if Instant::now() > deadline {
                        bail!("round {round}: the warm pool did not refill within 60 s");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            let name = format!("{}-{round}", rt.name);
            let yaml = sleeper(&name, NS, rt.class).to_yaml();
            let t0 = Instant::now();
            ctx.node.create(&yaml)?.checked()?;
            let at = ready_at(&rx, &name)?;
            samples
                .entry(rt.label)
                .or_default()
                .push(at.duration_since(t0).as_secs_f64() * 1000.0);
            if rt.warm && !claimed(ctx, &sandbox_id(ctx, NS, &name)) {
                cold_warm_pods += 1;
            }
            delete(ctx, &[name])?;
        }
        eprintln!("kube-pods: round {} of {pods}", round + 1);
    }
    let mut memory: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for rt in RUNTIMES.iter().filter(|rt| !rt.warm) {
        let names: Vec<String> = (0..idle).map(|i| format!("idle-{}-{i}", rt.name)).collect();
        for name in &names {
            ctx.node
                .create(&sleeper(name, NS, rt.class).to_yaml())?
                .checked()?;
        }
        for name in &names {
            ctx.node.wait_ready(NS, name, READY)?;
        }
        // Settling, not synchronisation: the sandboxes' start-up allocations are freed or
        // paged in by now, as on a node where they have sat for a while.
        std::thread::sleep(Duration::from_secs(10));
        let parents = parents();
        let (mut kib, mut procs) = (0, 0);
        for name in &names {
            let sandbox = sandbox_id(ctx, NS, name);
            let (k, n) = tree_pss(shim_of(rt.shim_name, &sandbox)?, &parents);
            kib += k;
            procs += n;
        }
        memory.insert(rt.label, (kib as f64 / 1024.0 / idle as f64, procs / idle));
        delete(ctx, &names)?;
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
    let load_after = fs::read_to_string("/proc/loadavg")?;

    let mut stats: BTreeMap<&str, (f64, f64)> = BTreeMap::new();
    for rt in RUNTIMES {
        stats.insert(
            rt.label,
            median_p95(samples.get_mut(rt.label).expect("measured")),
        );
    }
    let (runc_med, runc_p95) = stats["runc"];
    let (cold_med, cold_p95) = stats["gvisor-hardened"];
    let (warm_med, warm_p95) = stats["gvisor-hardened, warm pool"];
    let mut out = format!(
        "load {} -> {}\n\n| through the kubelet | runc | gvisor-hardened, cold | ratio | gvisor-hardened, warm pool | ratio |\n|---|---|---|---|---|---|\n",
        load_before.trim(),
        load_after.trim()
    );
    out += &format!(
        "| pod create to Ready, median of {pods} | {runc_med:.0} ms | {cold_med:.0} ms | {:.2}x | {warm_med:.0} ms | {:.2}x |\n",
        cold_med / runc_med,
        warm_med / runc_med
    );
    out += &format!(
        "| pod create to Ready, p95 | {runc_p95:.0} ms | {cold_p95:.0} ms | {:.2}x | {warm_p95:.0} ms | {:.2}x |\n",
        cold_p95 / runc_p95,
        warm_p95 / runc_p95
    );
    let (runc_mem, runc_procs) = memory["runc"];
    let (ours_mem, ours_procs) = memory["gvisor-hardened"];
    out += &format!(
        "| node memory per idle pod, PSS of its shim and processes, {idle} pods | {runc_mem:.1} MiB ({runc_procs} processes) | {ours_mem:.1} MiB ({ours_procs} processes) | {:.2}x | not measured | |\n",
        ours_mem / runc_mem
    );
    out += &format!(
        "\nWarm-pool pods that found the pool empty (cold starts): {cold_warm_pods} of {pods}.\n"
    );
    out += &format!(
        "\n{}",
        serde_json::json!({
            "pods": pods, "idle": idle, "pool_size": POOL_SIZE,
            "warm_pool_cold_starts": cold_warm_pods,
            "create_to_ready_ms": {
                "runc": {"median": runc_med, "p95": runc_p95},
                "gvisor-hardened": {"median": cold_med, "p95": cold_p95},
                "gvisor-hardened-warm-pool": {"median": warm_med, "p95": warm_p95}},
            "idle_pod_pss_mib": {"runc": runc_mem, "gvisor-hardened": ours_mem},
            "samples_ms": samples,
        })
    );
    Ok(out)
}
