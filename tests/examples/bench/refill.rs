//! What refilling the warm pool after a burst of claims costs the pods already running, and
//! whether the pool keeps to its memory bound meanwhile (issue 21's "cost of the pool").
//!
//! On a private containerd with the CRI plugin: a pod whose container spins the CPU (`sh -c
//! 'while :; do :; done'`, one core of the two) and an idle pod that takes tool calls
//! (`ExecSync true`, back to back), both on the cold `gvisor-hardened` handler. The
//! `gvisor-hardened-warm` handler runs the default policy with `[pool] size = 20`,
//! `memory_limit = "1Gi"` and the default refill of 30 boots a minute. Once that pool is full:
//! - *baseline*: 20 s with the pool full and nothing else happening;
//! - *burst*: 20 RunPodSandbox on the warm handler at once (each claims a warm sandbox);
//! - *refill*: from the burst's end until the pool is full again, the filler booting at nice
//!   19 at its rate.
//!
//! In both windows: the CPU the spinning pod got (its container's CPU time over the window's
//! wall time, from CRI ContainerStats, as the kubelet reads it), the tool calls' latency, and
//! in the refill window the highest total PSS of the ready warm sandboxes, against the bound.

use std::time::{Duration, Instant};

use gvisor_hardened_tests::cri::{container_config, CriContainerd, Pod, HARDENED_HANDLER};
use gvisor_hardened_tests::TEST_IMAGE_REF;
use serde_json::{json, Value};

use crate::contenders::BenchResult;
use crate::pods::WARM_HANDLER;
use crate::stats::{ratio, round3, Summary};

const BURST: usize = 20;
const MEMORY_LIMIT_MIB: u64 = 1024;
const BASELINE: Duration = Duration::from_secs(20);
/// The longest a refill of [`BURST`] may take at 30 boots a minute, with room to spare.
const REFILL_DEADLINE: Duration = Duration::from_secs(180);

/// What one window measured.
pub struct Window {
    pub secs: f64,
    /// CPU cores the spinning pod got, on average over the window.
    pub busy_cores: f64,
    pub exec_ms: Vec<f64>,
    /// The highest total PSS of the ready warm sandboxes seen (MiB).
    pub peak_pool_pss_mib: f64,
}

pub struct Refill {
    pub baseline: Window,
    pub refill: Window,
    /// Burst pods that claimed a warm sandbox.
    pub claimed: usize,
    pub failed: Vec<String>,
}

/// The spinning container's CPU time so far (ns), as CRI reports it.
fn cpu_ns(cri: &CriContainerd, id: &str) -> BenchResult<u64> {
    let stats = cri.client().container_stats(id)?;
    Ok(stats
        .cpu
        .and_then(|c| c.usage_core_nano_seconds)
        .map(|v| v.value)
        .ok_or("no CPU figure in ContainerStats")?)
}

/// Total PSS of the warm pool's ready sandboxes (MiB).
fn pool_pss_mib(cri: &CriContainerd) -> f64 {
    let Some(dir) = cri.pool_key_dir(WARM_HANDLER) else {
        return 0.0;
    };
    let bytes: u64 = std::fs::read_dir(dir.join("ready"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: Value = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            Some(gvisor_hardened_core::pool::memory::sandbox_pss(
                v["pid"].as_i64()? as i32,
            ))
        })
        .sum();
    bytes as f64 / (1024.0 * 1024.0)
}

/// Tool calls into `idle`, back to back, until `done` says so or `max` passed; the CPU the
/// spinning container `busy` got meanwhile.
fn window(
    cri: &CriContainerd,
    busy: &str,
    idle: &str,
    max: Duration,
    mut done: impl FnMut() -> bool,
) -> BenchResult<Window> {
    let (t0, cpu0) = (Instant::now(), cpu_ns(cri, busy)?);
    let mut exec_ms = Vec::new();
    let mut peak: f64 = 0.0;
    while t0.elapsed() < max && !done() {
        let t = Instant::now();
        let out = cri.client().exec_sync(idle, &["true"], 30)?;
        if !out.success() {
            return Err(format!("tool call failed: {out}").into());
        }
        exec_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        peak = peak.max(pool_pss_mib(cri));
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_ns(cri, busy)?.saturating_sub(cpu0);
    Ok(Window {
        secs,
        busy_cores: cpu as f64 / 1e9 / secs,
        exec_ms,
        peak_pool_pss_mib: peak,
    })
}

pub fn measure(shim: &std::path::Path) -> BenchResult<Refill> {
    let cri = crate::pods::cri_with_pool(
        shim,
        &format!("size = {BURST}\nmemory_limit = \"{MEMORY_LIMIT_MIB}Mi\""),
    )?;
    let mut failed = Vec::new();
    let busy_pod = cri.run_pod("spinning", HARDENED_HANDLER)?;
    let busy = cri.run_container(
        &busy_pod,
        &container_config("spin", TEST_IMAGE_REF, &["sh", "-c", "while :; do :; done"]),
    )?;
    let idle_pod = cri.run_pod("tools", HARDENED_HANDLER)?;
    let idle = cri.run_container(
        &idle_pod,
        &container_config("idle", TEST_IMAGE_REF, &["sleep", "3600"]),
    )?;
    // The first pod of the warm handler starts cold and leaves the filler behind.
    let first = cri.run_pod("first", WARM_HANDLER)?;
    cri.remove_pod(&first)?;
    gvisor_hardened_tests::poll_until("the pool to fill", REFILL_DEADLINE, || {
        (cri.pool_ready(WARM_HANDLER) >= BURST).then_some(())
    })?;

    let baseline = window(&cri, &busy, &idle, BASELINE, || false)?;
    let pods: Vec<Result<Pod, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..BURST)
            .map(|i| {
                let cri = &cri;
                s.spawn(move || {
                    cri.run_pod(&format!("burst-{i}"), WARM_HANDLER)
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut claimed = 0;
    let mut burst = Vec::new();
    for p in pods {
        match p {
            Ok(pod) => {
                claimed += usize::from(cri.pool_claim_of(&pod.id).is_some());
                burst.push(pod);
            }
            Err(e) => failed.push(format!("burst pod: {e}")),
        }
    }
    let refill = window(&cri, &busy, &idle, REFILL_DEADLINE, || {
        cri.pool_ready(WARM_HANDLER) >= BURST
    })?;
    if cri.pool_ready(WARM_HANDLER) < BURST {
        failed.push(format!(
            "the pool did not refill within {REFILL_DEADLINE:?}"
        ));
    }

    for pod in burst.iter().chain([&busy_pod, &idle_pod]) {
        if let Err(e) = cri.remove_pod(pod) {
            failed.push(format!("removing {}: {e}", pod.id));
        }
    }
    let drained = cri.layout().drain_pools(shim);
    if !drained.as_ref().is_ok_and(|o| o.status.success()) {
        failed.push(format!("pool-drain: {drained:?}"));
    }
    let report = cri.shutdown();
    if !report.is_clean() {
        failed.push(format!("containerd shutdown: {report}"));
    }
    Ok(Refill {
        baseline,
        refill,
        claimed,
        failed,
    })
}

impl Window {
    fn to_json(&self) -> Value {
        json!({
            "secs": round3(self.secs),
            "busy_pod_cores": round3(self.busy_cores),
            "tool_call_ms": Summary::of(&self.exec_ms).map(|s| s.to_json()),
            "peak_pool_pss_mib": round3(self.peak_pool_pss_mib),
        })
    }
}

impl Refill {
    pub fn to_json(&self) -> Value {
        json!({
            "what": "a spinning pod's CPU and tool-call latency while the warm pool refills after a burst of claims",
            "burst": BURST, "claimed": self.claimed,
            "pool": {"size": BURST, "memory_limit_mib": MEMORY_LIMIT_MIB, "refill_per_minute": 30},
            "baseline": self.baseline.to_json(),
            "refill": self.refill.to_json(),
            "failed": self.failed,
        })
    }

    pub fn markdown(&self) -> String {
        let med = |w: &Window| Summary::of(&w.exec_ms).map_or(f64::NAN, |s| s.median);
        let p95 = |w: &Window| Summary::of(&w.exec_ms).map_or(f64::NAN, |s| s.p95);
        let (b, r) = (&self.baseline, &self.refill);
        let cell = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.2}x"));
        let mut out = format!(
            "**Refill after a burst**: {BURST} pods claimed at once ({} found a warm sandbox); the pool (size {BURST}, bound {MEMORY_LIMIT_MIB} MiB, 30 boots a minute) then refilled in {:.1} s while one pod spun a CPU and another took tool calls.\n\n\
             | | pool full, idle ({:.0} s) | refilling ({:.1} s) | refilling / idle |\n|---|---:|---:|---:|\n",
            self.claimed, r.secs, b.secs, r.secs
        );
        out += &format!(
            "| CPU the spinning pod got (cores) | {:.3} | {:.3} | {} |\n",
            b.busy_cores,
            r.busy_cores,
            cell(ratio(r.busy_cores, b.busy_cores))
        );
        out += &format!(
            "| tool call (`ExecSync true`), median ms (n) | {:.1} ({}) | {:.1} ({}) | {} |\n",
            med(b),
            b.exec_ms.len(),
            med(r),
            r.exec_ms.len(),
            cell(ratio(med(r), med(b)))
        );
        out += &format!(
            "| tool call, p95 ms | {:.1} | {:.1} | {} |\n",
            p95(b),
            p95(r),
            cell(ratio(p95(r), p95(b)))
        );
        out += &format!(
            "| highest total PSS of the ready warm sandboxes (MiB; bound {MEMORY_LIMIT_MIB}) | {:.0} | {:.0} | |\n",
            b.peak_pool_pss_mib, r.peak_pool_pss_mib
        );
        if !self.failed.is_empty() {
            out += &format!("\nFailed: {}\n", self.failed.join("; "));
        }
        out
    }
}
