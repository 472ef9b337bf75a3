//! runsc-hardened's calls on the fake world (`gvisor_hardened_core::fake`): a container's state directory and
//! record in a temporary directory, its runtime the fake, so they run as any user, without
//! runsc, in milliseconds.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::cli::LogFormat;
use super::error::OciError;
use super::log::EngineLog;
use super::state::{write_pid_file, ExitRecord, Record, StateDir};
use crate::opened::Opened;
use gvisor_hardened_core::audit::test_support::subject;
use gvisor_hardened_core::exit::ExitCause;
use gvisor_hardened_core::fake::{Fake, Step};
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runsc::features::Features;
use gvisor_hardened_core::runtime::{CreateCall, SandboxRuntime};

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
        memory_at_create: hardened.spec["linux"]["resources"]["memory"]["limit"].as_i64(),
        console_socket: None,
        log: EngineLog::new(Some(&dir.join("engine.log")), LogFormat::Json),
        created: String::new(),
        egress: None,
        network_namespace: None,
        policy_name: String::new(),
        writable_binds: Vec::new(),
        runsc_binary: None,
        idle_threshold: Default::default(),
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

/// The records of the audit log at `path`, in order (not the chain's own `genesis`).
pub(super) fn audit_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] != "genesis")
        .collect()
}

/// Container `c1` after `create`, on the fake and in a state directory under `dir` (as the
/// guard leaves it once runsc created it: its sandbox pid recorded).
pub(super) async fn created(fake: &Fake, dir: &Path) -> Opened {
    let (record, policy) = record(dir);
    let state = StateDir::new(Some(&dir.join("state")), "c1").unwrap();
    state.create(&record).unwrap();
    let pid = fake
        .create(CreateCall {
            id: "c1",
            bundle: &record.bundle,
            console_socket: None,
            stdio: Default::default(),
        })
        .await
        .unwrap();
    write_pid_file(&state.sandbox_pid_file(), pid as i32).unwrap();
    opened_as(fake, state, record, policy)
}

/// An existing container's calls on the fake: `state` and `record` as `create` left them.
pub(super) fn opened_as(
    fake: &Fake,
    state: StateDir,
    record: Record,
    policy: policy_injector::Policy,
) -> Opened {
    Opened {
        state,
        record,
        policy,
        runtime: Arc::new(fake.clone()),
        host: Arc::new(fake.clone()),
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
    let watch = gvisor_hardened_core::sandbox::host_process::HostProcess::open(pid).unwrap();
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
    let alive = gvisor_hardened_core::sandbox::host_process::HostProcess::open(pid).unwrap();
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

/// `delete` of container `c` with the fake as runsc (or `runtime`'s reason why there is none)
/// and as the host.
async fn delete(fake: &Fake, c: Opened, runtime: Result<(), String>) {
    let runtime = runtime.map(|()| Arc::new(fake.clone()) as Arc<dyn SandboxRuntime>);
    super::delete::remove(c.state, c.record, &c.policy, None, runtime, fake)
        .await
        .unwrap();
}

#[tokio::test]
async fn delete_removes_runscs_container_the_cgroups_and_the_state_and_seals_the_trail() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    fake.exit("c1", ExitStatus::Exited(0));
    let exit = ExitRecord {
        status: 0,
        cause: ExitCause::Exited,
    };
    c.state.set_exit(&exit).unwrap();
    let state = c.state.clone();
    delete(&fake, c, Ok(())).await;
    assert_eq!(fake.leftovers(), Vec::<String>::new());
    assert_eq!(fake.calls_of("delete"), ["delete c1"]);
    assert!(!state.path().exists(), "the state directory is gone");
    let records = audit_records(&dir.path().join("audit.jsonl"));
    let last = records.last().unwrap();
    assert_eq!(last["event"], "delete");
    assert_eq!(last["exit_status"], 0);
    assert!(last.get("error").is_none(), "{last}");
}

#[tokio::test]
async fn delete_after_the_guards_runsc_delete_does_not_run_runsc_again() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    // The guard's `runsc delete` at the exit succeeded and said so.
    fake.delete("c1").await.unwrap();
    std::fs::write(c.state.runsc_deleted_marker(), "").unwrap();
    fake.exit("c1", ExitStatus::Exited(0));
    delete(&fake, c, Ok(())).await;
    assert_eq!(fake.calls_of("delete"), ["delete c1"], "the guard's only");
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn delete_without_a_runtime_still_removes_the_state_and_audits_why_runsc_was_not_run() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    let state = c.state.clone();
    let sandbox = state.sandbox_pid().unwrap();
    delete(&fake, c, Err("runsc /opt/runsc: not found".into())).await;
    assert!(!state.path().exists());
    let records = audit_records(&dir.path().join("audit.jsonl"));
    let error = records.last().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("runsc /opt/runsc: not found"), "{error}");
    assert!(error.contains("no exit was recorded"), "{error}");
    // Honest about what is left: runsc's container, which nobody could delete.
    assert_eq!(
        fake.leftovers(),
        [format!("process {sandbox}"), "runsc state of c1".into()]
    );
}

#[tokio::test]
async fn an_update_is_clamped_by_the_policy_written_to_the_sandboxs_cgroups_and_audited() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    let resources = dir.path().join("resources.json");
    std::fs::write(
        &resources,
        json!({"memory": {"limit": 1u64 << 40}}).to_string(),
    )
    .unwrap();
    super::update::run(&c, &super::cli::Source::File(resources))
        .await
        .unwrap();
    let updates = fake.updates();
    assert_eq!(updates.len(), 1, "{updates:?}");
    assert!(updates[0].starts_with("c1 "), "{updates:?}");
    assert!(
        !updates[0].contains(&(1u64 << 40).to_string()),
        "not above the policy's ceiling: {updates:?}"
    );
    let records = audit_records(&dir.path().join("audit.jsonl"));
    assert_eq!(records.last().unwrap()["event"], "update");
}

#[tokio::test]
async fn an_update_that_changes_the_memory_limit_is_refused_naming_the_rule_and_changes_nothing() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    assert!(c.record.memory_at_create.is_some());
    let resources = dir.path().join("resources.json");
    std::fs::write(
        &resources,
        json!({"memory": {"limit": 300u64 << 20}}).to_string(),
    )
    .unwrap();
    let e = super::update::run(&c, &super::cli::Source::File(resources))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("rejected by policy: resources: resources.memory.limit"),
        "{e}"
    );
    assert_eq!(fake.updates(), Vec::<String>::new());
    let records = audit_records(&dir.path().join("audit.jsonl"));
    assert_eq!(records.last().unwrap()["event"], "update-rejected");
}

#[tokio::test]
async fn an_update_that_is_not_json_is_refused_and_changes_nothing() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    let resources = dir.path().join("resources.json");
    std::fs::write(&resources, "{memory").unwrap();
    let e = super::update::run(&c, &super::cli::Source::File(resources))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not valid JSON"), "{e}");
    assert_eq!(fake.updates(), Vec::<String>::new());
}

#[tokio::test]
async fn an_exec_the_policy_refuses_is_recorded_with_the_rule_and_never_reaches_runsc() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    let process = dir.path().join("process.json");
    std::fs::write(
        &process,
        json!({"args": ["sh"], "cwd": "/", "env": ["PATH=/bin"],
               "user": {"uid": 0, "gid": 0},
               "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 10, "soft": 10},
                           {"type": "RLIMIT_NOFILE", "hard": 99, "soft": 99}]})
        .to_string(),
    )
    .unwrap();
    let args = super::exec::ExecArgs {
        process: &process,
        detach: true,
        pid_file: None,
        console_socket: None,
        preserve_fds: 0,
    };
    let e = super::exec::run(c, args, None).await.unwrap_err();
    assert!(matches!(e, OciError::Rejected(_)), "{e:?}");
    assert!(e.to_string().contains("RLIMIT_NOFILE is set twice"), "{e}");
    assert!(fake.calls_of("exec").is_empty());
    let records = audit_records(&dir.path().join("audit.jsonl"));
    let last = records.last().unwrap();
    assert_eq!(last["event"], "exec-rejected");
    assert_eq!(last["error"], e.to_string());
}

/// The guard's end of the notify fifo, open before `start` writes to it.
fn guards_end_of_the_notify_fifo(state: &StateDir) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(state.notify_fifo())
        .unwrap()
}

#[tokio::test]
async fn start_runs_the_workload_tells_the_guard_and_records_the_start_with_its_pid() {
    use std::io::Read;
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    let mut guard = guards_end_of_the_notify_fifo(&c.state);
    super::start::run(&c).await.unwrap();
    assert_eq!(fake.calls_of("start"), ["start c1"]);
    let mut told = String::new();
    guard.read_to_string(&mut told).unwrap();
    assert_eq!(told, format!("{}\n", super::guard::STARTED));
    let records = audit_records(&dir.path().join("audit.jsonl"));
    let start = records.last().unwrap();
    assert_eq!(start["event"], "start");
    assert_eq!(start["pid"], c.state.sandbox_pid().unwrap());
    assert!(start.get("artifacts").is_none(), "{start}");
}

#[tokio::test]
async fn a_start_runsc_refuses_is_the_error_and_neither_tells_the_guard_nor_records_a_start() {
    use std::io::Read;
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let c = created(&fake, dir.path()).await;
    let mut guard = guards_end_of_the_notify_fifo(&c.state);
    fake.fail_next(Step::Start);
    super::start::run(&c).await.unwrap_err();
    let mut told = String::new();
    // Nothing written: a non-blocking read of an empty fifo with a writer gone is empty or
    // would block, never a line.
    let _ = guard.read_to_string(&mut told);
    assert_eq!(told, "");
    let records = audit_records(&dir.path().join("audit.jsonl"));
    assert!(
        !records.iter().any(|r| r["event"] == "start"),
        "{records:?}"
    );
}

#[tokio::test]
async fn a_start_manifest_that_cannot_be_written_fails_the_start_before_the_workload_runs() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let mut c = created(&fake, dir.path()).await;
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    c.record.writable_binds = vec![gvisor_hardened_core::artifacts::WritableMount {
        source: volume,
        destination: "/work".into(),
    }];
    c.policy.audit.artifacts.enabled = true;
    // The manifests go beside the audit log: a log under a file cannot have them.
    std::fs::write(dir.path().join("not-a-dir"), b"").unwrap();
    c.record.audit_path = dir.path().join("not-a-dir/audit.jsonl");
    let err = super::start::run(&c).await.unwrap_err();
    assert!(err.to_string().contains("not-a-dir"), "{err}");
    assert!(fake.calls_of("start").is_empty(), "{:?}", fake.calls());
}

#[tokio::test]
async fn a_start_manifest_is_kept_in_the_state_for_the_guards_exit_manifest() {
    let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
    let mut c = created(&fake, dir.path()).await;
    let _guard = guards_end_of_the_notify_fifo(&c.state);
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("a.txt"), b"hello").unwrap();
    let binds = vec![gvisor_hardened_core::artifacts::WritableMount {
        source: volume,
        destination: "/work".into(),
    }];
    c.record.writable_binds = binds.clone();
    c.policy.audit.artifacts.enabled = true;
    super::start::run(&c).await.unwrap();
    assert!(c.state.artifacts_start(&binds).is_some());
    let records = audit_records(&dir.path().join("audit.jsonl"));
    let start = records.last().unwrap();
    assert_eq!(start["event"], "start");
    assert_eq!(start["artifacts"]["complete"], true, "{start}");
    assert!(
        start["artifacts"]["manifest"]["sha256"].is_string(),
        "{start}"
    );
}
