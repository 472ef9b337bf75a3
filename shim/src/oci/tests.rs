//! runsc-hardened's calls on the fake world (`crate::fake`): a container's state directory and
//! record in a temporary directory, its runtime the fake, so they run as any user, without
//! runsc, in milliseconds.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::cli::LogFormat;
use super::error::OciError;
use super::log::EngineLog;
use super::state::{Record, StateDir};
use super::Opened;
use crate::audit::test_support::subject;
use crate::fake::{Fake, Step};
use crate::runsc::client::Runsc;
use crate::runsc::features::Features;
use crate::runsc::flags::GlobalFlags;

/// Container `c1` as `create` records it, its bundle and audit log under `dir`, hardened by
/// the default policy.
pub(super) fn record(dir: &Path) -> (Record, policy_injector::Policy) {
    let policy = policy_injector::Policy::default();
    let spec = json!({"ociVersion": "1.0.2", "process": {"args": ["true"], "cwd": "/"},
                      "root": {"path": "rootfs"},
                      "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                               {"type": "mount"}, {"type": "uts"}]}});
    let hardened = policy_injector::harden(&spec, &policy, &Default::default()).unwrap();
    let record = Record {
        id: "c1".into(),
        bundle: dir.join("bundle"),
        engine: None,
        namespace: "oci".into(),
        policy_toml: String::new(),
        audit_path: dir.join("audit.jsonl"),
        subject: subject("c1"),
        runsc: hardened.runsc,
        features: Features::default(),
        lifetime: hardened.lifetime,
        cgroups_path: "/c1".into(),
        annotations: Default::default(),
        console_socket: None,
        log: EngineLog::new(Some(&dir.join("engine.log")), LogFormat::Json),
        created: String::new(),
        egress: None,
        network_namespace: None,
        policy_name: String::new(),
        writable_binds: Vec::new(),
        runsc_binary: None,
    };
    (record, policy)
}

/// Container `c1`, created: its state directory and record under `dir`, the fake as runtime.
fn opened(fake: &Fake, dir: &Path) -> Opened {
    let (record, policy) = record(dir);
    let state = StateDir::new(Some(&dir.join("state")), "c1").unwrap();
    std::fs::create_dir_all(state.path()).unwrap();
    opened_as(fake, state, record, policy)
}

/// An existing container's calls on the fake: `state` and `record` as `create` left them.
pub(super) fn opened_as(
    fake: &Fake,
    state: StateDir,
    record: Record,
    policy: policy_injector::Policy,
) -> Opened {
    // Never run: every call here goes through the fake runtime.
    let features = Features::parse(
        include_str!("../runsc/fixtures/20221219/flags.txt"),
        include_str!("../runsc/fixtures/20221219/help.txt"),
        "ptrace\n",
    );
    let runsc = Runsc::new(
        "/nonexistent/runsc",
        &GlobalFlags::new("/run/test-root"),
        features,
        crate::reaper::shared_for_tests(),
    )
    .unwrap();
    Opened {
        state,
        record,
        policy,
        runsc,
        runtime: Arc::new(fake.clone()),
    }
}

#[tokio::test]
async fn kill_goes_to_the_init_or_every_process_through_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::default();
    let c = opened(&fake, dir.path());
    // Nothing runs in the fake under this id: runsc's "not running" is runc's words.
    let e = super::kill::run(&c, libc::SIGTERM, false)
        .await
        .unwrap_err();
    assert!(matches!(e, OciError::NotRunning(_)), "{e}");
    let _ = super::kill::run(&c, libc::SIGKILL, true).await;
    assert_eq!(fake.calls_of("kill"), ["kill c1 15 init", "kill c1 9 all"]);
}

#[tokio::test]
async fn a_sigkill_runsc_cannot_deliver_without_a_recorded_sandbox_is_an_error_not_a_guess() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::default();
    fake.fail_next(Step::Kill);
    let c = opened(&fake, dir.path());
    // No `sandbox.process` recorded: no pid is signalled from the host.
    let e = super::kill::run(&c, libc::SIGKILL, false)
        .await
        .unwrap_err();
    assert!(matches!(e, OciError::Runsc(_)), "{e}");
}

#[tokio::test]
async fn a_sigkill_runsc_cannot_deliver_goes_to_the_recorded_sandbox_by_pidfd() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::default();
    fake.fail_next(Step::Kill);
    let c = opened(&fake, dir.path());
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let watch = crate::sandbox::host_process::HostProcess::open(pid).unwrap();
    c.state
        .set_sandbox_process(pid, super::state::proc_start_time(pid))
        .unwrap();
    super::kill::run(&c, libc::SIGKILL, false).await.unwrap();
    assert!(watch.wait_exited(std::time::Duration::from_secs(10)));
    let _ = child.wait();
}

#[tokio::test]
async fn a_recorded_sandbox_whose_pid_was_reused_is_not_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::default();
    fake.fail_next(Step::Kill);
    let c = opened(&fake, dir.path());
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    // Recorded with another start time: the number names another process now.
    let started = super::state::proc_start_time(pid).map(|t| t + 1);
    c.state.set_sandbox_process(pid, started).unwrap();
    assert!(super::kill::run(&c, libc::SIGKILL, false).await.is_err());
    let alive = crate::sandbox::host_process::HostProcess::open(pid).unwrap();
    assert!(alive.is_running());
    alive.signal(libc::SIGKILL).unwrap();
    let _ = child.wait();
}

#[tokio::test]
async fn pause_and_resume_go_through_the_runtime_and_failures_are_runscs() {
    let dir = tempfile::tempdir().unwrap();
    let fake = Fake::default();
    let c = opened(&fake, dir.path());
    super::pause::pause(&c).await.unwrap();
    super::pause::resume(&c).await.unwrap();
    fake.fail_next(Step::Pause);
    let e = super::pause::pause(&c).await.unwrap_err();
    assert!(matches!(e, OciError::Runsc(_)), "{e}");
    assert_eq!(fake.calls_of("pause"), ["pause c1", "pause c1"]);
    assert_eq!(fake.calls_of("resume"), ["resume c1"]);
}
