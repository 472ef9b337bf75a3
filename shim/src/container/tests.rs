//! The lifecycle through the shim's task entry points, on the fake runtime and host: no root, no
//! runsc. Each test is named after the behaviour it proves; every one also checks that what it
//! created is gone at the end (`Bed::assert_clean`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use containerd_shim_protos::api::{CreateTaskRequest, ExecProcessRequest};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::ttrpc::Code;
use containerd_shim_protos::types::mount::Mount;
use serde_json::{json, Value};

use crate::error::ShimError;
use crate::fake::{Fake, RecordingSink, Step};
use crate::process::exit::ExitCause;
use crate::reaper::ExitStatus;
use crate::service::Shim;

const SPEC: &str = include_str!("../../../policy-injector/tests/fixtures/ctr-plain.json");
const SIGTERM: u32 = libc::SIGTERM as u32;
const SIGKILL: u32 = libc::SIGKILL as u32;

struct Bed {
    dir: tempfile::TempDir,
    fake: Fake,
    events: Arc<RecordingSink>,
    shim: Shim,
}

impl Bed {
    fn new() -> Bed {
        Self::with_policy("")
    }

    /// A shim whose node policy is the default plus `extra` TOML, its audit log in a temp dir.
    fn with_policy(extra: &str) -> Bed {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "{extra}\n[audit]\npath = \"{}\"\n",
                dir.path().join("audit.jsonl").display()
            ),
        )
        .unwrap();
        let fake = Fake::default();
        let events = Arc::new(RecordingSink::default());
        let shim = Shim::new(fake.env(dir.path(), policy, events.clone()));
        Bed {
            dir,
            fake,
            events,
            shim,
        }
    }

    fn bundle(&self, id: &str) -> PathBuf {
        self.dir.path().join("bundles").join(id)
    }

    /// A bundle with a real ctr spec for `id`, with `annotations` added.
    fn request(&self, id: &str, annotations: &[(&str, &str)]) -> CreateTaskRequest {
        let bundle = self.bundle(id);
        std::fs::create_dir_all(bundle.join("rootfs")).unwrap();
        let mut spec: Value = serde_json::from_str(SPEC).unwrap();
        spec["linux"]["cgroupsPath"] = json!(format!("/test/{id}"));
        for (k, v) in annotations {
            spec["annotations"][*k] = json!(v);
        }
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        let mut mount = Mount::new();
        mount.type_ = "overlay".into();
        mount.source = "overlay".into();
        let mut req = CreateTaskRequest::new();
        req.id = id.into();
        req.bundle = bundle.display().to_string();
        req.rootfs = vec![mount];
        req
    }

    async fn create(&self, id: &str) {
        self.shim.create(self.request(id, &[])).await.unwrap();
    }

    async fn running(&self, id: &str) {
        self.create(id).await;
        self.shim.start(id, "").await.unwrap();
    }

    /// The audit events recorded for container `id`, in order.
    fn audit(&self, id: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|r| r["container_id"] == id)
            .collect()
    }

    fn audit_events(&self, id: &str) -> Vec<String> {
        self.audit(id)
            .iter()
            .map(|r| r["event"].as_str().unwrap().to_string())
            .collect()
    }

    fn audit_record(&self, id: &str, event: &str) -> Value {
        self.audit(id)
            .into_iter()
            .find(|r| r["event"] == event)
            .unwrap_or_else(|| panic!("no {event} record for {id}: {:?}", self.audit(id)))
    }

    async fn exit_status(&self, id: &str) -> u32 {
        self.shim.wait(id, "").await.unwrap().exit_status
    }

    /// Nothing of any container is left in runsc, the process table, the mounts or the cgroups,
    /// and the shim's own files are gone from the bundles.
    fn assert_clean(&self) {
        assert_eq!(self.fake.leftovers(), Vec::<String>::new());
        for entry in std::fs::read_dir(self.dir.path().join("bundles")).unwrap() {
            let bundle = entry.unwrap().path();
            for name in [crate::bundle::BUNDLE_STATE, crate::bundle::INIT_PID_FILE] {
                assert!(
                    !bundle.join(name).exists(),
                    "{}",
                    bundle.join(name).display()
                );
            }
        }
    }
}

fn code(e: ShimError) -> (Code, String) {
    (e.code(), e.to_string())
}

fn exited(code: i32) -> ExitStatus {
    ExitStatus::Exited(code)
}

#[tokio::test]
async fn a_container_runs_exits_and_is_deleted_with_its_events_and_audit_in_order() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.exit("c1", exited(3));
    assert_eq!(bed.exit_status("c1").await, 3);
    let resp = bed.shim.delete("c1", "").await.unwrap();
    assert_eq!(resp.exit_status, 3);
    assert_eq!(
        bed.events.lines(),
        ["create c1", "start c1", "exit c1 c1 3", "delete c1 3"]
    );
    assert_eq!(
        bed.audit_events("c1"),
        ["create", "start", "exit", "delete"]
    );
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "exited");
    assert_eq!(
        bed.fake.calls_of("mount"),
        [format!(
            "mount {}",
            bed.bundle("c1").join("rootfs").display()
        )]
    );
    bed.assert_clean();
}

#[tokio::test]
async fn an_exit_during_start_is_published_after_task_start() {
    let bed = Bed::new();
    bed.create("c1").await;
    bed.fake.exit_on_start(exited(0));
    bed.shim.start("c1", "").await.unwrap();
    assert_eq!(bed.exit_status("c1").await, 0);
    assert_eq!(
        bed.events.lines(),
        ["create c1", "start c1", "exit c1 c1 0"]
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn starting_twice_is_a_failed_precondition_and_runsc_is_not_asked_again() {
    let bed = Bed::new();
    bed.running("c1").await;
    let err = bed.shim.start("c1", "").await.unwrap_err();
    assert_eq!(
        code(err),
        (
            Code::FAILED_PRECONDITION,
            "container c1: cannot start a running process".into()
        )
    );
    assert_eq!(bed.fake.calls_of("start"), ["start c1"]);
    bed.shim.kill("c1", "", SIGKILL, true).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn deleting_a_created_container_kills_its_sandbox_and_reports_it_killed() {
    let bed = Bed::new();
    bed.create("c1").await;
    let resp = bed.shim.delete("c1", "").await.unwrap();
    assert_eq!(resp.exit_status, 137);
    assert_eq!(
        bed.events.lines(),
        ["create c1", "exit c1 c1 137", "delete c1 137"]
    );
    assert_eq!(bed.audit_events("c1"), ["create", "exit", "delete"]);
    bed.assert_clean();
}

#[tokio::test]
async fn deleting_a_running_container_is_refused_and_changes_nothing() {
    let bed = Bed::new();
    bed.running("c1").await;
    let err = bed.shim.delete("c1", "").await.unwrap_err();
    assert_eq!(err.code(), Code::FAILED_PRECONDITION);
    assert!(bed.fake.calls_of("delete").is_empty());
    assert_eq!(
        bed.shim.state("c1", "").await.unwrap().status,
        containerd_shim_protos::types::task::Status::RUNNING.into()
    );
    bed.shim.kill("c1", "", SIGKILL, false).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn a_kill_after_the_exit_is_not_found_as_containerd_expects() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let err = bed.shim.kill("c1", "", SIGKILL, false).await.unwrap_err();
    assert_eq!(
        code(err),
        (
            Code::NOT_FOUND,
            "container c1: process already finished".into()
        )
    );
    assert!(bed.fake.calls_of("kill").is_empty());
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn concurrent_kill_and_delete_publish_one_exit_and_it_comes_before_the_delete() {
    let bed = Bed::new();
    bed.running("c1").await;
    let (kill, deleted) = tokio::join!(bed.shim.kill("c1", "", SIGKILL, true), async {
        loop {
            match bed.shim.delete("c1", "").await {
                Ok(resp) => break resp,
                Err(e) => assert_eq!(e.code(), Code::FAILED_PRECONDITION, "{e}"),
            }
            tokio::task::yield_now().await;
        }
    });
    kill.unwrap();
    assert_eq!(deleted.exit_status, 137);
    assert_eq!(
        bed.events.lines(),
        ["create c1", "start c1", "exit c1 c1 137", "delete c1 137"]
    );
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_limit_sends_sigterm_then_sigkill_after_the_grace_period() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    bed.fake.ignore_sigterm();
    let started = tokio::time::Instant::now();
    bed.running("c1").await;
    assert_eq!(bed.exit_status("c1").await, 137);
    // Time moves only as the shim's own timers ask: the exit comes at the limit plus the grace.
    assert_eq!(started.elapsed(), Duration::from_secs(65));
    assert_eq!(
        bed.fake.calls_of("kill"),
        [
            format!("kill c1 {SIGTERM} all"),
            format!("kill c1 {SIGKILL} all")
        ]
    );
    let exit = bed.audit_record("c1", "exit");
    assert_eq!(
        (exit["exit_cause"].as_str(), exit["timed_out"].as_bool()),
        (Some("timeout"), Some(true))
    );
    assert_eq!(
        bed.audit_events("c1"),
        ["create", "start", "timeout", "exit"]
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn a_workload_that_stops_at_sigterm_gets_no_sigkill() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    bed.running("c1").await;
    assert_eq!(bed.exit_status("c1").await, 128 + libc::SIGTERM as u32);
    assert_eq!(
        bed.fake.calls_of("kill"),
        [format!("kill c1 {SIGTERM} all")]
    );
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "timeout");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn an_exit_before_the_limit_disarms_it() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    bed.running("c1").await;
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(bed.fake.calls_of("kill").is_empty());
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "exited");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_oom_is_reported_once_when_the_notification_and_the_exit_both_say_so() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.notify_oom("c1").await;
    bed.events.published("oom c1").await;
    bed.fake.set_cause("c1", ExitCause::Oom);
    bed.fake.exit("c1", ExitStatus::killed());
    assert_eq!(bed.exit_status("c1").await, 137);
    assert_eq!(bed.events.matching("oom"), ["oom c1"]);
    assert_eq!(bed.audit_events("c1"), ["create", "start", "oom", "exit"]);
    let exit = bed.audit_record("c1", "exit");
    assert_eq!(
        (exit["exit_cause"].as_str(), exit["oom"].as_bool()),
        (Some("oom"), Some(true))
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_oom_seen_only_at_the_exit_is_published_before_task_exit() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.set_cause("c1", ExitCause::Oom);
    bed.fake.exit("c1", ExitStatus::killed());
    bed.exit_status("c1").await;
    assert_eq!(
        bed.events.lines(),
        ["create c1", "start c1", "oom c1", "exit c1 c1 137"]
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn crossing_the_process_limit_is_reported_once_as_such() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.set_cause("c1", ExitCause::ProcessLimit);
    bed.fake.exit("c1", exited(2));
    assert_eq!(bed.exit_status("c1").await, 2);
    let exits: Vec<_> = bed
        .audit(&"c1".to_string())
        .into_iter()
        .filter(|r| r["event"] == "exit")
        .collect();
    assert_eq!(exits.len(), 1);
    assert_eq!(exits[0]["exit_cause"], "process-limit");
    assert_eq!(exits[0]["process_limit_exceeded"], true);
    assert_eq!(exits[0]["error"], "process limit exceeded");
    assert!(bed.events.matching("oom").is_empty());
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn a_failed_create_is_undone_completely_whichever_step_fails() {
    for step in [
        Step::Configure,
        Step::CheckCgroups,
        Step::Mount,
        Step::Create,
        Step::Watch,
    ] {
        let bed = Bed::new();
        bed.fake.fail_next(step);
        let err = bed.shim.create(bed.request("c1", &[])).await.unwrap_err();
        assert!(!err.to_string().is_empty());
        bed.assert_clean();
        let events = bed.audit_events("c1");
        assert_eq!(
            events.last().map(String::as_str),
            Some("create-failed"),
            "{step:?}: {events:?}"
        );
        assert!(bed.events.lines().is_empty(), "{step:?}");
        // The id is free again, and the same container can be created.
        bed.shim.create(bed.request("c1", &[])).await.unwrap();
        bed.shim.delete("c1", "").await.unwrap();
        bed.assert_clean();
    }
}

#[tokio::test]
async fn a_failure_to_configure_runsc_names_the_binary_and_is_a_failed_precondition() {
    let bed = Bed::new();
    bed.fake.fail_next(Step::Configure);
    let (code, msg) = code(bed.shim.create(bed.request("c1", &[])).await.unwrap_err());
    assert_eq!(code, Code::FAILED_PRECONDITION);
    assert_eq!(
        msg,
        "runsc: cannot tell what it supports: runsc flags failed (exit code 128): injected failure"
    );
}

#[tokio::test]
async fn a_runsc_create_failure_keeps_runscs_words_without_repeating_itself() {
    let bed = Bed::new();
    bed.fake.fail_next(Step::Create);
    let (code, msg) = code(bed.shim.create(bed.request("c1", &[])).await.unwrap_err());
    assert_eq!(
        (code, msg.as_str()),
        (
            Code::UNKNOWN,
            "runsc create c1 failed (exit code 128): injected failure"
        )
    );
}

#[tokio::test]
async fn a_cgroup_that_exists_already_is_refused_and_not_removed() {
    let bed = Bed::new();
    bed.fake.add_foreign_cgroup("c1");
    let err = bed.shim.create(bed.request("c1", &[])).await.unwrap_err();
    assert_eq!(err.code(), Code::FAILED_PRECONDITION);
    assert!(bed.fake.calls_of("create").is_empty());
    assert!(bed.fake.calls_of("remove-cgroups").is_empty());
}

#[tokio::test]
async fn a_spec_the_policy_rejects_is_a_failed_precondition_naming_the_rule() {
    let bed = Bed::new();
    let req = bed.request("c1", &[]);
    let mut spec: Value =
        serde_json::from_slice(&std::fs::read(bed.bundle("c1").join("config.json")).unwrap())
            .unwrap();
    spec["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/x", "type": "bind", "source": "/var/run/docker.sock", "options": ["rbind"]}));
    std::fs::write(bed.bundle("c1").join("config.json"), spec.to_string()).unwrap();
    let (code, msg) = code(bed.shim.create(req).await.unwrap_err());
    assert_eq!(code, Code::FAILED_PRECONDITION);
    assert!(msg.starts_with("rejected by policy: mounts: "), "{msg}");
    assert!(msg.contains("docker.sock"), "{msg}");
    assert_eq!(bed.audit_events("c1"), ["create-rejected"]);
    assert!(bed.fake.calls().is_empty(), "{:?}", bed.fake.calls());
}

#[tokio::test]
async fn a_second_create_of_the_same_id_is_already_exists() {
    let bed = Bed::new();
    bed.create("c1").await;
    let err = bed.shim.create(bed.request("c1", &[])).await.unwrap_err();
    assert_eq!(
        code(err),
        (Code::ALREADY_EXISTS, "container c1 already exists".into())
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn calls_on_an_unknown_container_are_not_found() {
    let bed = Bed::new();
    for err in [
        bed.shim.start("nope", "").await.unwrap_err(),
        bed.shim.kill("nope", "", SIGKILL, false).await.unwrap_err(),
        bed.shim.delete("nope", "").await.unwrap_err(),
        bed.shim.state("nope", "").await.unwrap_err(),
    ] {
        assert_eq!(
            code(err),
            (Code::NOT_FOUND, "container nope not found".into())
        );
    }
}

fn exec_request(id: &str, exec_id: &str, user: u32) -> ExecProcessRequest {
    let process = json!({
        "args": ["sh", "-c", "true"],
        "cwd": "/",
        "env": ["PATH=/bin"],
        "user": {"uid": user, "gid": user},
        "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"], "permitted": ["CAP_SYS_ADMIN"]}
    });
    let mut any = Any::new();
    any.type_url = "types.containerd.io/opencontainers/runtime-spec/1/Process".into();
    any.value = serde_json::to_vec(&process).unwrap();
    let mut req = ExecProcessRequest::new();
    req.id = id.into();
    req.exec_id = exec_id.into();
    req.spec = Some(any).into();
    req
}

#[tokio::test]
async fn an_exec_is_hardened_audited_and_its_exit_published_before_its_delete_answers() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.shim.exec(exec_request("c1", "e1", 0)).await.unwrap();
    bed.shim.start("c1", "e1").await.unwrap();
    bed.fake.exit_exec("c1", "e1", exited(5));
    assert_eq!(bed.shim.wait("c1", "e1").await.unwrap().exit_status, 5);
    let deleted = bed.shim.delete("c1", "e1").await.unwrap();
    assert_eq!(deleted.exit_status, 5);
    assert_eq!(
        bed.events.lines()[2..],
        ["exec-added c1 e1", "exec-started c1 e1", "exit c1 e1 5"]
    );
    assert_eq!(
        bed.audit_events("c1"),
        ["create", "start", "exec", "exec-start", "exec-exit"]
    );
    let start = bed.audit_record("c1", "exec-start");
    assert_eq!(start["exec_id"], "e1");
    assert!(
        start["decisions"].as_array().is_some_and(|d| !d.is_empty()),
        "the hardening of the exec is in its start record: {start}"
    );
    assert_eq!(bed.audit_record("c1", "exec-exit")["exit_status"], 5);
    // The exec is gone: a second delete does not find it.
    assert_eq!(
        bed.shim.delete("c1", "e1").await.unwrap_err().code(),
        Code::NOT_FOUND
    );
    bed.shim.kill("c1", "", SIGKILL, true).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn a_running_exec_is_killed_by_its_pid_inside_the_sandbox_and_not_deleted_while_it_runs() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.shim.exec(exec_request("c1", "e1", 1000)).await.unwrap();
    // Not started yet: a signal has nothing to reach.
    assert_eq!(
        bed.shim
            .kill("c1", "e1", SIGTERM, false)
            .await
            .unwrap_err()
            .code(),
        Code::FAILED_PRECONDITION
    );
    bed.shim.start("c1", "e1").await.unwrap();
    assert_eq!(
        bed.shim.delete("c1", "e1").await.unwrap_err().code(),
        Code::FAILED_PRECONDITION
    );
    bed.shim.kill("c1", "e1", SIGTERM, false).await.unwrap();
    assert_eq!(bed.shim.wait("c1", "e1").await.unwrap().exit_status, 143);
    assert_eq!(
        bed.fake.calls_of("kill"),
        [format!("kill c1 {SIGTERM} pid 100")]
    );
    bed.shim.delete("c1", "e1").await.unwrap();
    bed.shim.kill("c1", "", SIGKILL, true).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_exec_that_fails_to_start_releases_its_wait_with_255() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.shim.exec(exec_request("c1", "e1", 0)).await.unwrap();
    bed.fake.fail_next(Step::Exec);
    let err = bed.shim.start("c1", "e1").await.unwrap_err();
    assert_eq!(err.code(), Code::UNKNOWN);
    assert_eq!(bed.shim.wait("c1", "e1").await.unwrap().exit_status, 255);
    bed.shim.delete("c1", "e1").await.unwrap();
    bed.shim.kill("c1", "", SIGKILL, true).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_exec_in_a_stopped_container_is_refused() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    let err = bed
        .shim
        .exec(exec_request("c1", "e1", 0))
        .await
        .unwrap_err();
    assert_eq!(
        code(err),
        (
            Code::FAILED_PRECONDITION,
            "container c1: cannot exec in a stopped process".into()
        )
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

const CRI_TYPE: &str = "io.kubernetes.cri.container-type";
const CRI_SANDBOX: &str = "io.kubernetes.cri.sandbox-id";

#[tokio::test]
async fn pod_containers_join_the_sandbox_and_leave_it_while_the_sandbox_stays() {
    let bed = Bed::new();
    bed.shim
        .create(bed.request("pod", &[(CRI_TYPE, "sandbox"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("pod", "").await.unwrap();
    let sandbox_pid = bed.shim.state("pod", "").await.unwrap().pid;
    let app = bed.request("app", &[(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")]);
    let created = bed.shim.create(app).await.unwrap();
    // runsc reports the pod sandbox's pid for the container that joined it.
    assert_eq!(created.pid, sandbox_pid);
    bed.shim.start("app", "").await.unwrap();
    bed.fake.exit("app", exited(4));
    assert_eq!(bed.exit_status("app").await, 4);
    bed.shim.delete("app", "").await.unwrap();
    // The sandbox still runs, and takes another container.
    assert_eq!(
        bed.shim.state("pod", "").await.unwrap().status,
        containerd_shim_protos::types::task::Status::RUNNING.into()
    );
    bed.shim
        .create(bed.request("app2", &[(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.delete("app2", "").await.unwrap();
    bed.shim.kill("pod", "", SIGKILL, true).await.unwrap();
    bed.exit_status("pod").await;
    bed.shim.delete("pod", "").await.unwrap();
    assert_eq!(
        bed.events.matching("exit"),
        ["exit app app 4", "exit app2 app2 137", "exit pod pod 137"]
    );
    bed.assert_clean();
}

#[tokio::test]
async fn a_pod_container_is_reported_killed_when_its_sandbox_dies() {
    let bed = Bed::new();
    bed.shim
        .create(bed.request("pod", &[(CRI_TYPE, "sandbox"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("pod", "").await.unwrap();
    bed.shim
        .create(bed.request("app", &[(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("app", "").await.unwrap();
    bed.fake.exit("pod", ExitStatus::killed());
    assert_eq!(bed.exit_status("app").await, 137);
    assert_eq!(bed.exit_status("pod").await, 137);
    bed.shim.delete("app", "").await.unwrap();
    bed.shim.delete("pod", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn a_container_of_a_pod_this_shim_does_not_serve_is_refused() {
    let bed = Bed::new();
    let err = bed
        .shim
        .create(bed.request(
            "app",
            &[(CRI_TYPE, "container"), (CRI_SANDBOX, "elsewhere")],
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::INVALID_ARGUMENT);
    assert!(err.to_string().contains("elsewhere"), "{err}");
    bed.assert_clean();
}

#[tokio::test]
async fn shutdown_exits_only_when_nothing_is_left() {
    let bed = Bed::new();
    bed.create("c1").await;
    bed.create("c2").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.shim.shutdown(false).await;
    assert!(!bed.shim.exit.is_cancelled());
    bed.shim.delete("c2", "").await.unwrap();
    bed.shim.shutdown(false).await;
    assert!(bed.shim.exit.is_cancelled());
    bed.assert_clean();
}

#[tokio::test]
async fn shutdown_now_exits_whatever_is_left() {
    let bed = Bed::new();
    bed.create("c1").await;
    bed.shim.shutdown(true).await;
    assert!(bed.shim.exit.is_cancelled());
    bed.shim.delete("c1", "").await.unwrap();
}

#[tokio::test]
async fn sigterm_to_the_shim_tears_down_every_sandbox_members_first() {
    let bed = Bed::new();
    bed.shim
        .create(bed.request("pod", &[(CRI_TYPE, "sandbox"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("pod", "").await.unwrap();
    bed.shim
        .create(bed.request("app", &[(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("app", "").await.unwrap();
    bed.shim.terminate_all().await;
    assert_eq!(
        bed.fake.calls_of("kill"),
        [
            format!("kill app {SIGKILL} all"),
            format!("kill pod {SIGKILL} all")
        ]
    );
    assert_eq!(
        bed.audit_record("pod", "delete")["error"],
        "shim terminated"
    );
    bed.assert_clean();
}

#[tokio::test]
async fn pause_and_resume_follow_the_state_and_publish_their_events() {
    let bed = Bed::new();
    bed.create("c1").await;
    assert_eq!(
        bed.shim.pause("c1").await.unwrap_err().code(),
        Code::FAILED_PRECONDITION
    );
    bed.shim.start("c1", "").await.unwrap();
    bed.shim.pause("c1").await.unwrap();
    assert_eq!(
        bed.shim.pause("c1").await.unwrap_err().code(),
        Code::FAILED_PRECONDITION
    );
    bed.shim.resume("c1").await.unwrap();
    assert_eq!(bed.fake.calls_of("pause"), ["pause c1"]);
    assert_eq!(bed.events.lines()[2..], ["paused", "resumed"]);
    // A failed `runsc pause` leaves the container running.
    bed.fake.fail_next(Step::Pause);
    assert_eq!(
        bed.shim.pause("c1").await.unwrap_err().code(),
        Code::UNKNOWN
    );
    bed.shim.pause("c1").await.unwrap();
    bed.shim.kill("c1", "", SIGKILL, true).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_update_is_clamped_by_the_policy_and_written_to_the_sandbox_cgroups() {
    let bed = Bed::new();
    bed.running("c1").await;
    let mut req = containerd_shim_protos::api::UpdateTaskRequest::new();
    req.id = "c1".into();
    let mut any = Any::new();
    any.value = serde_json::to_vec(&json!({"memory": {"limit": 1u64 << 40}})).unwrap();
    req.resources = Some(any).into();
    bed.shim.update(req).await.unwrap();
    let updates = bed.fake.updates();
    assert_eq!(updates.len(), 1);
    assert!(
        !updates[0].contains(&(1u64 << 40).to_string()),
        "{updates:?}"
    );
    assert_eq!(bed.audit_events("c1").last().unwrap(), "update");
    bed.shim.kill("c1", "", SIGKILL, true).await.unwrap();
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}
