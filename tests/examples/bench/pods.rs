//! Pods through CRI: RunPodSandbox plus two containers to "both started", per runtime handler,
//! on a private containerd with the CRI plugin (the test harness's `CriContainerd`): our
//! `gvisor-hardened` handler and plain runc. Rounds are interleaved, the handler order rotated
//! each round; stopping and removing a pod is not timed. Each CRI call is timed on its own as
//! well, and each ready pod then takes three tool calls (`ExecSync true`, what an agent's
//! `kubectl exec` amounts to), timed apart from the pod.
//!
//! A third handler, `gvisor-hardened-warm`, runs the same policy with the warm pool on
//! (`[pool] size = 2`): its pod sandbox claims a booted sandbox (`gvisor_hardened_core::pool`).
//! Before each timed pod the bench waits, untimed, until that pool is full again, so every
//! warm pod finds a warm sandbox and no refill competes with the pod being timed (what a
//! refill costs the node is measured apart, in `hack/experiments/sandbox-start.py`). Warm pods
//! that found the pool empty anyway are counted.
//!
//! containerd's Go shim driving runsc, the baseline of the other figures, is not a contender
//! here because it cannot carry a pod: measured, its second container's StartContainer hangs
//! (runsc hands `runsc start`'s stdio to the subcontainer, and the Go shim waits for that pipe
//! to close), and with that worked around StopPodSandbox never answered (3 pods of 3, 60 s
//! each). That shim follows a container through a host pid, and a runsc subcontainer has no
//! host process of its own. gVisor's own pod-aware shim is not packaged for Debian.

use std::time::Instant;

use gvisor_hardened_tests::cri::{
    container_config, CriContainerd, CriOptions, HARDENED_HANDLER as DEFAULT_HANDLER, RUNC_HANDLER,
    SHIPPED_DEFAULT_POLICY,
};
use gvisor_hardened_tests::TEST_IMAGE_REF;
use serde_json::{json, Value};

use crate::contenders::BenchResult;
use crate::stats::{ratio, Summary};

/// The default policy with the warm pool on.
pub const WARM_HANDLER: &str = "gvisor-hardened-warm";
/// Warm sandboxes kept for [`WARM_HANDLER`].
const POOL_SIZE: usize = 2;

pub const HANDLERS: [(&str, &str); 3] = [
    (DEFAULT_HANDLER, "gvisor-hardened, cold (ours)"),
    (WARM_HANDLER, "gvisor-hardened, warm pool (ours)"),
    (RUNC_HANDLER, "Go shim + runc"),
];

pub struct Pods {
    /// Milliseconds from RunPodSandbox to the second container started, per handler.
    pub samples: Vec<(String, Vec<f64>)>,
    /// Per handler, each CRI call's milliseconds over the timed pods (in [`STEPS`] order).
    pub steps: Vec<(String, Vec<Vec<f64>>)>,
    /// Per handler, the milliseconds of every tool call (`ExecSync true`) into a ready pod.
    pub execs: Vec<(String, Vec<f64>)>,
    /// Warm pods timed, and how many of them found no warm sandbox (a cold start).
    pub warm_pods: usize,
    pub warm_cold_starts: usize,
    pub failed: Vec<String>,
}

/// The CRI calls of one pod, in the order they are made: what the per-step table names.
pub const STEPS: [&str; 6] = [
    "RunPodSandbox",
    "PodSandboxStatus",
    "CreateContainer app",
    "StartContainer app",
    "CreateContainer sidecar",
    "StartContainer sidecar",
];

/// Lines written to an ftrace instance's `trace_marker` when `GVH_TRACE_MARKER` names one
/// (`hack/bench/timeline.py` sets it): the begin and end of each pod and of each CRI call, so
/// the process timeline can be cut per pod and per call. Without it, nothing is written.
struct Marker(Option<std::fs::File>);

impl Marker {
    fn from_env() -> Marker {
        Marker(
            std::env::var_os("GVH_TRACE_MARKER")
                .and_then(|p| std::fs::OpenOptions::new().append(true).open(p).ok()),
        )
    }

    fn mark(&mut self, line: &str) {
        if let Some(f) = self.0.as_mut() {
            use std::io::Write;
            // One write per marker: the kernel records each write as one event.
            let _ = f.write_all(format!("gvh-bench {line}").as_bytes());
        }
    }
}

/// Tool calls per pod: `ExecSync` of `true` into the running app container, after the pod is
/// ready (not part of its time).
const EXECS_PER_POD: usize = 3;

/// What one pod measured: RunPodSandbox to the second container started, each CRI call of
/// that (in [`STEPS`] order), and the pod's tool calls.
struct PodTimes {
    id: String,
    ready: f64,
    steps: Vec<f64>,
    execs: Vec<f64>,
}

/// One pod, timed from RunPodSandbox to the second container started, then its tool calls.
fn one_pod(cri: &CriContainerd, handler: &str, marker: &mut Marker) -> Result<PodTimes, String> {
    let config = cri.pod_config("bench");
    let mut steps = Vec::with_capacity(STEPS.len());
    let mut step = |name: &str, t: Instant, marker: &mut Marker| {
        steps.push(t.elapsed().as_secs_f64() * 1000.0);
        marker.mark(&format!("step-end {name}"));
    };
    marker.mark(&format!("pod-begin {handler}"));
    let t0 = Instant::now();
    let id = cri
        .client()
        .run_pod_sandbox(&config, handler)
        .map_err(|e| e.message())?;
    step(STEPS[0], t0, marker);
    // What the kubelet asks next (and where the harness learns the pod's netns and pid).
    let t = Instant::now();
    let pod = cri
        .adopt_pod(id, config, handler)
        .map_err(|e| e.to_string())?;
    step(STEPS[1], t, marker);
    let mut app = String::new();
    for (k, name) in ["app", "sidecar"].into_iter().enumerate() {
        let c = container_config(name, TEST_IMAGE_REF, &["sleep", "600"]);
        let t = Instant::now();
        let cid = cri.create_container(&pod, &c).map_err(|e| e.to_string())?;
        step(STEPS[2 + 2 * k], t, marker);
        let t = Instant::now();
        cri.client()
            .start_container(&cid)
            .map_err(|e| e.message())?;
        step(STEPS[3 + 2 * k], t, marker);
        if k == 0 {
            app = cid;
        }
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    marker.mark(&format!("pod-ready {handler}"));
    let mut execs = Vec::with_capacity(EXECS_PER_POD);
    for _ in 0..EXECS_PER_POD {
        marker.mark(&format!("exec-begin {handler}"));
        let t = Instant::now();
        let out = cri
            .client()
            .exec_sync(&app, &["true"], 10)
            .map_err(|e| e.message())?;
        execs.push(t.elapsed().as_secs_f64() * 1000.0);
        marker.mark(&format!("exec-end {handler}"));
        if out.exit_code != 0 {
            return Err(format!(
                "ExecSync true exited {}: {}",
                out.exit_code, out.stderr
            ));
        }
    }
    cri.remove_pod(&pod).map_err(|e| e.to_string())?;
    Ok(PodTimes {
        id: pod.id.clone(),
        ready: ms,
        steps,
        execs,
    })
}

/// A private containerd with the CRI plugin and two handlers of the default policy: the cold
/// one, and [`WARM_HANDLER`] with `pool` (the lines of a `[pool]` section).
pub fn cri_with_pool(shim: &std::path::Path, pool: &str) -> BenchResult<CriContainerd> {
    let mut opts = CriOptions {
        log_level: "info".into(),
        ..CriOptions::with_shim(shim)
    };
    opts.policies = vec![
        (
            DEFAULT_HANDLER.to_string(),
            SHIPPED_DEFAULT_POLICY.to_string(),
        ),
        (
            WARM_HANDLER.to_string(),
            format!("{SHIPPED_DEFAULT_POLICY}\n[pool]\n{pool}\n"),
        ),
    ];
    Ok(CriContainerd::start(opts)?)
}

pub fn measure(shim: &std::path::Path, rounds: usize) -> BenchResult<Pods> {
    // GVH_BENCH_POOL_REFILL: boots per minute, the policy's default (30) unless set; the
    // refill after a claim waits one interval, so it does not overlap the claiming pod's own
    // container starts (an experiment knob: 600 shows what overlapping costs).
    let refill: u32 = std::env::var("GVH_BENCH_POOL_REFILL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let cri = cri_with_pool(
        shim,
        &format!("size = {POOL_SIZE}\nmemory_limit = \"512Mi\"\nrefill_per_minute = {refill}"),
    )?;
    let mut samples: Vec<(String, Vec<f64>)> = HANDLERS
        .iter()
        .map(|(h, _)| (h.to_string(), Vec::new()))
        .collect();
    let mut steps: Vec<(String, Vec<Vec<f64>>)> = HANDLERS
        .iter()
        .map(|(h, _)| (h.to_string(), vec![Vec::new(); STEPS.len()]))
        .collect();
    let mut execs: Vec<(String, Vec<f64>)> = HANDLERS
        .iter()
        .map(|(h, _)| (h.to_string(), Vec::new()))
        .collect();
    let mut failed = Vec::new();
    let (mut warm_pods, mut warm_cold_starts) = (0, 0);
    let mut marker = Marker::from_env();
    // One untimed pod per handler first: image layers, page cache and the runsc feature cache.
    for (h, _) in HANDLERS {
        if let Err(e) = one_pod(&cri, h, &mut Marker(None)) {
            failed.push(format!("{h} (warm-up): {e}"));
        }
    }
    for round in 0..rounds {
        for k in 0..HANDLERS.len() {
            let i = (round + k) % HANDLERS.len();
            let h = HANDLERS[i].0;
            // Untimed: the pool refilled after the last warm pod, so the refill's boots neither
            // compete with the pod timed next nor leave a warm pod without a warm sandbox.
            let full = gvisor_hardened_tests::poll_until(
                "the warm pool to be full",
                std::time::Duration::from_secs(60),
                || (cri.pool_ready(WARM_HANDLER) >= POOL_SIZE).then_some(()),
            );
            if full.is_err() {
                failed.push(format!(
                    "round {round}: the warm pool did not refill within 60 s"
                ));
            }
            match one_pod(&cri, h, &mut marker) {
                Ok(times) => {
                    if h == WARM_HANDLER {
                        warm_pods += 1;
                        if cri.pool_claim_of(&times.id).is_none() {
                            warm_cold_starts += 1;
                        }
                    }
                    samples[i].1.push(times.ready);
                    for (column, v) in steps[i].1.iter_mut().zip(times.steps) {
                        column.push(v);
                    }
                    execs[i].1.extend(times.execs);
                }
                Err(e) => failed.push(format!("{h}: {e}")),
            }
        }
    }
    // The warm sandboxes left in the pool go before containerd does.
    let drained = cri.layout().drain_pools(shim);
    if !drained.as_ref().is_ok_and(|o| o.status.success()) {
        failed.push(format!("pool-drain: {drained:?}"));
    }
    let report = cri.shutdown();
    if !report.is_clean() {
        eprintln!("bench: CRI containerd shutdown had to force: {report}");
    }
    Ok(Pods {
        samples,
        steps,
        execs,
        warm_pods,
        warm_cold_starts,
        failed,
    })
}

impl Pods {
    fn summary(&self, handler: &str) -> Option<Summary> {
        self.samples
            .iter()
            .find(|(h, _)| h == handler)
            .and_then(|(_, s)| Summary::of(s))
    }

    fn step_columns(&self, handler: &str) -> Option<&Vec<Vec<f64>>> {
        self.steps
            .iter()
            .find(|(h, _)| h == handler)
            .map(|(_, c)| c)
    }

    fn exec_summary(&self, handler: &str) -> Option<Summary> {
        self.execs
            .iter()
            .find(|(h, _)| h == handler)
            .and_then(|(_, s)| Summary::of(s))
    }

    /// Median of each CRI call per handler: ours cold and warm against runc's.
    fn steps_markdown(&self) -> String {
        let (Some(cold), Some(warm), Some(runc)) = (
            self.step_columns(DEFAULT_HANDLER),
            self.step_columns(WARM_HANDLER),
            self.step_columns(RUNC_HANDLER),
        ) else {
            return String::new();
        };
        let mut out = String::from(
            "\nPer CRI call (medians, ms):\n\n| call | cold | warm pool | runc | warm - runc |\n|---|---:|---:|---:|---:|\n",
        );
        for (k, name) in STEPS.iter().enumerate() {
            if let (Some(a), Some(w), Some(b)) = (
                Summary::of(&cold[k]),
                Summary::of(&warm[k]),
                Summary::of(&runc[k]),
            ) {
                out.push_str(&format!(
                    "| {name} | {:.1} | {:.1} | {:.1} | {:+.1} |\n",
                    a.median,
                    w.median,
                    b.median,
                    w.median - b.median
                ));
            }
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "what": "RunPodSandbox + CreateContainer/StartContainer x2 (sleep), ms, through CRI",
            "handlers": self.samples.iter().map(|(h, s)| (h.clone(), json!({
                "summary": Summary::of(s).map(|x| x.to_json()),
                "samples_ms": s,
                "steps": self.step_columns(h).map(|cols| STEPS.iter().zip(cols).map(|(name, c)| (name.to_string(), json!({
                    "summary": Summary::of(c).map(|x| x.to_json()),
                    "samples_ms": c,
                }))).collect::<serde_json::Map<_, _>>()),
                "exec_sync_true": self.exec_summary(h).map(|x| x.to_json()),
                "exec_sync_samples_ms": self.execs.iter().find(|(x, _)| x == h).map(|(_, s)| s),
            }))).collect::<serde_json::Map<_, _>>(),
            "warm_pods": self.warm_pods,
            "warm_cold_starts": self.warm_cold_starts,
            "failed": self.failed,
        })
    }

    pub fn markdown(&self) -> String {
        let runc = self.summary(RUNC_HANDLER);
        let mut out = String::from(
            "**Pods**: RunPodSandbox + 2 containers started, through CRI (handlers interleaved; stop and remove not timed). \
             containerd's Go shim driving runsc cannot carry a two-container pod (its StopPodSandbox never answers), so runc is the only baseline here:\n\n\
             | handler | runs | median ms | p95 ms | median vs runc | p95 vs runc |\n|---|---:|---:|---:|---:|---:|\n",
        );
        for (h, label) in HANDLERS {
            if let Some(s) = self.summary(h) {
                let r = runc
                    .as_ref()
                    .and_then(|g| ratio(s.median, g.median))
                    .map(|r| format!("{r:.2}"))
                    .unwrap_or_else(|| "-".into());
                let p95 = runc
                    .as_ref()
                    .and_then(|g| ratio(s.p95, g.p95))
                    .map(|r| format!("{r:.2}"))
                    .unwrap_or_else(|| "-".into());
                out.push_str(&format!(
                    "| {label} | {} | {:.0} | {:.0} | {r} | {p95} |\n",
                    s.n, s.median, s.p95
                ));
            }
        }
        out.push_str(&format!(
            "\nWarm pods that found the pool empty (cold starts): {} of {}.\n",
            self.warm_cold_starts, self.warm_pods
        ));
        out.push_str(&self.steps_markdown());
        if let (Some(a), Some(b)) = (
            self.exec_summary(DEFAULT_HANDLER),
            self.exec_summary(RUNC_HANDLER),
        ) {
            out.push_str(&format!(
                "\nTool call through CRI (`ExecSync true` into the ready pod's app container, {EXECS_PER_POD} per pod): \
                 ours {:.1} ms (p95 {:.1}), runc {:.1} (p95 {:.1}), ratio {}\n",
                a.median,
                a.p95,
                b.median,
                b.p95,
                ratio(a.median, b.median)
                    .map(|r| format!("{r:.2}"))
                    .unwrap_or_else(|| "-".into())
            ));
        }
        if !self.failed.is_empty() {
            out.push_str(&format!("\nFailed pods: {}\n", self.failed.join("; ")));
        }
        out
    }
}
