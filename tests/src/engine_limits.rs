//! The limits runsc-hardened's guards enforce on the container's streams, checked the same way
//! through Docker and Podman: the output bound (`[output] max_bytes`, one budget for the
//! container's process and every `exec`, with or without a terminal) and the idle timeout (no
//! output, no CPU).

use std::time::Duration;

use crate::engine::{run_rm_script, EngineCommand, EngineDir};
use crate::image::TEST_IMAGE_REF;
use crate::poll::poll_until;
use crate::process::CommandOutput;

/// The marker line the bound leaves on a stream it cut.
const MARKER: &str = "[gvisor-hardened: output limit of ";

/// `out`'s stdout before the marker line and from it on.
#[track_caller]
fn at_the_marker(out: &CommandOutput) -> (&str, &str) {
    let at = out.stdout.find(MARKER);
    out.stdout
        .split_at(at.unwrap_or_else(|| panic!("no marker line: {out}")))
}

/// Under `runtime` (the engine's arguments picking runsc-hardened with a policy whose
/// `[output] max_bytes` is `max`): a container writing 5000 bytes delivers `max` of them and
/// the marker, its exit record counts them; then a detached container writes half the budget
/// and an `exec` in it gets only the rest; and the same bound on a terminal.
#[track_caller]
pub fn assert_output_bound(
    engine: impl Fn() -> EngineCommand,
    dir: &EngineDir,
    runtime: &[String],
    args: &[&str],
    max: usize,
) {
    let (out, id) = run_rm_script(
        engine(),
        dir,
        runtime,
        args,
        "yes a | head -c 5000; echo past-the-bound >&2",
    )
    .unwrap();
    assert!(out.success(), "{out}");
    let (delivered, marker) = at_the_marker(&out);
    assert_eq!(delivered.len(), max, "{out}");
    assert!(delivered.bytes().all(|b| b == b'a' || b == b'\n'), "{out}");
    assert!(marker.contains(&format!("{max} bytes")), "{out}");
    assert!(!out.stderr.contains("past-the-bound"), "{out}");
    let exit = dir.audit_record(&id, "exit").unwrap();
    assert_eq!(exit["output_bytes"], max, "{exit}");
    assert_eq!(exit["output_truncated"], true, "{exit}");

    // The container's process and its execs draw from one budget.
    let half = max / 2;
    let name = crate::ids::unique_id("bounded");
    let id = engine()
        .args(["run", "-d", "--name", &name])
        .args(runtime)
        .args(args)
        .args([TEST_IMAGE_REF, "sh", "-c"])
        .arg(format!("yes b | head -c {half}; exec sleep 600"))
        .checked()
        .unwrap()
        .stdout_trimmed()
        .to_string();
    poll_until(
        "the container's output in the engine's log",
        Duration::from_secs(30),
        || {
            let logs = engine().args(["logs", &name]).output().ok()?;
            (logs.stdout.len() == half).then_some(())
        },
    )
    .unwrap();
    let exec = engine()
        .args(["exec", &name, "sh", "-c", "yes c | head -c 5000"])
        .output()
        .unwrap();
    assert!(exec.success(), "{exec}");
    let (delivered, _) = at_the_marker(&exec);
    assert_eq!(delivered.len(), max - half, "{exec}");
    engine().args(["rm", "-f", &name]).checked().unwrap();
    let exec_exit = dir.audit_record(&id, "exec-exit").unwrap();
    assert_eq!(exec_exit["output_bytes"], max - half, "{exec_exit}");
    assert_eq!(exec_exit["output_truncated"], true, "{exec_exit}");

    assert_output_bound_on_a_terminal(engine, dir, runtime, args, max);
}

/// Under `runtime` (a policy whose `[output] max_bytes` is `max`): a container with a terminal
/// (`-t`), which the guard relays, delivers `max` bytes of its 5000 and the marker; typed input
/// and the engine's window size go through the relay the other way.
#[track_caller]
fn assert_output_bound_on_a_terminal(
    engine: impl Fn() -> EngineCommand,
    dir: &EngineDir,
    runtime: &[String],
    args: &[&str],
    max: usize,
) {
    let args = [args, &["-t"]].concat();
    let (out, id) = run_rm_script(engine(), dir, runtime, &args, "yes a | head -c 5000").unwrap();
    assert!(out.success(), "{out}");
    let (delivered, marker) = at_the_marker(&out);
    // The container's terminal turns each "\n" into "\r\n" (those bytes count too); a cut in
    // the middle of a line puts the marker on a line of its own.
    let expected = "a\r\n".repeat(max);
    let (kept, rest) = delivered.split_at(max.min(delivered.len()));
    assert_eq!(kept, &expected[..max], "{out}");
    assert!(rest.is_empty() || rest == "\n", "{out}");
    assert!(marker.contains(&format!("{max} bytes")), "{out}");
    let exit = dir.audit_record(&id, "exit").unwrap();
    assert_eq!(exit["output_bytes"], max, "{exit}");
    assert_eq!(exit["output_truncated"], true, "{exit}");

    // Interactive (`-i -t` from a terminal of the test's, 24x80): what is typed reaches the
    // container through the relay, and the size the engine sets reaches its terminal (the
    // relay copies it within a fraction of a second: the script waits for it, bounded).
    let script = "read x; echo got:$x; \
        for i in $(seq 50); do [ \"$(stty size)\" = \"24 80\" ] && break; sleep 0.1; done; \
        echo size:$(stty size)";
    let interactive = engine()
        .args(["run", "--rm", "-i", "-t"])
        .args(runtime)
        .args(&args[..args.len() - 1])
        .args([TEST_IMAGE_REF, "sh", "-c", script])
        .output_in_pty("hello\n")
        .unwrap();
    assert!(interactive.success(), "{interactive}");
    assert!(interactive.stdout.contains("got:hello"), "{interactive}");
    assert!(interactive.stdout.contains("size:24 80"), "{interactive}");
}

/// Under `runtime` (a policy with a 5 s idle timeout, the least a policy may set, and a 1 s
/// grace period): a container that only sleeps is stopped as idle; one that writes a line a
/// second for 8 s is not.
#[track_caller]
pub fn assert_idle_timeout(
    engine: impl Fn() -> EngineCommand,
    dir: &EngineDir,
    runtime: &[String],
    args: &[&str],
) {
    let (out, id) = run_rm_script(engine(), dir, runtime, args, "sleep 600").unwrap();
    assert_eq!(out.code(), 143, "stopped with SIGTERM: {out}");
    let exit = dir.audit_record(&id, "exit").unwrap();
    assert_eq!(exit["exit_cause"], "idle-timeout", "{exit}");
    let events = dir.audit_events(&id);
    assert!(events.iter().any(|e| e == "idle-timeout"), "{events:?}");

    let (out, id) = run_rm_script(
        engine(),
        dir,
        runtime,
        args,
        "for i in 1 2 3 4 5 6 7 8; do echo tick; sleep 1; done",
    )
    .unwrap();
    assert!(out.success(), "{out}");
    assert_eq!(out.stdout.lines().count(), 8, "{out}");
    let events = dir.audit_events(&id);
    assert!(!events.iter().any(|e| e == "idle-timeout"), "{events:?}");
}
