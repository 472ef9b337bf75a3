//! Create, start, kill, exit and delete of a sandbox's first container.

use super::*;

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
    bed.kill_delete_and_check("c1").await;
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

#[tokio::test]
async fn a_container_with_a_terminal_gets_it_at_create() {
    let bed = Bed::new();
    let mut req = bed.request("c1", &[]);
    req.terminal = true;
    bed.shim.create(req).await.unwrap();
    bed.shim.start("c1", "").await.unwrap();
    bed.shim.resize_pty("c1", "", 100, 30).await.unwrap();
    bed.kill_delete_and_check("c1").await;
}

#[tokio::test]
async fn with_a_signing_key_every_sandbox_ends_with_a_record_signed_over_its_whole_trail() {
    use policy_injector::audit_chain::{sign, verify};
    use std::os::unix::fs::PermissionsExt;
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = sign::key_pair_pem([7; 32]);
    let key = keys.path().join("audit.key");
    std::fs::write(&key, private).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let bed = Bed::with_policy(&format!("[audit]\nsigning_key = \"{}\"", key.display()));
    bed.running("c1").await;
    bed.shim
        .exec(super::exec::exec_request("c1", "e1", 0))
        .await
        .unwrap();
    bed.shim.start("c1", "e1").await.unwrap();
    bed.fake.exit_exec("c1", "e1", exited(0));
    bed.shim.wait("c1", "e1").await.unwrap();
    bed.shim.delete("c1", "e1").await.unwrap();
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    // A created container deleted before it started is sealed too.
    bed.create("c2").await;
    bed.shim.delete("c2", "").await.unwrap();
    let delete = bed.audit_record("c1", "delete");
    assert_eq!(delete["sig"]["alg"], "ed25519", "{delete}");
    assert_eq!(delete["sig"]["records"], 7, "{delete}");
    let log = std::fs::read(bed.audit_path()).unwrap();
    let public = sign::verifying_key_from_pem(&public).unwrap();
    let summary = verify::verify_all(&[("audit.jsonl", &log)], Some(public), false)
        .unwrap_or_else(|b| panic!("{b}"));
    // The genesis line, c1's seven (create, start, exec, exec-start, exec-exit, exit, delete),
    // c2's three.
    assert_eq!(summary.records, 11);
    assert_eq!(bed.audit_record("c2", "delete")["sig"]["records"], 3);
    bed.assert_clean();
}

/// The audit log's lock is shared with every shim on the node. While another writer holds it,
/// a lifecycle record waits for it off the shim's one async thread: the pod's other requests
/// are answered meanwhile, and the record is written once the lock is let go.
#[tokio::test]
async fn a_start_waiting_on_the_audit_lock_leaves_the_shim_answering() {
    let bed = Bed::new();
    bed.create("c1").await;
    let (locked_tx, locked_rx) = std::sync::mpsc::channel();
    let (answered_tx, answered_rx) = std::sync::mpsc::channel::<()>();
    let path = bed.audit_path();
    // Another writer holds the lock until the shim has answered, or, if the shim is stuck
    // behind it, until a bound only a stalled shim reaches.
    let holder = std::thread::spawn(move || {
        let lock = gvisor_hardened_core::audit::open_locked(&path).unwrap();
        locked_tx.send(()).unwrap();
        let answered = answered_rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .is_ok();
        drop(lock);
        answered
    });
    locked_rx.recv().unwrap();
    let start = bed.shim.start("c1", "");
    tokio::pin!(start);
    tokio::select! {
        biased;
        r = &mut start => panic!("start finished while another writer held the audit lock: {r:?}"),
        state = bed.shim.state("c1", "") => {
            let state = state.unwrap();
            assert_eq!(
                state.status,
                containerd_shim_protos::types::task::Status::RUNNING.into()
            );
            answered_tx.send(()).unwrap();
        }
    }
    assert!(
        holder.join().unwrap(),
        "the shim answered nothing while the audit lock was held"
    );
    start.await.unwrap();
    assert_eq!(bed.audit_events("c1"), ["create", "start"]);
    bed.fake.exit("c1", exited(0));
    assert_eq!(bed.exit_status("c1").await, 0);
    bed.shim.delete("c1", "").await.unwrap();
    assert_eq!(
        bed.audit_events("c1"),
        ["create", "start", "exit", "delete"]
    );
    bed.assert_clean();
}
