//! The containerd 2.x path, at protocol level: only containerd 1.6 can be installed here, so
//! these tests do what containerd 2.x does. They run the real shim's `start` action (with 2.x's
//! bootstrap protocol, and with the legacy flags 2.x still accepts), then drive a whole task
//! lifecycle through the generated `containerd.task.v3.Task` client: Connect, Create, State,
//! Start, Pids, Stats, Kill, Wait, Delete, Shutdown. Events go to a real containerd's ttrpc
//! socket, as they would to containerd 2.x's.

use std::time::Duration;

use containerd_shim_protos::api::{
    ConnectRequest, ConnectResponse, DeleteRequest, KillRequest, PidsRequest, StartRequest,
    StateRequest, StatsRequest, WaitRequest,
};
use containerd_shim_protos::types::task::Status;
use gvisor_hardened_tests::direct::{ctx, DirectBundle, DirectShim, StartProtocol};
use gvisor_hardened_tests::fault::{event_payload, TestPolicy};
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::*;

const TIMEOUT: Duration = Duration::from_secs(60);
const TASK_V2: &str = "containerd.task.v2.Task";

fn state(shim: &DirectShim, id: &str) -> containerd_shim_protos::api::StateResponse {
    let mut req = StateRequest::new();
    req.id = id.to_string();
    shim.task().state(ctx(), &req).expect("State (v3)")
}

fn lifecycle_through_task_v3(protocol: StartProtocol) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let policy = TestPolicy::builder(&c, "v3").write().unwrap();
    let id = unique_id("v3");
    let mut bundle =
        DirectBundle::new(&c, &id, &["sh", "-c", "echo v3-ok; exec sleep 3600"]).unwrap();
    let events = Events::watch(&c).unwrap();
    let shim = DirectShim::start(&c, &bundle, protocol).unwrap();
    match protocol {
        StartProtocol::Bootstrap => {
            assert_eq!(shim.reply.version, Some(3), "{:?}", shim.reply);
            assert_eq!(shim.reply.protocol.as_deref(), Some("ttrpc"));
        }
        StartProtocol::Legacy => assert_eq!(shim.reply.version, None),
    }
    assert!(
        shim.reply.address.starts_with("unix:///run/containerd/s/"),
        "{:?}",
        shim.reply
    );
    let task = shim.task();

    let mut connect = ConnectRequest::new();
    connect.id = id.clone();
    let conn = task.connect(ctx(), &connect).expect("Connect (v3)");
    assert_eq!(conn.shim_pid as i32, shim.pid);
    assert!(!conn.version.is_empty());
    assert_eq!(conn.task_pid, 0, "no task yet");

    let created = task
        .create(ctx(), &bundle.create_request(&policy.path))
        .expect("Create (v3)");
    assert!(created.pid > 0);
    let s = state(&shim, &id);
    assert_eq!(s.status.enum_value(), Ok(Status::CREATED));
    assert_eq!(s.pid, created.pid);
    assert_eq!(s.bundle, bundle.dir.display().to_string());

    let mut start = StartRequest::new();
    start.id = id.clone();
    let started = task.start(ctx(), &start).expect("Start (v3)");
    assert_eq!(started.pid, created.pid);
    poll_until("the task's output", TIMEOUT, || {
        bundle.read_stdout().contains("v3-ok").then_some(())
    })
    .unwrap();
    assert_eq!(state(&shim, &id).status.enum_value(), Ok(Status::RUNNING));
    assert_eq!(task.connect(ctx(), &connect).unwrap().task_pid, created.pid);

    let mut pids = PidsRequest::new();
    pids.id = id.clone();
    assert!(
        !task
            .pids(ctx(), &pids)
            .expect("Pids (v3)")
            .processes
            .is_empty(),
        "Pids lists no process"
    );
    let mut stats = StatsRequest::new();
    stats.id = id.clone();
    let metrics = task.stats(ctx(), &stats).expect("Stats (v3)");
    assert!(metrics.stats.is_some(), "Stats carries no metrics");

    // The same handlers answer under the containerd 1.x name on the same connection.
    let v2: ConnectResponse = shim
        .call(TASK_V2, "Connect", &connect)
        .expect("Connect (v2)");
    assert_eq!(v2.task_pid, created.pid);
    let unknown: Result<ConnectResponse, _> =
        shim.call("containerd.task.v4.Task", "Connect", &connect);
    assert!(unknown.is_err(), "an unknown service name was answered");

    let mut kill = KillRequest::new();
    kill.id = id.clone();
    kill.signal = libc::SIGTERM as u32;
    task.kill(ctx(), &kill).expect("Kill (v3)");
    let mut wait = WaitRequest::new();
    wait.id = id.clone();
    let exit = task.wait(ctx(), &wait).expect("Wait (v3)");
    assert_eq!(exit.exit_status, 143);
    let s = state(&shim, &id);
    assert_eq!(s.status.enum_value(), Ok(Status::STOPPED));
    assert_eq!(s.exit_status, 143);
    let mut delete = DeleteRequest::new();
    delete.id = id.clone();
    let deleted = task.delete(ctx(), &delete).expect("Delete (v3)");
    assert_eq!(deleted.exit_status, 143);
    assert_eq!(deleted.pid, created.pid);

    // The lifecycle events reached containerd through the address the start protocol gave.
    for topic in [
        "/tasks/create",
        "/tasks/start",
        "/tasks/exit",
        "/tasks/delete",
    ] {
        let line = events.wait_for(topic, &id, TIMEOUT).unwrap();
        if topic == "/tasks/exit" {
            assert_eq!(event_payload(&line).unwrap_or_default()["exit_status"], 143);
        }
    }
    let socket = shim.socket_path();
    shim.shutdown().unwrap();
    assert!(!socket.exists());
    for what in [
        inspect::processes_mentioning(&id).len(),
        inspect::mounts_mentioning(&id).len(),
        inspect::cgroups_named(&id).len(),
        inspect::runsc_state_files(&c.runtime_root(&Runtime::hardened()).unwrap(), Some(&id)).len(),
    ] {
        assert_eq!(what, 0, "leftovers of {id}");
    }
    assert_eq!(
        policy.audit_events(&id),
        ["create", "start", "exit", "delete"]
    );
    assert_clean_shutdown(c);
}

#[test]
fn bootstrap_started_shim_serves_a_whole_lifecycle_on_task_v3() {
    lifecycle_through_task_v3(StartProtocol::Bootstrap);
}

#[test]
fn legacy_started_shim_serves_a_whole_lifecycle_on_task_v3() {
    lifecycle_through_task_v3(StartProtocol::Legacy);
}
