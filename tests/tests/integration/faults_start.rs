//! Faults: a task that is over before `runsc start` has returned to the shim.
//!
//! Under load, a short task can run and exit between the sandbox acknowledging `runsc start`
//! and the shim seeing that call return. A runsc wrapper holds `runsc start` after it
//! succeeded until the sandbox process is gone, which makes that interleaving deterministic.
//! containerd must then see a successful Start and the task's real exit status, as it does when
//! the task lives longer, and the audit log must have the start before the exit.

use std::time::Duration;

use gvisor_hardened_tests::fault::{sandbox_pid, wait_gone, GatePoint, RunscGate, TestPolicy};
use gvisor_hardened_tests::*;

const TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn task_exiting_before_runsc_start_returns_reports_its_exit_status() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let gate = RunscGate::new(&c, "start", GatePoint::After).unwrap();
    let policy = TestPolicy::builder(&c, "start-race")
        .runsc_path(gate.path())
        .write()
        .unwrap();
    let id = unique_id("srace");
    let run = Run::new(image.reference(), &id)
        .runtime(policy.runtime())
        .sh("echo fast; exit 3");
    let ctr_run = c.ctr().args(run.ctr_args_for(&c));
    let attached = std::thread::spawn(move || ctr_run.output());

    gate.wait_reached(TIMEOUT).unwrap();
    assert_eq!(gate.status(), Some(0), "the real runsc start failed");
    // The task runs to its end, and its sandbox is gone, while its `runsc start` call has not
    // returned yet: the shim's reaper has the exit in hand before Start is done.
    wait_gone(sandbox_pid(&c, &id).unwrap(), TIMEOUT).unwrap();
    assert!(gate.release());

    let out = attached.join().unwrap().unwrap();
    assert_eq!(out.code(), 3, "{out}");
    assert!(out.stdout.contains("fast"), "{out}");
    let events = policy.audit_events(&id);
    let pos = |e: &str| events.iter().position(|x| x == e);
    assert!(
        pos("start").is_some() && pos("start") < pos("exit"),
        "{events:?}"
    );
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}
