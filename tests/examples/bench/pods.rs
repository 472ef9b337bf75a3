//! Pods through CRI: RunPodSandbox plus two containers to "both started", per runtime handler,
//! on a private containerd with the CRI plugin (the test harness's `CriContainerd`): our
//! `gvisor-hardened` handler and plain runc. Rounds are interleaved, the handler order rotated
//! each round; stopping and removing a pod is not timed. Each CRI call is timed on its own as
//! well, and each ready pod then takes three tool calls (`ExecSync true`, what an agent's
//! `kubectl exec` amounts to), timed apart from the pod.
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
};
use gvisor_hardened_tests::TEST_IMAGE_REF;
use serde_json::{json, Value};

use crate::contenders::BenchResult;
use crate::stats::{ratio, Summary};

pub const HANDLERS: [(&str, &str); 2] = [
    (DEFAULT_HANDLER, "gvisor-hardened (ours)"),
    (RUNC_HANDLER, "Go shim + runc"),
];

pub struct Pods {
    /// Milliseconds from RunPodSandbox to the second container started, per handler.
    pub samples: Vec<(String, Vec<f64>)>,
    /// Per handler, each CRI call's milliseconds over the timed pods (in [`STEPS`] order).
    pub steps: Vec<(String, Vec<Vec<f64>>)>,
    /// Per handler, the milliseconds of every tool call (`ExecSync true`) into a ready pod.
    pub execs: Vec<(String, Vec<f64>)>,
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
        ready: ms,
        steps,
        execs,
    })
}

pub fn measure(shim: &std::path::Path, rounds: usize) -> BenchResult<Pods> {
    let cri = CriContainerd::start(CriOptions {
        log_level: "info".into(),
        ..CriOptions::with_shim(shim)
    })?;
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
            match one_pod(&cri, h, &mut marker) {
                Ok(times) => {
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
    let report = cri.shutdown();
    if !report.is_clean() {
        eprintln!("bench: CRI containerd shutdown had to force: {report}");
    }
    Ok(Pods {
        samples,
        steps,
        execs,
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

    /// Median of each CRI call per handler, ours against runc's.
    fn steps_markdown(&self) -> String {
        let (Some(ours), Some(runc)) = (
            self.step_columns(DEFAULT_HANDLER),
            self.step_columns(RUNC_HANDLER),
        ) else {
            return String::new();
        };
        let mut out = String::from(
            "\nPer CRI call (medians, ms):\n\n| call | gvisor-hardened | runc | difference |\n|---|---:|---:|---:|\n",
        );
        for (k, name) in STEPS.iter().enumerate() {
            if let (Some(a), Some(b)) = (Summary::of(&ours[k]), Summary::of(&runc[k])) {
                out.push_str(&format!(
                    "| {name} | {:.1} | {:.1} | {:+.1} |\n",
                    a.median,
                    b.median,
                    a.median - b.median
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
            "failed": self.failed,
        })
    }

    pub fn markdown(&self) -> String {
        let runc = self.summary(RUNC_HANDLER);
        let mut out = String::from(
            "**Pods**: RunPodSandbox + 2 containers started, through CRI (handlers interleaved; stop and remove not timed). \
             containerd's Go shim driving runsc cannot carry a two-container pod (its StopPodSandbox never answers), so runc is the only baseline here:\n\n\
             | handler | runs | median ms | p95 ms | median vs runc |\n|---|---:|---:|---:|---:|\n",
        );
        for (h, label) in HANDLERS {
            if let Some(s) = self.summary(h) {
                let r = runc
                    .as_ref()
                    .and_then(|g| ratio(s.median, g.median))
                    .map(|r| format!("{r:.2}"))
                    .unwrap_or_else(|| "-".into());
                out.push_str(&format!(
                    "| {label} | {} | {:.0} | {:.0} | {r} |\n",
                    s.n, s.median, s.p95
                ));
            }
        }
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
