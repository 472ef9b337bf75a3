//! Execs: hardened, audited, supervised through the same exit path as the init.

use super::*;
use gvisor_hardened_core::fake::Step;

pub(super) fn exec_request(id: &str, exec_id: &str, user: u32) -> ExecProcessRequest {
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
    bed.kill_delete_and_check("c1").await;
}

#[tokio::test]
async fn an_exec_the_policy_refuses_names_the_rule_is_recorded_and_never_reaches_runsc() {
    let bed = Bed::new();
    bed.running("c1").await;
    let mut req = exec_request("c1", "e1", 0);
    let mut process: Value = serde_json::from_slice(&req.spec.value).unwrap();
    process["rlimits"] = json!([
        {"type": "RLIMIT_NOFILE", "hard": 10, "soft": 10},
        {"type": "RLIMIT_NOFILE", "hard": 99, "soft": 99}
    ]);
    req.spec.as_mut().unwrap().value = serde_json::to_vec(&process).unwrap();
    let err = bed.shim.exec(req).await.unwrap_err();
    assert_eq!(err.code(), Code::FAILED_PRECONDITION);
    assert!(
        err.to_string().contains("RLIMIT_NOFILE is set twice"),
        "{err}"
    );
    assert_eq!(bed.audit_events("c1"), ["create", "start", "exec-rejected"]);
    let rec = bed.audit_record("c1", "exec-rejected");
    assert_eq!(
        (&rec["exec_id"], &rec["error"]),
        (&json!("e1"), &json!(err.to_string()))
    );
    // Nothing was added: no event, no exec to start, no runsc exec.
    assert_eq!(bed.events.lines().len(), 2, "{:?}", bed.events.lines());
    assert_eq!(
        bed.shim.start("c1", "e1").await.unwrap_err().code(),
        Code::NOT_FOUND
    );
    assert!(bed.fake.calls_of("exec").is_empty());
    // A control: the same exec without the duplicate is admitted.
    bed.shim.exec(exec_request("c1", "e1", 0)).await.unwrap();
    assert_eq!(
        bed.audit_events("c1"),
        ["create", "start", "exec-rejected", "exec"]
    );
    bed.kill_delete_and_check("c1").await;
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
    bed.kill_delete_and_check("c1").await;
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
    bed.kill_delete_and_check("c1").await;
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

#[tokio::test]
async fn an_exec_with_a_terminal_gets_it_over_the_console_socket_and_can_resize_it() {
    let bed = Bed::new();
    bed.running("c1").await;
    let mut req = exec_request("c1", "e1", 0);
    req.terminal = true;
    bed.shim.exec(req).await.unwrap();
    // Without a terminal there is nothing to resize.
    assert!(bed.shim.resize_pty("c1", "", 80, 24).await.is_err());
    // Before Start the terminal does not exist yet: the size waits for it (nerdctl exec -t).
    bed.shim.resize_pty("c1", "e1", 100, 30).await.unwrap();
    bed.shim.start("c1", "e1").await.unwrap();
    bed.shim.resize_pty("c1", "e1", 132, 43).await.unwrap();
    bed.fake.exit_exec("c1", "e1", exited(0));
    assert_eq!(bed.shim.wait("c1", "e1").await.unwrap().exit_status, 0);
    bed.shim.delete("c1", "e1").await.unwrap();
    bed.kill_delete_and_check("c1").await;
}
