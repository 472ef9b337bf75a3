//! Faults: `kill -9` of the shim and of the runsc sandbox while a task runs.

use std::time::Duration;

use gvisor_hardened_tests::fault::{
    event_payload, kill9, remove_ctr_fifos, sandbox_pid, shim_pid, task_status, wait_gone,
    wait_task_status, TestPolicy,
};
use gvisor_hardened_tests::inspect::is_alive;
use gvisor_hardened_tests::leaks::wait_nothing_left;
use gvisor_hardened_tests::*;

const EVENT_TIMEOUT: Duration = Duration::from_secs(60);

fn containerd() -> (Containerd, TestImage) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    (c, image)
}

#[test]
fn kill9_of_the_shim_is_cleaned_up_by_containerd_and_the_id_starts_again() {
    let (c, image) = containerd();
    let policy = TestPolicy::builder(&c, "kill-shim").write().unwrap();
    let id = unique_id("kshim");
    let events = Events::watch(&c).unwrap();
    // Attached `ctr run --rm`, as a user would run it: ctr owns the stdio fifos and removes
    // them and the container once the task is gone.
    let run = Run::new(image.reference(), &id)
        .runtime(policy.runtime())
        .cmd(["sleep", "3600"]);
    let ctr_run = c.ctr().args(run.ctr_args_for(&c));
    let attached = std::thread::spawn(move || ctr_run.output());
    events.wait_for("/tasks/start", &id, EVENT_TIMEOUT).unwrap();
    let shim = shim_pid(&c, &id).unwrap();
    let sandbox = sandbox_pid(&c, &id).unwrap();
    assert!(is_alive(shim) && is_alive(sandbox));

    kill9(shim);
    wait_gone(shim, EVENT_TIMEOUT).unwrap();
    // containerd sees the connection drop, runs `<shim> -id ID -bundle B delete` and
    // publishes the task's exit on the dead shim's behalf.
    let exit = events.wait_for("/tasks/exit", &id, EVENT_TIMEOUT).unwrap();
    let payload = event_payload(&exit).unwrap_or_default();
    assert_eq!(payload["exit_status"], 137, "exit event: {exit}");
    // ctr's Wait was a call through containerd into the dead shim: it fails ("ttrpc: closed")
    // and ctr gives up on its task; its --rm still removes the container. ctr's own stdio
    // fifos stay (a client artifact, not the runtime's): removed here.
    let out = attached.join().unwrap().unwrap();
    assert!(!out.success(), "{out}");
    wait_task_status(&c, &id, None, EVENT_TIMEOUT).unwrap();
    remove_ctr_fifos(&c, &id);
    assert!(
        !is_alive(sandbox),
        "the sandbox (pid {sandbox}) outlived its shim's cleanup"
    );
    // Everything is checked before failing on it, so one leftover does not hide the rest.
    let after_kill = wait_nothing_left(&c, &id, &policy.runtime());

    let events_of_id = policy.audit_events(&id);
    assert_eq!(
        events_of_id.first().map(String::as_str),
        Some("create"),
        "{events_of_id:?}"
    );
    let last = policy.audit_lines().into_iter().last().unwrap();
    assert_eq!(last["event"], "delete", "{last}");
    assert_eq!(last["exit_status"], 137, "{last}");
    assert!(
        last["error"]
            .as_str()
            .is_some_and(|e| e.contains("shim exited unexpectedly")),
        "{last}"
    );

    // The same id runs again: no stale socket, runsc state, cgroup or mount is in the way.
    let again = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh("echo again; exit 5"),
        )
        .unwrap();
    assert_eq!(again.code(), 5, "{again}");
    assert!(again.stdout.contains("again"), "{again}");
    assert_nothing_left(&c, &id, &policy.runtime());
    assert!(
        after_kill.is_empty(),
        "after kill -9 of the shim and containerd's cleanup, container {id} left:\n{after_kill}"
    );
    assert_clean_shutdown(c);
}

#[test]
fn kill9_of_the_sandbox_ends_the_task_with_a_reported_status_and_an_audit_line() {
    let (c, image) = containerd();
    let policy = TestPolicy::builder(&c, "kill-sandbox").write().unwrap();
    let id = unique_id("ksbx");
    let events = Events::watch(&c).unwrap();
    let run = Run::new(image.reference(), &id)
        .runtime(policy.runtime())
        .cmd(["sleep", "3600"]);
    let ctr_run = c.ctr().args(run.ctr_args_for(&c));
    let attached = std::thread::spawn(move || ctr_run.output());
    events.wait_for("/tasks/start", &id, EVENT_TIMEOUT).unwrap();
    let shim = shim_pid(&c, &id).unwrap();
    let sandbox = sandbox_pid(&c, &id).unwrap();

    kill9(sandbox);
    let out = attached.join().unwrap().unwrap();
    assert_eq!(
        out.code(),
        137,
        "ctr run after kill -9 of the sandbox: {out}"
    );
    let exit = events.wait_for("/tasks/exit", &id, EVENT_TIMEOUT).unwrap();
    assert_eq!(
        event_payload(&exit).unwrap_or_default()["exit_status"],
        137,
        "{exit}"
    );
    let exits: Vec<_> = policy
        .audit_lines()
        .into_iter()
        .filter(|l| l["container_id"] == id.as_str() && l["event"] == "exit")
        .collect();
    assert_eq!(exits.len(), 1, "{exits:?}");
    assert_eq!(exits[0]["exit_status"], 137, "{}", exits[0]);
    // `ctr run --rm` deleted the task: the shim served it to the end and then exited.
    wait_gone(shim, EVENT_TIMEOUT).unwrap();
    assert_eq!(task_status(&c, &id).unwrap(), None);
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}
