//! What each CRI call of a pod's life costs, per runtime handler, through the test harness:
//! RunPodSandbox, CreateContainer, StartContainer, ExecSync, StopContainer, RemoveContainer,
//! StopPodSandbox, RemovePodSandbox. A measurement, not a test: nothing here asserts a time.
//!
//! ```text
//! cargo build -p containerd-shim-gvisor-hardened
//! cargo run -p gvisor-hardened-tests --example cri-timings -- [ROUNDS=5] [HANDLER...]
//! ```
//! Handlers default to `runc gvisor-hardened`. A failing call is reported with its error and
//! the round goes on with the next pod (its leftovers are removed at shutdown). Needs root.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Result;
use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::{shim_binary, TEST_IMAGE_REF};

const STEPS: &[&str] = &[
    "RunPodSandbox",
    "CreateContainer",
    "StartContainer",
    "ExecSync",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

#[derive(Default)]
struct Samples {
    ok: BTreeMap<&'static str, Vec<Duration>>,
    failed: Vec<String>,
}

impl Samples {
    /// Times `f` under `step`; returns its value, or records the error and returns None.
    fn time<T>(
        &mut self,
        step: &'static str,
        f: impl FnOnce() -> Result<T, CriError>,
    ) -> Option<T> {
        let start = Instant::now();
        match f() {
            Ok(v) => {
                self.ok.entry(step).or_default().push(start.elapsed());
                Some(v)
            }
            Err(e) => {
                let msg = e.message();
                let short: String = msg.chars().take(200).collect();
                self.failed.push(format!(
                    "{step} failed after {:?}: {short}",
                    start.elapsed()
                ));
                None
            }
        }
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1000.0)
}

fn one_round(cri: &CriContainerd, handler: &str, s: &mut Samples) {
    let config = cri.pod_config("timing");
    let Some(id) = s.time("RunPodSandbox", || {
        cri.client().run_pod_sandbox(&config, handler)
    }) else {
        return;
    };
    // Recorded so shutdown removes it if a later call fails (not timed).
    if let Err(e) = cri.adopt_pod(id.clone(), config.clone(), handler) {
        s.failed.push(format!("PodSandboxStatus: {e}"));
    }
    let c = container_config("app", TEST_IMAGE_REF, &["sleep", "600"]);
    let started = s
        .time("CreateContainer", || {
            cri.client().create_container(&id, &c, &config)
        })
        .and_then(|cid| {
            s.time("StartContainer", || cri.client().start_container(&cid))
                .map(|_| cid)
        });
    if let Some(cid) = started {
        s.time("ExecSync", || cri.client().exec_sync(&cid, &["true"], 10));
        if s.time("StopContainer", || cri.client().stop_container(&cid, 0))
            .is_some()
        {
            s.time("RemoveContainer", || cri.client().remove_container(&cid));
        }
    }
    let stopped = s
        .time("StopPodSandbox", || cri.client().stop_pod_sandbox(&id))
        .is_some();
    if stopped
        && s.time("RemovePodSandbox", || cri.client().remove_pod_sandbox(&id))
            .is_some()
    {
        cri.forget_pod(&id);
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(5);
    let mut handlers: Vec<String> = args.collect();
    if handlers.is_empty() {
        handlers = vec![RUNC_HANDLER.into(), HARDENED_HANDLER.into()];
    }
    let mut cri = CriContainerd::start(CriOptions::with_shim(shim_binary()?))?;
    // A hung call costs this much per round instead of the default minute.
    cri.set_call_timeout(Duration::from_secs(20));
    println!("{rounds} rounds per handler; times in ms (min / median / max)");
    for handler in &handlers {
        let mut s = Samples::default();
        for _ in 0..rounds {
            one_round(&cri, handler, &mut s);
        }
        println!("\n{handler}:");
        for step in STEPS {
            match s.ok.get_mut(step) {
                Some(v) => {
                    v.sort();
                    println!(
                        "  {step:<17} n={:<3} {:>6} / {:>6} / {:>6}",
                        v.len(),
                        ms(v[0]),
                        ms(v[v.len() / 2]),
                        ms(v[v.len() - 1])
                    );
                }
                None => println!("  {step:<17} n=0"),
            }
        }
        for f in &s.failed {
            println!("  ! {f}");
        }
    }
    let report = cri.shutdown();
    println!("\n{report}");
    Ok(())
}
