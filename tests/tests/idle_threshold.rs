//! The idle detector's CPU threshold (shim/src/idle.rs) against real runsc sandboxes: a
//! sandbox that sleeps is judged idle and times out; one in a busy loop is never idle. The
//! detector is fed the sandbox cgroup's CPU counter once per SAMPLE_INTERVAL, as the shim's
//! lifetime task does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use containerd_shim_gvisor_hardened::cgroup::SandboxCgroup;
use containerd_shim_gvisor_hardened::idle::{
    cpu_usage_ns, IdleDetector, IdleThreshold, Sample, Verdict, SAMPLE_INTERVAL,
};
use gvisor_hardened_tests::fault::{kill_and_remove, TestPolicy};
use gvisor_hardened_tests::*;

/// The sandbox cgroup of task `id`, in whichever hierarchy counts its CPU time.
fn cgroup_of(c: &Containerd, id: &str) -> SandboxCgroup {
    poll_until("the sandbox's CPU cgroup", Duration::from_secs(10), || {
        let dirs = inspect::cgroup_dirs(&format!("{}/{id}", c.namespace()));
        let v1 = dirs.iter().find(|d| d.join("cpuacct.usage").is_file());
        let v2 = dirs.iter().find(|d| d.join("cpu.stat").is_file());
        match (v1, v2) {
            (Some(d), _) => Some(SandboxCgroup::V1 {
                dirs: BTreeMap::from([("cpuacct".to_string(), PathBuf::from(d))]),
            }),
            (None, Some(d)) => Some(SandboxCgroup::V2 { dir: d.clone() }),
            _ => None,
        }
    })
    .unwrap()
}

#[test]
fn a_sleeping_sandbox_times_out_and_a_busy_one_is_never_idle() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    // Its own audit log: the default one is host-global.
    let policy = TestPolicy::builder(&c, &unique_id("idle")).write().unwrap();
    let (idle_id, busy_id) = (unique_id("idle"), unique_id("busy"));
    for (id, args) in [(&idle_id, ["sleep", "120"]), (&busy_id, ["spin", "120"])] {
        let run = Run::new(image.reference(), id)
            .runtime(policy.runtime())
            .detach()
            .probe(args);
        c.run_output(&run).unwrap().checked().unwrap();
    }
    let (idle_cg, busy_cg) = (cgroup_of(&c, &idle_id), cgroup_of(&c, &busy_id));
    let timeout = Duration::from_secs(3);
    let mut idle = IdleDetector::new(timeout, IdleThreshold::default());
    let mut busy = IdleDetector::new(timeout, IdleThreshold::default());
    let origin = Instant::now();
    let sample = |cg: &SandboxCgroup| Sample {
        at: origin.elapsed(),
        cpu_ns: cpu_usage_ns(cg).unwrap(),
        output_bytes: 0,
    };
    let mut idle_timed_out_at = None;
    let mut busy_verdicts = Vec::new();
    // Sampling is the behaviour under test: one sample per interval, as the shim takes them.
    while origin.elapsed() < Duration::from_secs(15) {
        if let Verdict::TimedOut { .. } = idle.observe(sample(&idle_cg)) {
            idle_timed_out_at.get_or_insert(origin.elapsed());
        }
        busy_verdicts.push(busy.observe(sample(&busy_cg)));
        if idle_timed_out_at.is_some() && busy_verdicts.len() > 6 {
            break;
        }
        std::thread::sleep(SAMPLE_INTERVAL);
    }
    assert!(
        busy_verdicts.iter().all(|v| *v == Verdict::Active),
        "the busy loop was judged idle: {busy_verdicts:?}"
    );
    let at = idle_timed_out_at.expect("the sleeping sandbox never timed out");
    assert!(at >= timeout, "timed out after {at:?}, before the timeout");
    for id in [&idle_id, &busy_id] {
        kill_and_remove(&c, id, Duration::from_secs(30)).unwrap();
        assert_nothing_left(&c, id, &policy.runtime());
    }
    assert_clean_shutdown(c);
}
