//! The client and the reaper against the real runsc (needs root and /usr/bin/runsc,
//! /usr/bin/busybox). Every test cleans up through `Harness`'s Drop.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::client::{ExecOpts, ProcessIo, Status};
use super::command::WaitTarget;
use super::error::RunscError;
use super::flags::Platform;
use super::test_support::{eventually, zombie_children, Bundle, Harness, RUNSC};
use crate::reaper::ExitStatus;

const WAIT: Duration = Duration::from_secs(30);

/// Reads a pipe to EOF on a blocking thread.
fn read_all(mut r: std::io::PipeReader) -> tokio::task::JoinHandle<String> {
    tokio::task::spawn_blocking(move || {
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        s
    })
}

fn sandbox_pid(bundle: &Bundle) -> i32 {
    super::client::read_pid_file(&bundle.pid_file()).unwrap()
}

#[tokio::test]
async fn installed_runsc_supports_the_hardening_flags() {
    let h = Harness::new("unused").await;
    let f = h.runsc.features();
    for flag in [
        "root",
        "oci-seccomp",
        "net-raw",
        "host-uds",
        "network",
        "platform",
    ] {
        assert!(f.has_flag(flag), "{flag}");
    }
    for sub in [
        "create", "start", "state", "kill", "delete", "exec", "ps", "wait",
    ] {
        assert!(f.has_subcommand(sub), "{sub}");
    }
    assert!(f.has_platform(Platform::Ptrace));
    // The hardened defaults pass as they are, but for closed values of flags this release
    // lacks (20221219: --character-device-policy, --directfs), left out as documented.
    for a in h.runsc.adjustments() {
        assert!(
            !f.has_flag(a.flag),
            "{} was left out but the binary has it",
            a.flag
        );
    }
}

#[tokio::test]
async fn lifecycle_output_exit_code_and_cleanup() {
    let bundle = Bundle::new("life", "echo hello from gvisor; exit 3");
    let h = Harness::new(&bundle.id).await;
    let (out_r, out_w) = std::io::pipe().unwrap();
    let stdout = read_all(out_r);
    let io = ProcessIo {
        stdout: Some(out_w.into()),
        ..ProcessIo::default()
    };
    h.runsc
        .create(&bundle.id, bundle.path(), &bundle.pid_file(), None, io)
        .await
        .unwrap();
    let pid = sandbox_pid(&bundle);
    let exit = h.reaper.watch(pid).expect("sandbox is reparented to us");
    let state = h.runsc.state(&bundle.id).await.unwrap();
    assert_eq!((state.status, state.pid), (Status::Created, pid));

    h.runsc.start(&bundle.id, None).await.unwrap();
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    assert_eq!(status, ExitStatus::Exited(3));
    assert_eq!(stdout.await.unwrap(), "hello from gvisor\n");
    assert_eq!(
        h.runsc.state(&bundle.id).await.unwrap().status,
        Status::Stopped
    );

    h.runsc.delete(&bundle.id, false).await.unwrap();
    let err = h.runsc.state(&bundle.id).await.unwrap_err();
    assert!(matches!(err, RunscError::NotFound { .. }), "{err}");
    // Nothing of this sandbox is left under the root.
    let left: Vec<_> = std::fs::read_dir(h.root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains(&bundle.id))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // Gofer and ptrace stubs were reaped by us: no zombies stay behind.
    eventually("no zombie children", WAIT, || zombie_children().is_empty()).await;
}

#[tokio::test]
async fn kill_reports_the_signal_and_a_second_kill_is_already_gone() {
    let bundle = Bundle::new("kill", "sleep 1000");
    let h = Harness::new(&bundle.id).await;
    let (_, exit) = h.create_watched(&bundle).await;
    h.runsc.start(&bundle.id, None).await.unwrap();
    assert_eq!(h.runsc.ps(&bundle.id).await.unwrap(), [1]);
    let stats = h.runsc.stats(&bundle.id).await.unwrap();
    assert_eq!(stats["type"], "stats");

    h.runsc
        .kill(&bundle.id, libc::SIGKILL, false, None)
        .await
        .unwrap();
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    assert_eq!(status.containerd_code(), 137);

    let err = h
        .runsc
        .kill(&bundle.id, libc::SIGKILL, true, None)
        .await
        .unwrap_err();
    assert!(matches!(err, RunscError::AlreadyGone { .. }), "{err}");
    h.runsc.delete(&bundle.id, true).await.unwrap();
}

#[tokio::test]
async fn sigterm_gives_143() {
    let bundle = Bundle::new("term", "sleep 1000");
    let h = Harness::new(&bundle.id).await;
    let (_, exit) = h.create_watched(&bundle).await;
    h.runsc.start(&bundle.id, None).await.unwrap();
    h.runsc
        .kill(&bundle.id, libc::SIGTERM, false, None)
        .await
        .unwrap();
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    assert_eq!(status.containerd_code(), 143);
}

#[tokio::test]
async fn detached_exec_runs_and_its_exit_is_watchable() {
    let bundle = Bundle::new("exec", "sleep 1000");
    let h = Harness::new(&bundle.id).await;
    let (_, init_exit) = h.create_watched(&bundle).await;
    h.runsc.start(&bundle.id, None).await.unwrap();

    let process_json = process_json(&bundle, "exec1", "echo exec-out; exit 4");
    let opts = ExecOpts {
        process_json,
        pid_file: bundle.path().join("exec1.pid"),
        internal_pid_file: Some(bundle.path().join("exec1.ipid")),
        detach: true,
        console_socket: None,
    };
    let (out_r, out_w) = std::io::pipe().unwrap();
    let stdout = read_all(out_r);
    h.runsc
        .exec(
            &bundle.id,
            &opts,
            ProcessIo {
                stdout: Some(out_w.into()),
                ..ProcessIo::default()
            },
        )
        .await
        .unwrap();
    let exec_pid = super::client::read_pid_file(&opts.pid_file).unwrap();
    let exec_exit = h.reaper.watch(exec_pid).expect("exec waiter is ours");
    let status = tokio::time::timeout(WAIT, exec_exit).await.unwrap();
    assert_eq!(status, ExitStatus::Exited(4));
    assert_eq!(stdout.await.unwrap(), "exec-out\n");

    h.runsc
        .kill(&bundle.id, libc::SIGKILL, true, None)
        .await
        .unwrap();
    tokio::time::timeout(WAIT, init_exit).await.unwrap();
}

/// Writes a process spec for `runsc exec`.
fn process_json(bundle: &Bundle, name: &str, script: &str) -> std::path::PathBuf {
    let process = json!({
        "terminal": false,
        "user": {"uid": 65534, "gid": 65534},
        "args": ["sh", "-c", script],
        "env": ["PATH=/bin"],
        "cwd": "/",
        "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": []},
        "noNewPrivileges": true
    });
    let path = bundle.path().join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec(&process).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn runsc_wait_is_unreliable_for_the_root_container_but_the_reaper_is_exact() {
    // Why the shim reaps the sandbox itself: the sandbox dies with its root container and we,
    // the subreaper, collect its status, so `runsc wait` usually has nothing to report.
    let bundle = Bundle::new("wait", "read x; exit 5");
    let h = Harness::new(&bundle.id).await;
    let (in_r, in_w) = std::io::pipe().unwrap();
    let io = ProcessIo {
        stdin: Some(in_r.into()),
        ..ProcessIo::default()
    };
    h.runsc
        .create(&bundle.id, bundle.path(), &bundle.pid_file(), None, io)
        .await
        .unwrap();
    let exit = h.reaper.watch(sandbox_pid(&bundle)).unwrap();
    h.runsc.start(&bundle.id, None).await.unwrap();
    let runsc = h.runsc.clone();
    let id = bundle.id.clone();
    let waiter = tokio::spawn(async move { runsc.wait(&id, WaitTarget::Init).await });
    eventually("runsc wait is running", WAIT, || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read_to_string(e.path().join("cmdline"))
                .map(|c| c.contains("wait\0") && c.contains(&bundle.id))
                .unwrap_or(false)
        })
    })
    .await;
    drop(in_w); // EOF: `read` returns and the container exits 5
    assert_eq!(
        tokio::time::timeout(WAIT, exit).await.unwrap(),
        ExitStatus::Exited(5)
    );
    // runsc wait races the sandbox teardown: it failed in 18 of 20 runs here (alone) and
    // sometimes gets the code over the control socket first. It must never report a wrong code.
    match tokio::time::timeout(WAIT, waiter).await.unwrap().unwrap() {
        Ok(code) => assert_eq!(code, 5),
        Err(RunscError::Failed { stderr, .. }) => {
            assert!(stderr.contains("exit status is unavailable"), "{stderr}")
        }
        Err(other) => panic!("unexpected {other}"),
    }
}

#[tokio::test]
async fn create_failure_names_runscs_reason_from_the_log() {
    let mut bundle = Bundle::new("bad", "true");
    bundle.set(
        "/process/selinuxLabel",
        json!("system_u:system_r:container_t:s0"),
    );
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("runsc.log");
    let h = Harness::with_flags(&bundle.id, |f| {
        f.log = Some(log.clone());
        f.log_format = Some(super::flags::LogFormat::Json);
    })
    .await;
    let err = h.create(&bundle).await.unwrap_err();
    match &err {
        RunscError::Failed { stderr, .. } => {
            assert!(stderr.contains("SELinux is not supported"), "{stderr}")
        }
        other => panic!("unexpected {other}"),
    }
}

#[tokio::test]
async fn a_missing_binary_is_a_spawn_error() {
    let reaper = crate::reaper::shared_for_tests();
    let err = super::client::Runsc::detect(
        Path::new("/nonexistent/runsc"),
        &reaper,
        Duration::from_secs(5),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, RunscError::Spawn { .. }), "{err}");
    // The real one exists.
    assert!(Path::new(RUNSC).exists());
}
