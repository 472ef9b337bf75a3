//! Pause, resume and update.

use super::*;
use gvisor_hardened_core::fake::Step;

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
    bed.kill_delete_and_check("c1").await;
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
    bed.kill_delete_and_check("c1").await;
}

/// gVisor sized the guest's memory at boot: an update that changes the limit is refused with the
/// rule's name, and neither the cgroups nor runsc see it.
#[tokio::test]
async fn an_update_that_changes_the_memory_limit_is_refused_naming_the_rule() {
    let bed = Bed::new();
    bed.running("c1").await;
    let mut req = containerd_shim_protos::api::UpdateTaskRequest::new();
    req.id = "c1".into();
    let mut any = Any::new();
    any.value = serde_json::to_vec(&json!({"memory": {"limit": 300u64 << 20}})).unwrap();
    req.resources = Some(any).into();
    let e = bed.shim.update(req).await.unwrap_err();
    assert_eq!(e.code(), Code::FAILED_PRECONDITION, "{e:?}");
    assert!(
        e.to_string()
            .contains("rejected by policy: resources: resources.memory.limit"),
        "{e:?}"
    );
    assert!(bed.fake.updates().is_empty());
    assert_eq!(bed.audit_events("c1").last().unwrap(), "update-rejected");
    bed.kill_delete_and_check("c1").await;
}

/// `crictl update --memory` and `nerdctl update` send no pids: the pids limit the update writes
/// must be the one the create gave, sized for the sandbox's platform (before, an update was
/// sized as on ptrace, about four times the systrap limit).
#[tokio::test]
async fn an_update_never_loosens_the_pids_limit_the_create_gave() {
    let bed = Bed::with_policy("[runsc]\nplatform = \"systrap\"\n");
    bed.running("c1").await;
    let spec: Value =
        serde_json::from_slice(&std::fs::read(bed.bundle("c1").join("config.json")).unwrap())
            .unwrap();
    let created = spec["linux"]["resources"]["pids"]["limit"]
        .as_i64()
        .unwrap();
    let mut req = containerd_shim_protos::api::UpdateTaskRequest::new();
    req.id = "c1".into();
    let mut any = Any::new();
    // The memory it was created with (a change is refused), as nerdctl and the kubelet send it.
    let memory = spec["linux"]["resources"]["memory"]["limit"].clone();
    any.value = serde_json::to_vec(&json!({"memory": {"limit": memory}})).unwrap();
    req.resources = Some(any).into();
    bed.shim.update(req).await.unwrap();
    let updates = bed.fake.updates();
    assert!(
        updates[0].contains(&format!("pids_limit: Some({created})")),
        "created with {created}: {updates:?}"
    );
    bed.kill_delete_and_check("c1").await;
}

#[tokio::test]
async fn pids_are_host_pids_and_name_the_exec_each_runsc_exec_belongs_to() {
    // nerdctl top hands these to ps(1) on the host: guest pids (1 for the init) would list the
    // host's own init as the container's process.
    let bed = Bed::new();
    bed.running("c1").await;
    let sandbox = bed.shim.state("c1", "").await.unwrap().pid;
    bed.shim
        .exec(super::exec::exec_request("c1", "e1", 0))
        .await
        .unwrap();
    let exec = bed.shim.start("c1", "e1").await.unwrap().pid;
    let pids = bed.shim.pids("c1").await.unwrap().processes;
    let listed: Vec<u32> = pids.iter().map(|p| p.pid).collect();
    assert_eq!(listed, [sandbox, exec]);
    assert!(sandbox > 1 && exec > 1 && sandbox != exec, "{listed:?}");
    assert!(
        pids[0].info.is_none(),
        "the sandbox process carries no details"
    );
    let any = pids[1].info.as_ref().expect("the exec's details");
    assert_eq!(any.type_url, "containerd.runc.v1.ProcessDetails");
    use containerd_shim_protos::protobuf::Message;
    let details =
        containerd_shim_protos::shim::oci::ProcessDetails::parse_from_bytes(&any.value).unwrap();
    assert_eq!(details.exec_id, "e1");
    bed.kill_delete_and_check("c1").await;
}
