//! The task API through the real shim: containerd 1.6 + ctr + runsc, one private containerd per
//! test. Each test asserts what the user sees and that nothing is left behind.

use std::time::Duration;

use gvisor_hardened_tests::*;

fn setup() -> (Containerd, TestImage) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    (c, image)
}

/// Starts a detached long-running task and waits until it runs.
fn start_sleeper(c: &Containerd, image: &TestImage, id: &str) {
    let out = c
        .run_output(
            &Run::new(image.reference(), id)
                .detach()
                .cmd(["sleep", "600"]),
        )
        .unwrap();
    assert!(out.success(), "{out}");
    wait_running(c, id);
}

fn wait_running(c: &Containerd, id: &str) {
    poll_until("task running", Duration::from_secs(10), || {
        let out = c.ctr().args(["task", "ls"]).output().ok()?;
        out.stdout
            .lines()
            .any(|l| l.starts_with(id) && l.contains("RUNNING"))
            .then_some(())
    })
    .unwrap();
}

fn remove(c: &Containerd, id: &str) {
    gvisor_hardened_tests::fault::kill_and_remove(c, id, Duration::from_secs(10)).unwrap();
}

#[test]
fn exit_code_of_the_init_process_is_reported_exactly() {
    let (c, image) = setup();
    for code in [0, 3, 42] {
        let id = unique_id("exit");
        let out = c
            .run_output(&Run::new(image.reference(), &id).sh(format!("exit {code}")))
            .unwrap();
        assert_eq!(out.code(), code, "{out}");
        assert_nothing_left(&c, &id, &Runtime::hardened());
    }
    assert_clean_shutdown(c);
}

#[test]
fn sigkill_gives_137_and_sigterm_gives_143() {
    let (c, image) = setup();
    for (signal, want) in [("SIGKILL", 137), ("SIGTERM", 143)] {
        let id = unique_id("sig");
        // An attached `ctr run` exits with the task's status (ctr 1.6 has no `task wait`).
        let args = Run::new(image.reference(), &id)
            .cmd(["sleep", "600"])
            .ctr_args_for(&c);
        let mut child = c.ctr().args(&args).spawn().unwrap();
        wait_running(&c, &id);
        c.ctr()
            .args(["task", "kill", "-s", signal, &id])
            .checked()
            .unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(want), "{signal}");
        assert_nothing_left(&c, &id, &Runtime::hardened());
    }
    assert_clean_shutdown(c);
}

#[test]
fn exec_runs_hardened_even_when_asking_for_root() {
    let (c, image) = setup();
    let id = unique_id("exec");
    start_sleeper(&c, &image, &id);
    let out = c
        .exec(
            &id,
            &["--user", "0"],
            ["sh", "-c", "id; sandbox-probe caps; sandbox-probe nnp"],
        )
        .checked()
        .unwrap();
    assert!(out.stdout.contains("uid=65534"), "{out}");
    assert!(!out.stdout.contains("uid=0"), "{out}");
    assert!(out.stdout.contains("CapEff=0000000000000000"), "{out}");
    assert!(out.stdout.contains("CapPrm=0000000000000000"), "{out}");
    assert!(out.stdout.contains("nnp=1"), "{out}");
    let out = c.exec(&id, &[], ["sh", "-c", "exit 7"]).output().unwrap();
    assert_eq!(out.code(), 7, "{out}");
    remove(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

/// A tool call is one runsc process: the shim runs `runsc exec` attached (no `--detach`, which
/// re-executes runsc as a second `runsc-exec` process to wait), learns the guest pid from a
/// FIFO, and reports runsc's own exit as the exec's. Statuses, instant exits and a failed exec
/// all come through, and nothing of the exec is left.
#[test]
fn an_exec_without_a_terminal_is_one_runsc_process_that_reports_its_status() {
    let (c, image) = setup();
    let id = unique_id("execone");
    start_sleeper(&c, &image, &id);
    // While an exec runs: exactly one runsc process for it, and no runsc-exec.
    let exec_id = unique_id("long");
    let out = c
        .ctr()
        .args(["task", "exec", "--detach", "--exec-id", &exec_id])
        .arg(&id)
        .args(["sleep", "600"])
        .output()
        .unwrap();
    assert!(out.success(), "{out}");
    let execs: Vec<_> = gvisor_hardened_tests::inspect::processes_mentioning(&id)
        .into_iter()
        .filter(|p| p.cmdline.split(' ').any(|w| w == "exec"))
        .collect();
    assert_eq!(execs.len(), 1, "{execs:?}");
    let program = execs[0].cmdline.split(' ').next().unwrap_or_default();
    assert!(
        std::path::Path::new(program).file_name() == Some("runsc".as_ref()),
        "{execs:?}"
    );
    assert!(!execs[0].cmdline.contains("--detach"), "{execs:?}");
    let out = c
        .ctr()
        .args(["task", "kill", "--exec-id", &exec_id, "--signal", "KILL"])
        .arg(&id)
        .output()
        .unwrap();
    assert!(out.success(), "{out}");
    poll_until(
        "the killed exec's runsc exits",
        Duration::from_secs(10),
        || {
            gvisor_hardened_tests::inspect::processes_mentioning(&exec_id)
                .is_empty()
                .then_some(())
        },
    )
    .unwrap();
    // A status by signal comes through as containerd counts it.
    let out = c
        .exec(&id, &[], ["sh", "-c", "kill -9 $$"])
        .output()
        .unwrap();
    assert_eq!(out.code(), 137, "{out}");
    // Processes that end at once, many times over (runsc may be gone before the shim reads
    // the guest pid): every one exits 0 with its output.
    for k in 0..20 {
        let out = c
            .exec(&id, &[], ["echo", &format!("call-{k}")])
            .output()
            .unwrap();
        assert_eq!(out.code(), 0, "{out}");
        assert_eq!(out.stdout.trim(), format!("call-{k}"), "{out}");
    }
    // An exec that cannot start fails with runsc's reason.
    let out = c.exec(&id, &[], ["/no/such/tool"]).output().unwrap();
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr.contains("/no/such/tool") || out.stderr.contains("no such file"),
        "{out}"
    );
    // None of the execs' files (process specs, guest pid FIFOs) is left in the bundle.
    let leftovers: Vec<_> = std::fs::read_dir(c.bundle_dir(&id))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("exec"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    remove(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn exec_with_a_terminal_sees_a_tty() {
    let (c, image) = setup();
    let id = unique_id("exectty");
    start_sleeper(&c, &image, &id);
    let out = c
        .exec(
            &id,
            &["-t"],
            ["sh", "-c", "test -t 0 && echo has-tty; id -u"],
        )
        .output_in_pty(b"")
        .unwrap();
    assert!(out.stdout.contains("has-tty"), "{out}");
    assert!(out.stdout.contains("65534"), "{out}");
    remove(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn interactive_run_with_a_terminal_reads_input_and_writes_output() {
    let (c, image) = setup();
    let id = unique_id("tty");
    let args = Run::new(image.reference(), &id)
        .flags(["-t"])
        .cmd(["sh"])
        .ctr_args_for(&c);
    let out = c
        .ctr()
        .args(&args)
        .output_in_pty(b"test -t 1 && echo interactive-ok\nexit 5\n")
        .unwrap();
    assert!(out.stdout.contains("interactive-ok"), "{out}");
    assert_eq!(out.code(), 5, "{out}");
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

/// `ctr run -t` sends the client terminal's size with ResizePty once the task started; the
/// shim must set it on the sandbox's console.
#[test]
fn resize_pty_gives_the_task_the_client_terminal_size() {
    let (c, image) = setup();
    let id = unique_id("tty-size");
    let want = format!("{} {}", pty::PTY_ROWS, pty::PTY_COLS);
    // The resize can arrive after the shell started: poll (5 s at most) rather than read once.
    let args = Run::new(image.reference(), &id)
        .flags(["-t"])
        .sh(format!(
            "i=0; until [ \"$(stty size 2>/dev/null)\" = \"{want}\" ] || [ $i -ge 500 ]; do \
               usleep 10000; i=$((i+1)); \
             done; echo \"size:$(stty size)\"; exit 6"
        ))
        .ctr_args_for(&c);
    let out = c.ctr().args(&args).output_in_pty(b"").unwrap();
    assert_eq!(out.code(), 6, "{out}");
    assert!(
        out.stdout
            .replace('\r', "")
            .contains(&format!("size:{want}\n")),
        "{out}"
    );
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

/// ctr 1.6 never sends CloseIO for `run` (with runc neither: the task waits for EOF forever), so
/// the task reads a known number of lines; CloseIO itself is tested over ttrpc.
#[test]
fn stdin_reaches_the_task() {
    let (c, image) = setup();
    let id = unique_id("stdin");
    let args = Run::new(image.reference(), &id)
        .cmd(["sh", "-c", "head -n 3 | wc -l; echo done"])
        .ctr_args_for(&c);
    let out = c
        .ctr()
        .args(&args)
        .stdin("one\ntwo\nthree\n")
        .timeout(Duration::from_secs(60))
        .checked()
        .unwrap();
    assert_eq!(
        out.stdout.split_whitespace().collect::<Vec<_>>(),
        ["3", "done"],
        "{out}"
    );
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn output_is_complete_and_in_order() {
    let (c, image) = setup();
    let id = unique_id("order");
    let out = c
        .run_output(&Run::new(image.reference(), &id).sh("seq 1 20000"))
        .unwrap();
    let want: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert!(
        out.stdout == want,
        "output differs: {} bytes vs {}",
        out.stdout.len(),
        want.len()
    );
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn metrics_show_memory_cpu_and_pids() {
    let (c, image) = setup();
    let id = unique_id("metrics");
    start_sleeper(&c, &image, &id);
    let out = c.ctr().args(["task", "metrics", &id]).checked().unwrap();
    for want in [
        "memory.usage_in_bytes",
        "memory.limit_in_bytes",
        "cpuacct.usage",
        "pids.current",
        "pids.limit",
    ] {
        assert!(out.stdout.contains(want), "{want} missing: {out}");
    }
    // The policy's ceilings are what the host enforces: 2Gi, and 32 + 12 * 512 host tasks.
    let line = |k: &str| {
        out.stdout
            .lines()
            .find(|l| l.starts_with(k))
            .map(|l| l.split_whitespace().last().unwrap_or_default().to_string())
    };
    assert_eq!(
        line("memory.limit_in_bytes").as_deref(),
        Some("2147483648"),
        "{out}"
    );
    let want = gvisor_hardened_tests::stack::Stack::selected()
        .default_pids_limit()
        .to_string();
    assert_eq!(line("pids.limit").as_deref(), Some(want.as_str()), "{out}");
    remove(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn ps_pause_and_resume_work() {
    let (c, image) = setup();
    let id = unique_id("pause");
    start_sleeper(&c, &image, &id);
    let out = c.ctr().args(["task", "ps", &id]).checked().unwrap();
    assert!(out.stdout.lines().count() >= 2, "{out}");
    c.ctr().args(["task", "pause", &id]).checked().unwrap();
    let out = c.ctr().args(["task", "ls"]).checked().unwrap();
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("PAUSED")),
        "{out}"
    );
    c.ctr().args(["task", "resume", &id]).checked().unwrap();
    let out = c.ctr().args(["task", "ls"]).checked().unwrap();
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with(&id) && l.contains("RUNNING")),
        "{out}"
    );
    remove(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn checkpoint_is_refused_as_not_supported() {
    let (c, image) = setup();
    let id = unique_id("ckpt");
    start_sleeper(&c, &image, &id);
    let out = c.ctr().args(["task", "checkpoint", &id]).output().unwrap();
    assert!(!out.success(), "{out}");
    assert!(out.stderr.contains("not supported"), "{out}");
    remove(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn lifecycle_events_reach_containerd_in_order() {
    let (c, image) = setup();
    let events = Events::watch(&c).unwrap();
    let id = unique_id("events");
    start_sleeper(&c, &image, &id);
    let out = c.exec(&id, &[], ["sh", "-c", "exit 2"]).output().unwrap();
    assert_eq!(out.code(), 2, "{out}");
    remove(&c, &id);
    let t = Duration::from_secs(20);
    for topic in [
        "/tasks/create",
        "/tasks/start",
        "/tasks/exec-added",
        "/tasks/exec-started",
    ] {
        events.wait_for(topic, &id, t).unwrap();
    }
    events.wait_for("/tasks/delete", &id, t).unwrap();
    let exits = events.matching("/tasks/exit", &id);
    // One for the exec (status 2), one for the init (SIGKILL: 137).
    assert!(
        exits.iter().any(|l| l.contains("\"exit_status\":2")),
        "{exits:?}"
    );
    assert!(
        exits.iter().any(|l| l.contains("\"exit_status\":137")),
        "{exits:?}"
    );
    let order: Vec<String> = events
        .lines()
        .into_iter()
        .filter(|l| l.contains(&id) && l.contains("/tasks/"))
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with("/tasks/"))
                .map(str::to_string)
        })
        .collect();
    let pos = |t: &str| {
        order
            .iter()
            .position(|x| x == t)
            .unwrap_or_else(|| panic!("{t} missing: {order:?}"))
    };
    assert!(pos("/tasks/create") < pos("/tasks/start"), "{order:?}");
    assert!(pos("/tasks/start") < pos("/tasks/exec-added"), "{order:?}");
    assert!(
        pos("/tasks/exec-started") < pos("/tasks/delete"),
        "{order:?}"
    );
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn sigterm_to_the_shim_tears_down_its_sandbox_and_the_shim_exits() {
    let (c, image) = setup();
    let id = unique_id("sigterm");
    start_sleeper(&c, &image, &id);
    let shim_pid: i32 = std::fs::read_to_string(c.bundle_dir(&id).join("shim.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signalling the shim process the test started through containerd.
    assert_eq!(unsafe { libc::kill(shim_pid, libc::SIGTERM) }, 0);
    poll_until("the shim to exit", Duration::from_secs(30), || {
        (!inspect::is_alive(shim_pid)).then_some(())
    })
    .unwrap();
    // No sandbox runs on unsupervised: the shim killed and deleted it before exiting.
    poll_until("the sandbox to be gone", Duration::from_secs(30), || {
        inspect::processes_mentioning(&id)
            .iter()
            .all(|p| !p.cmdline.contains("runsc"))
            .then_some(())
    })
    .unwrap();
    // containerd already cleaned up after the shim; the container record stays, and so do
    // ctr's own stdio fifos of the detached run (a client artifact, not the runtime's).
    c.ctr()
        .args(["container", "delete", &id])
        .checked()
        .unwrap();
    gvisor_hardened_tests::fault::remove_ctr_fifos(&c, &id);
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}
