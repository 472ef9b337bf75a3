//! Task calls that ctr 1.6 cannot make (it has no `task update`, and never sends CloseIO for
//! `run`), made over ttrpc to the real shim the way containerd's clients do: Update is clamped
//! by the policy again, and CloseIO gives the task end-of-input.

use std::io::Write;
use std::time::Duration;

use containerd_shim_protos::api::{
    CloseIORequest, DeleteRequest, KillRequest, StartRequest, UpdateTaskRequest, WaitRequest,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::MessageField;
use gvisor_hardened_tests::direct::{ctx, DirectBundle, DirectShim, StartProtocol};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::*;

const TIMEOUT: Duration = Duration::from_secs(60);

fn memory_limit(bundle: &DirectBundle) -> u64 {
    let path = bundle.config().unwrap()["linux"]["cgroupsPath"]
        .as_str()
        .unwrap()
        .to_string();
    let file = format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes");
    std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

fn update(shim: &DirectShim, id: &str, resources: serde_json::Value) -> Result<(), String> {
    let mut any = Any::new();
    any.type_url = "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources".into();
    any.value = serde_json::to_vec(&resources).unwrap();
    let mut req = UpdateTaskRequest::new();
    req.id = id.to_string();
    req.resources = MessageField::some(any);
    shim.task()
        .update(ctx(), &req)
        .map(drop)
        .map_err(|e| e.to_string())
}

fn finish(shim: DirectShim, id: &str) {
    let task = shim.task();
    let mut kill = KillRequest::new();
    kill.id = id.to_string();
    kill.signal = libc::SIGKILL as u32;
    kill.all = true;
    let _ = task.kill(ctx(), &kill);
    let mut wait = WaitRequest::new();
    wait.id = id.to_string();
    task.wait(ctx(), &wait).expect("Wait");
    let mut delete = DeleteRequest::new();
    delete.id = id.to_string();
    task.delete(ctx(), &delete).expect("Delete");
    shim.shutdown().unwrap();
}

#[test]
fn update_is_clamped_by_the_policy_again_and_never_changes_the_memory_limit() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let policy = TestPolicy::builder(&c, "update").write().unwrap();
    let id = unique_id("update");
    let bundle = DirectBundle::new(&c, &id, &["sleep", "3600"]).unwrap();
    let shim = DirectShim::start(&c, &bundle, StartProtocol::Legacy).unwrap();
    let task = shim.task();
    task.create(ctx(), &bundle.create_request(&policy.path))
        .expect("Create");
    let mut start = StartRequest::new();
    start.id = id.clone();
    task.start(ctx(), &start).expect("Start");
    assert_eq!(
        memory_limit(&bundle),
        2 << 30,
        "the policy's ceiling at create"
    );

    // A change of the memory limit is refused naming the rule (gVisor sized the guest's memory
    // at boot: it would not see it) and changes nothing.
    let err = update(
        &shim,
        &id,
        serde_json::json!({"memory": {"limit": 512u64 << 20}}),
    )
    .unwrap_err();
    assert!(
        err.contains("rejected by policy: resources: resources.memory.limit")
            && err.contains("cannot change"),
        "{err}"
    );
    assert_eq!(memory_limit(&bundle), 2 << 30);
    // Higher than the ceiling is clamped back to the ceiling, never above: no change.
    update(
        &shim,
        &id,
        serde_json::json!({"memory": {"limit": 64u64 << 30}}),
    )
    .unwrap();
    assert_eq!(memory_limit(&bundle), 2 << 30);
    // Garbage is refused and changes nothing.
    let err = update(&shim, &id, serde_json::json!({"memory": {"limit": "lots"}})).unwrap_err();
    assert!(err.contains("memory"), "{err}");
    assert_eq!(memory_limit(&bundle), 2 << 30);

    let audit = std::fs::read_to_string(&policy.audit_path).unwrap();
    let count = |event: &str| {
        audit
            .lines()
            .filter(|l| l.contains(&format!("\"event\":\"{event}\"")))
            .count()
    };
    assert_eq!(count("update"), 1, "{audit}");
    assert_eq!(count("update-rejected"), 2, "{audit}");
    finish(shim, &id);
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}

#[test]
fn close_io_gives_the_task_end_of_input() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let policy = TestPolicy::builder(&c, "closeio").write().unwrap();
    let id = unique_id("closeio");
    let mut bundle = DirectBundle::new(&c, &id, &["sh", "-c", "wc -l; echo stdin-closed"]).unwrap();
    let stdin = bundle.dir.with_extension("stdin");
    nix_mkfifo(&stdin);
    // The client's end, as containerd's cio holds it.
    let mut writer = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&stdin)
        .unwrap();
    let shim = DirectShim::start(&c, &bundle, StartProtocol::Legacy).unwrap();
    let task = shim.task();
    let mut create = bundle.create_request(&policy.path);
    create.stdin = stdin.to_string_lossy().into_owned();
    task.create(ctx(), &create).expect("Create");
    let mut start = StartRequest::new();
    start.id = id.clone();
    task.start(ctx(), &start).expect("Start");
    writer.write_all(b"a\nb\n").unwrap();
    drop(writer);
    // The client closed its end, but the task sees end-of-input only on CloseIO.
    let mut close = CloseIORequest::new();
    close.id = id.clone();
    close.stdin = true;
    task.close_io(ctx(), &close).expect("CloseIO");
    let mut wait = WaitRequest::new();
    wait.id = id.clone();
    let exit = task.wait(ctx(), &wait).expect("Wait");
    assert_eq!(exit.exit_status, 0);
    let out = poll_until("the task's output", TIMEOUT, || {
        let out = bundle.read_stdout();
        out.contains("stdin-closed").then_some(out)
    })
    .unwrap();
    assert!(out.trim_start().starts_with('2'), "{out}");
    let mut delete = DeleteRequest::new();
    delete.id = id.clone();
    task.delete(ctx(), &delete).expect("Delete");
    shim.shutdown().unwrap();
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}

fn nix_mkfifo(path: &std::path::Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "{}",
        std::io::Error::last_os_error()
    );
}
