//! Pods through CRI: RunPodSandbox plus two containers to "both started", per runtime handler,
//! on a private containerd with the CRI plugin (the test harness's `CriContainerd`): our
//! `gvisor-hardened` handler and plain runc. Rounds are interleaved, the handler order rotated
//! each round; stopping and removing a pod is not timed.
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
    pub failed: Vec<String>,
}

fn one_pod(cri: &CriContainerd, handler: &str) -> Result<f64, String> {
    let config = cri.pod_config("bench");
    let t0 = Instant::now();
    let id = cri
        .client()
        .run_pod_sandbox(&config, handler)
        .map_err(|e| e.message())?;
    let pod = cri
        .adopt_pod(id, config, handler)
        .map_err(|e| e.to_string())?;
    for name in ["app", "sidecar"] {
        let c = container_config(name, TEST_IMAGE_REF, &["sleep", "600"]);
        cri.run_container(&pod, &c).map_err(|e| e.to_string())?;
    }
    let ms = t0.elapsed().as_secs_f64() * 1000.0;
    cri.remove_pod(&pod).map_err(|e| e.to_string())?;
    Ok(ms)
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
    let mut failed = Vec::new();
    // One untimed pod per handler first: image layers, page cache and the runsc feature cache.
    for (h, _) in HANDLERS {
        if let Err(e) = one_pod(&cri, h) {
            failed.push(format!("{h} (warm-up): {e}"));
        }
    }
    for round in 0..rounds {
        for k in 0..HANDLERS.len() {
            let i = (round + k) % HANDLERS.len();
            let h = HANDLERS[i].0;
            match one_pod(&cri, h) {
                Ok(ms) => samples[i].1.push(ms),
                Err(e) => failed.push(format!("{h}: {e}")),
            }
        }
    }
    let report = cri.shutdown();
    if !report.is_clean() {
        eprintln!("bench: CRI containerd shutdown had to force: {report}");
    }
    Ok(Pods { samples, failed })
}

impl Pods {
    fn summary(&self, handler: &str) -> Option<Summary> {
        self.samples
            .iter()
            .find(|(h, _)| h == handler)
            .and_then(|(_, s)| Summary::of(s))
    }

    pub fn to_json(&self) -> Value {
        json!({
            "what": "RunPodSandbox + CreateContainer/StartContainer x2 (sleep), ms, through CRI",
            "handlers": self.samples.iter().map(|(h, s)| (h.clone(), json!({
                "summary": Summary::of(s).map(|x| x.to_json()),
                "samples_ms": s,
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
        if !self.failed.is_empty() {
            out.push_str(&format!("\nFailed pods: {}\n", self.failed.join("; ")));
        }
        out
    }
}
