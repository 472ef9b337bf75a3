//! Create's failures: each undone completely, each with the code and message containerd shows.

use super::*;
use gvisor_hardened_core::fake::Step;

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

#[tokio::test]
async fn a_signing_key_others_can_read_fails_the_create_before_anything_happens() {
    use std::os::unix::fs::PermissionsExt;
    let keys = tempfile::tempdir().unwrap();
    let (private, _) = policy_injector::audit_chain::sign::key_pair_pem([9; 32]);
    let key = keys.path().join("audit.key");
    std::fs::write(&key, private).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bed = Bed::with_policy(&format!("[audit]\nsigning_key = \"{}\"", key.display()));
    let (code, msg) = code(bed.shim.create(bed.request("c1", &[])).await.unwrap_err());
    assert_eq!(code, Code::FAILED_PRECONDITION, "{msg}");
    assert!(
        msg.starts_with(&format!("audit signing key {}", key.display())),
        "{msg}"
    );
    assert!(bed.fake.calls().is_empty(), "{:?}", bed.fake.calls());
    assert_eq!(bed.audit_events("c1"), ["create-failed"]);
}

#[tokio::test]
async fn the_hardenings_summary_reaches_containerds_record_and_the_hardened_spec() {
    // crictl and nerdctl inspect show containerd's copy of the spec, never the bundle's.
    let bed = Bed::new();
    let written = bed.records.written.notified();
    tokio::pin!(written);
    written.as_mut().enable();
    bed.create("c1").await;
    written.await;
    let notes = bed.records.notes.lock().unwrap().clone();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let (id, summary, original) = &notes[0];
    assert_eq!(id, "c1");
    assert!(
        summary.starts_with("gvisor-hardened changed ") && summary.contains("root: set"),
        "{summary}"
    );
    let hardened: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bed.bundle("c1").join("config.json")).unwrap())
            .unwrap();
    assert_eq!(
        hardened["annotations"]["gvisor-hardened.dev/decisions"],
        summary.as_str()
    );
    // The record keeps the client's spec; the runtime's own annotation is added to it there.
    assert!(original["annotations"]
        .get("gvisor-hardened.dev/decisions")
        .is_none());
    assert_ne!(original["root"]["readonly"], true, "{original}");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn a_failed_create_puts_containerds_config_back_and_leaves_no_file_of_ours() {
    let bed = Bed::new();
    let req = bed.request("c1", &[]);
    let bundle = std::path::PathBuf::from(&req.bundle);
    let engines = std::fs::read(bundle.join("config.json")).unwrap();
    bed.fake.fail_next(Step::Create);
    assert!(bed.shim.create(req).await.is_err());
    assert_eq!(std::fs::read(bundle.join("config.json")).unwrap(), engines);
    let mut names: Vec<String> = std::fs::read_dir(&bundle)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["config.json", "rootfs"]);
    assert_eq!(bed.audit_events("c1"), ["create", "create-failed"]);
    bed.assert_clean();
}

#[tokio::test]
async fn a_failed_create_leaves_containerds_record_alone() {
    let bed = Bed::new();
    bed.fake.fail_next(Step::Create);
    assert!(bed.shim.create(bed.request("c1", &[])).await.is_err());
    assert!(bed.records.notes.lock().unwrap().is_empty());
    bed.assert_clean();
}
