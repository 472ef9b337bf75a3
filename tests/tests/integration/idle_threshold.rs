//! The idle detector's CPU threshold (shim/core/src/idle.rs) against real runsc sandboxes: a
//! sandbox that sleeps is judged idle and times out; one in a busy loop is never idle. The
//! detector is fed the sandbox cgroup's CPU counter once per SAMPLE_INTERVAL, as the shim's
//! lifetime task does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gvisor_hardened_core::cgroup::SandboxCgroup;
use gvisor_hardened_core::idle::{
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

/// The idle timeout through the shim: a sandbox that sleeps is stopped (SIGTERM, grace, SIGKILL)
/// and its exit audited as an idle timeout; one in a busy loop and one writing a line every
/// 0.3 s with no CPU to speak of run on, checked every half second for twice the timeout.
#[test]
fn the_shim_stops_an_idle_sandbox_but_neither_a_busy_one_nor_one_writing_output() {
    use gvisor_hardened_tests::fault::task_status;
    use std::io::Read;
    use std::process::Stdio;

    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let timeout = Duration::from_secs(5);
    let policy = TestPolicy::builder(&c, &unique_id("idle"))
        .extra("[lifetime]\nidle_timeout = \"5s\"\ngrace_period = \"2s\"\n")
        .write()
        .unwrap();
    let (busy_id, writer_id, idle_id) = (unique_id("busy"), unique_id("wr"), unique_id("idle"));
    let began = Instant::now();
    let busy = Run::new(image.reference(), &busy_id)
        .runtime(policy.runtime())
        .detach()
        .probe(["spin", "120"]);
    c.run_output(&busy).unwrap().checked().unwrap();
    // Attached, so its output goes through the shim; read to the end by a thread.
    let writer = Run::new(image.reference(), &writer_id)
        .runtime(policy.runtime())
        .sh("while true; do echo tick; usleep 300000; done");
    let mut ctr = c.ctr().args(writer.ctr_args_for(&c));
    ctr.command_mut()
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut writer_ctr = ctr.spawn().unwrap();
    let mut writer_out = writer_ctr.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = writer_out.read_to_string(&mut s);
        s
    });
    poll_until("the writer running", Duration::from_secs(30), || {
        (task_status(&c, &writer_id).ok()??.as_str() == "RUNNING").then_some(())
    })
    .unwrap();

    let idle_started = Instant::now();
    let out = c
        .run_output(
            &Run::new(image.reference(), &idle_id)
                .runtime(policy.runtime())
                .sh("sleep 120"),
        )
        .unwrap();
    let took = idle_started.elapsed();
    assert!(out.code() == 143 || out.code() == 137, "{out}");
    assert!(
        took >= timeout && took < Duration::from_secs(40),
        "stopped after {took:?}"
    );
    let events = policy.audit_events(&idle_id);
    assert!(events.contains(&"idle-timeout".to_string()), "{events:?}");
    let exit = policy
        .audit_lines()
        .into_iter()
        .find(|r| r["container_id"] == idle_id.as_str() && r["event"] == "exit")
        .unwrap();
    assert_eq!(exit["exit_cause"], "idle-timeout", "{exit}");
    println!("an idle sandbox was stopped {took:?} after `ctr run`");

    // The other two keep running for at least twice the idle timeout since they started.
    while began.elapsed() < 2 * timeout + Duration::from_secs(2) {
        for id in [&busy_id, &writer_id] {
            let status = task_status(&c, id).unwrap();
            assert_eq!(
                status.as_deref(),
                Some("RUNNING"),
                "{id} after {:?}",
                began.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    for id in [&busy_id, &writer_id] {
        c.ctr()
            .args(["task", "kill", "--signal", "SIGKILL", id])
            .checked()
            .unwrap();
    }
    assert_eq!(writer_ctr.wait().unwrap().code(), Some(137));
    let printed = reader.join().unwrap();
    kill_and_remove(&c, &busy_id, Duration::from_secs(30)).unwrap();
    for id in [&busy_id, &writer_id] {
        let events = policy.audit_events(id);
        assert!(
            !events.contains(&"idle-timeout".to_string()),
            "{id}: {events:?}"
        );
        let exit = policy
            .audit_lines()
            .into_iter()
            .find(|r| r["container_id"] == id.as_str() && r["event"] == "exit")
            .unwrap();
        assert_eq!(exit["exit_cause"], "signaled", "{exit}");
    }
    let writer_exit = policy
        .audit_lines()
        .into_iter()
        .find(|r| r["container_id"] == writer_id.as_str() && r["event"] == "exit")
        .unwrap();
    assert_eq!(writer_exit["output_bytes"], printed.len(), "{writer_exit}");
    for id in [&busy_id, &writer_id, &idle_id] {
        assert_nothing_left(&c, id, &policy.runtime());
    }
    assert_clean_shutdown(c);
}
