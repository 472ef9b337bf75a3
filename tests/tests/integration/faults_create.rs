//! Faults: the shim killed in the middle of Create, while `runsc create` runs.
//!
//! A runsc wrapper in the policy's `[runsc] path` holds `runsc create` at a gate, so the kill
//! lands at a known point: before runsc did anything, or after the sandbox exists but before
//! the shim learnt its pid. Either way containerd's cleanup (`<shim> delete`) must leave
//! nothing, and the id must be usable again.

use std::time::Duration;

use gvisor_hardened_tests::fault::{
    kill9, remove_ctr_fifos, runsc_processes, shim_pid, wait_gone, GatePoint, RunscGate, TestPolicy,
};
use gvisor_hardened_tests::leaks::wait_nothing_left;
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::*;

const TIMEOUT: Duration = Duration::from_secs(60);

fn containerd() -> (Containerd, TestImage) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    (c, image)
}

/// Runs a task under a gated policy, kills the shim once `runsc create` is at the gate, lets
/// the held create finish after containerd's cleanup, and checks that nothing was left behind
/// and that the id runs again.
fn kill_shim_at(point: GatePoint) {
    let (c, image) = containerd();
    let gate = RunscGate::new(&c, "create", point).unwrap();
    let policy = TestPolicy::builder(&c, "gated")
        .runsc_path(gate.path())
        .write()
        .unwrap();
    let id = unique_id("kcreate");
    let run = Run::new(image.reference(), &id)
        .runtime(policy.runtime())
        .sh("echo should-not-run");
    let ctr_run = c.ctr().args(run.ctr_args_for(&c));
    let attached = std::thread::spawn(move || ctr_run.output());
    gate.wait_reached(TIMEOUT).unwrap();
    let shim = shim_pid(&c, &id).unwrap();
    let root = c.runtime_root(&Runtime::hardened()).unwrap();
    if point == GatePoint::After {
        assert_eq!(gate.status(), Some(0), "the real runsc create failed");
        assert!(
            !runsc_processes(&root, &id).is_empty(),
            "runsc create succeeded but no sandbox process runs"
        );
    }

    kill9(shim);
    wait_gone(shim, TIMEOUT).unwrap();
    let out = attached.join().unwrap().unwrap();
    assert!(!out.success(), "ctr run survived its shim: {out}");
    assert!(!out.stdout.contains("should-not-run"), "{out}");
    // containerd's cleanup of the dead shim runs in the background of the failed Create; the
    // bundle is the last thing it removes.
    poll_until("containerd to remove the bundle", TIMEOUT, || {
        (!c.bundle_dir(&id).exists()).then_some(())
    })
    .unwrap();
    // Only now does the held `runsc create` go on (or return, after the gate): a create that
    // outlives its shim is what a real kill in the middle of Create leaves running.
    assert!(gate.release(), "nobody waited at the gate");
    poll_until("the held runsc create to finish", TIMEOUT, || {
        gate.waiting().is_empty().then_some(())
    })
    .unwrap();
    remove_ctr_fifos(&c, &id);
    // The held create, once it runs after the cleanup, fails (its bundle is gone). A current
    // runsc first makes its log file's directory (runsc 20221219 does not), so the bundle's
    // path comes back holding runsc's own failure log and nothing else: that is runsc writing
    // after every process of ours is gone, and all it can leave. Anything more is a leak.
    let bundle = c.bundle_dir(&id);
    if bundle.exists() {
        let names: Vec<String> = std::fs::read_dir(&bundle)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["runsc.log.json"], "the recreated bundle holds more");
        std::fs::remove_dir_all(&bundle).unwrap();
    }
    let left = wait_nothing_left(&c, &id, &policy.runtime());
    let sandboxes = runsc_processes(&root, &id);
    // The create line was written before runsc ran; the cleanup action adds the delete line.
    assert_eq!(
        policy.audit_events(&id),
        ["create", "delete"],
        "{:?}",
        policy.audit_lines()
    );

    // The id starts again, with the real runsc.
    let plain = TestPolicy::builder(&c, "plain").write().unwrap();
    let again = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(plain.runtime())
                .sh("echo again"),
        )
        .unwrap();
    assert!(
        left.is_empty() && sandboxes.is_empty(),
        "shim killed in runsc create ({point:?}); after containerd's cleanup, {id} left:\n{left}\
         runsc processes: {sandboxes:?}\nheld create exit status: {:?}",
        gate.status()
    );
    assert!(again.success() && again.stdout.contains("again"), "{again}");
    assert_nothing_left(&c, &id, &plain.runtime());
    assert_clean_shutdown(c);
}

#[test]
fn shim_killed_after_runsc_created_the_sandbox_leaves_nothing() {
    kill_shim_at(GatePoint::After);
}

#[test]
fn shim_killed_before_runsc_create_ran_leaves_nothing() {
    kill_shim_at(GatePoint::Before);
}
