//! Bad input: malformed bundles and stdio paths, sent to the real shim binary over ttrpc the way
//! containerd sends CreateTask (ctr would refuse to write such bundles). Each must fail Create
//! with an error that says what is wrong, leave nothing behind, and leave the shim able to
//! create the same id correctly right after.

use std::fs;
use std::time::Duration;

use containerd_shim_protos::api::{
    CreateTaskRequest, DeleteRequest, KillRequest, StartRequest, WaitRequest,
};
use gvisor_hardened_tests::direct::{ctx, DirectBundle, DirectShim, StartProtocol};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::leaks::Leaks;
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::*;

const LEAK_TIMEOUT: Duration = Duration::from_secs(15);

/// What a failed Create may not leave: processes other than the shim itself, mounts, cgroups
/// and runsc state of the container; once the shim is gone, its socket too.
fn leaks(c: &Containerd, id: &str, shim: Option<&DirectShim>) -> Leaks {
    let root = c.runtime_root(&Runtime::hardened()).unwrap();
    let mut files = Vec::new();
    if let Some(s) = shim {
        if !inspect::is_alive(s.pid) && s.socket_path().exists() {
            files.push(s.socket_path());
        }
    }
    Leaks {
        processes: inspect::processes_mentioning(id)
            .into_iter()
            .filter(|p| shim.is_none_or(|s| p.pid != s.pid))
            .collect(),
        mounts: inspect::mounts_mentioning(id),
        cgroups: inspect::cgroups_named(id),
        runtime_state: inspect::runsc_state_files(&root, Some(id)),
        files,
    }
}

fn wait_no_leaks(c: &Containerd, id: &str, shim: Option<&DirectShim>) -> Leaks {
    let mut last = Leaks::default();
    let _ = poll_until("leftovers to go", LEAK_TIMEOUT, || {
        last = leaks(c, id, shim);
        last.is_empty().then_some(())
    });
    last
}

/// A full, valid lifecycle on `shim`: Create, Start, the task's output, Kill, Wait (137),
/// Delete. The task blocks until killed: a task that exits on its own can race Start (see
/// `faults_start.rs`), which is not what these tests are about.
fn run_valid(shim: &DirectShim, bundle: &mut DirectBundle, req: &CreateTaskRequest) {
    let task = shim.task();
    task.create(ctx(), req).expect("valid Create");
    let mut start = StartRequest::new();
    start.id = bundle.id.clone();
    if let Err(e) = task.start(ctx(), &start) {
        panic!(
            "Start: {e}\nstdout so far: {:?}\nshim log:\n{}",
            bundle.read_stdout(),
            bundle.shim_log()
        );
    }
    let mut out = String::new();
    poll_until("the valid task's output", LEAK_TIMEOUT, || {
        out.push_str(&bundle.read_stdout());
        out.contains("valid-run").then_some(())
    })
    .unwrap();
    let mut kill = KillRequest::new();
    kill.id = bundle.id.clone();
    kill.signal = libc::SIGKILL as u32;
    task.kill(ctx(), &kill).expect("Kill");
    let mut wait = WaitRequest::new();
    wait.id = bundle.id.clone();
    let exit = task.wait(ctx(), &wait).expect("Wait");
    assert_eq!(exit.exit_status, 137);
    let mut delete = DeleteRequest::new();
    delete.id = bundle.id.clone();
    task.delete(ctx(), &delete).expect("Delete");
}

/// How a case breaks the bundle or the request.
type Corrupt = fn(&DirectBundle, &mut CreateTaskRequest);

/// Starts a shim for a fresh bundle, breaks it with `corrupt`, and checks that Create fails
/// with an error containing every one of `expect`, leaving nothing; then repairs the bundle
/// and runs the same id to completion on the same shim, shuts it down and checks again.
fn malformed_create_fails_cleanly(name: &str, corrupt: Corrupt, expect: &[&str]) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let policy = TestPolicy::builder(&c, "bad-input").write().unwrap();
    let id = unique_id(name);
    let mut bundle =
        DirectBundle::new(&c, &id, &["sh", "-c", "echo valid-run; exec sleep 3600"]).unwrap();
    let good_config = fs::read(bundle.dir.join("config.json")).unwrap();
    let shim = DirectShim::start(&c, &bundle, StartProtocol::Legacy).unwrap();

    let mut req = bundle.create_request(&policy.path);
    corrupt(&bundle, &mut req);
    let err = shim
        .task()
        .create(ctx(), &req)
        .expect_err("a malformed Create succeeded");
    let msg = err.to_string();
    for e in expect {
        assert!(msg.contains(e), "{name}: error lacks {e:?}: {msg}");
    }
    let left_after_failure = wait_no_leaks(&c, &id, Some(&shim));
    assert!(
        left_after_failure.is_empty(),
        "{name}: failed Create ({msg}) left:\n{left_after_failure}shim log:\n{}",
        bundle.shim_log()
    );
    println!("{name}: {msg}");

    // The same shim, the same id, a repaired bundle: nothing stale is in the way.
    bundle.write_config(&good_config).unwrap();
    let _ = fs::create_dir_all(bundle.dir.join("rootfs"));
    let req = bundle.create_request(&policy.path);
    run_valid(&shim, &mut bundle, &req);
    shim.shutdown().unwrap();
    let left = wait_no_leaks(&c, &id, None);
    assert!(left.is_empty(), "{name}: after shutdown:\n{left}");
    assert_clean_shutdown(c);
}

fn config(b: &DirectBundle) -> serde_json::Value {
    b.config().unwrap()
}

#[test]
fn container_id_with_path_characters_is_refused() {
    malformed_create_fails_cleanly(
        "bad-id",
        |_, req| req.id = "../escape".into(),
        &["container id", "[A-Za-z0-9_.-]"],
    );
}

#[test]
fn truncated_config_json_is_refused_with_its_line() {
    malformed_create_fails_cleanly(
        "truncated",
        |b, _| {
            let full = fs::read(b.dir.join("config.json")).unwrap();
            b.write_config(&full[..full.len() / 2]).unwrap();
        },
        &["config.json is not valid JSON", "line"],
    );
}

#[test]
fn config_json_that_is_not_an_object_is_refused() {
    malformed_create_fails_cleanly(
        "array",
        |b, _| b.write_config("[\"ociVersion\"]").unwrap(),
        &["config.json is not a JSON object"],
    );
}

#[test]
fn wrongly_typed_process_args_are_refused_naming_the_field() {
    malformed_create_fails_cleanly(
        "args-type",
        |b, _| {
            let mut spec = config(b);
            spec["process"]["args"] = serde_json::json!("sh -c true");
            b.write_config(spec.to_string()).unwrap();
        },
        &["process.args"],
    );
}

#[test]
fn wrongly_typed_user_is_refused_naming_the_field() {
    malformed_create_fails_cleanly(
        "uid-type",
        |b, _| {
            let mut spec = config(b);
            spec["process"]["user"]["uid"] = serde_json::json!("root");
            b.write_config(spec.to_string()).unwrap();
        },
        &["uid"],
    );
}

#[test]
fn wrongly_typed_mounts_are_refused_naming_the_field() {
    malformed_create_fails_cleanly(
        "mounts-type",
        |b, _| {
            let mut spec = config(b);
            spec["mounts"] = serde_json::json!({"destination": "/x"});
            b.write_config(spec.to_string()).unwrap();
        },
        &["mounts"],
    );
}

#[test]
fn huge_config_json_is_refused_before_parsing() {
    malformed_create_fails_cleanly(
        "huge",
        |b, _| {
            let mut spec = config(b);
            spec["annotations"] = serde_json::json!({"padding": "x".repeat(5 << 20)});
            b.write_config(spec.to_string()).unwrap();
        },
        &["config.json is larger than 4 MiB"],
    );
}

#[test]
fn non_utf8_config_json_is_refused() {
    malformed_create_fails_cleanly(
        "non-utf8",
        |b, _| {
            let text = fs::read_to_string(b.dir.join("config.json")).unwrap();
            let mut bytes = text.replacen("\"sh\"", "\"s\u{1}\"", 1).into_bytes();
            let at = bytes.iter().position(|&x| x == 1).unwrap();
            bytes[at] = 0xff;
            b.write_config(bytes).unwrap();
        },
        &["config.json is not valid JSON"],
    );
}

#[test]
fn missing_config_json_is_refused() {
    malformed_create_fails_cleanly(
        "no-config",
        |b, _| fs::remove_file(b.dir.join("config.json")).unwrap(),
        &["config.json", "No such file"],
    );
}

#[test]
fn missing_rootfs_fails_the_create() {
    malformed_create_fails_cleanly(
        "no-rootfs",
        |b, req| {
            // No rootfs mounts and no rootfs directory: nothing for runsc to boot.
            req.rootfs.clear();
            fs::remove_dir(b.dir.join("rootfs")).unwrap();
        },
        &["rootfs"],
    );
}

#[test]
fn rootfs_mount_of_a_missing_source_fails_the_create() {
    malformed_create_fails_cleanly(
        "rootfs-src",
        |b, req| req.rootfs[0].source = b.dir.join("no-such-dir").display().to_string(),
        &["mounting bind", "rootfs"],
    );
}

#[test]
fn stdout_that_is_a_regular_file_is_refused() {
    malformed_create_fails_cleanly(
        "stdout-file",
        |b, req| {
            let f = b.dir.join("not-a-fifo");
            fs::write(&f, "").unwrap();
            req.stdout = f.display().to_string();
        },
        &["stdout", "not a fifo"],
    );
}

#[test]
fn stdout_that_is_a_directory_is_refused() {
    malformed_create_fails_cleanly(
        "stdout-dir",
        |b, req| req.stdout = b.dir.display().to_string(),
        &["stdout fifo", "Is a directory"],
    );
}

#[test]
fn stderr_that_does_not_exist_is_refused() {
    malformed_create_fails_cleanly(
        "stderr-none",
        |b, req| req.stderr = b.dir.join("missing-fifo").display().to_string(),
        &["stderr", "missing-fifo"],
    );
}

#[test]
fn stdin_that_is_a_regular_file_is_refused() {
    malformed_create_fails_cleanly(
        "stdin-file",
        |b, req| {
            let f = b.dir.join("stdin-file");
            fs::write(&f, "input").unwrap();
            req.stdin = f.display().to_string();
        },
        &["stdin", "not a fifo"],
    );
}

#[test]
fn relative_bundle_path_is_refused() {
    malformed_create_fails_cleanly(
        "relative",
        |_, req| req.bundle = "relative/bundle".into(),
        &["not absolute"],
    );
}
