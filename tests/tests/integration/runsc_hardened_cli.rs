//! runsc-hardened called as the engines call it, without an engine: what it refuses before it
//! touches anything, what it answers for ids it does not know, and its runc-style version.

use std::process::Command;
use std::time::Duration;

use gvisor_hardened_tests::engine::runsc_hardened_binary;
use gvisor_hardened_tests::inspect;
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::process::output_with_deadline;
use gvisor_hardened_tests::*;

fn call(root: &std::path::Path, log: &std::path::Path, args: &[&str]) -> CommandOutput {
    let mut cmd = Command::new(runsc_hardened_binary().unwrap());
    cmd.arg("--root")
        .arg(root)
        .arg("--log")
        .arg(log)
        .arg("--log-format=json")
        .args(args);
    output_with_deadline(&mut cmd, None, std::time::Duration::from_secs(30)).unwrap()
}

fn last_error(log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let line: serde_json::Value =
        serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap();
    assert_eq!(line["level"], "error", "{text}");
    line["msg"].as_str().unwrap_or_default().to_string()
}

#[test]
fn refusals_come_before_any_side_effect_and_reach_the_engines_log() {
    let dir = tempfile::tempdir().unwrap();
    let (root, log) = (dir.path().join("root"), dir.path().join("log.json"));
    let bundle = dir.path().join("bundle");
    std::fs::create_dir(&bundle).unwrap();
    for (args, needle) in [
        (
            vec![
                "create",
                "--bundle",
                bundle.to_str().unwrap(),
                "--preserve-fds",
                "2",
                "c1",
            ],
            "--preserve-fds 2",
        ),
        (
            vec![
                "--systemd-cgroup",
                "create",
                "--bundle",
                bundle.to_str().unwrap(),
                "c1",
            ],
            "--systemd-cgroup",
        ),
        (
            vec!["create", "--bundle", bundle.to_str().unwrap(), "../c1"],
            "container id \"../c1\" must be 1-128 characters",
        ),
    ] {
        let out = call(&root, &log, &args);
        assert!(!out.success(), "{args:?}: {out}");
        assert!(
            last_error(&log).contains(needle),
            "{args:?}: {}",
            last_error(&log)
        );
        assert!(!root.exists(), "{args:?} left state behind");
        assert_eq!(
            std::fs::read_dir(&bundle).unwrap().count(),
            0,
            "{args:?} wrote into the bundle"
        );
    }
}

#[test]
fn unknown_ids_are_already_deleted_and_do_not_exist_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let (root, log) = (dir.path().join("root"), dir.path().join("log.json"));
    assert!(call(&root, &log, &["delete", "nope"]).success());
    assert!(call(&root, &log, &["delete", "--force", "nope"]).success());
    for sub in ["state", "start", "kill", "ps"] {
        let out = call(&root, &log, &[sub, "nope"]);
        assert!(!out.success(), "{sub}: {out}");
        assert!(
            last_error(&log).contains("does not exist"),
            "{sub}: {}",
            last_error(&log)
        );
    }
}

#[test]
fn version_is_runc_shaped() {
    let mut cmd = Command::new(runsc_hardened_binary().unwrap());
    cmd.arg("--version");
    let out = output_with_deadline(&mut cmd, None, std::time::Duration::from_secs(10)).unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("runsc-hardened version "), "{out}");
    assert!(
        lines[1].starts_with("commit: ") && lines[2].starts_with("spec: "),
        "{out}"
    );
}

/// The engine's delete after an exit finds runsc's part already done: the guard ran `runsc
/// delete` as the container ended (runsc's state for it is gone while runsc-hardened's is not),
/// and `delete` then only audits, seals and cleans up, leaving nothing behind.
#[test]
fn runscs_container_is_deleted_at_the_exit_before_the_engine_asks() {
    deleted_at_the_exit(None);
    // As Podman's: the guard stays in the sandbox's cgroups to the end, so the `runsc delete`
    // it starts must leave them first, or runsc could not remove them.
    deleted_at_the_exit(Some("libpod"));
}

/// A private root, log, runsc root and audit log, with a policy naming them plus `extra`.
struct Lab {
    dir: tempfile::TempDir,
    root: std::path::PathBuf,
    log: std::path::PathBuf,
    runsc_root: std::path::PathBuf,
    audit: std::path::PathBuf,
    policy_flag: String,
}

impl Lab {
    fn new(extra: &str) -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        let (runsc_root, audit, policy) = (p("runsc-root"), p("audit.jsonl"), p("policy.toml"));
        std::fs::write(
            &policy,
            format!("{extra}\n[audit]\npath = {audit:?}\n[runsc]\nroot = {runsc_root:?}\n"),
        )
        .unwrap();
        Lab {
            root: p("root"),
            log: p("log.json"),
            policy_flag: format!("--policy={}", policy.display()),
            runsc_root,
            audit,
            dir,
        }
    }

    /// A bundle running `true` on a busybox root; `manager` is the spec's
    /// `io.container.manager` (Podman's `libpod`).
    fn bundle(&self, id: &str, manager: Option<&str>) -> std::path::PathBuf {
        let bundle = self.dir.path().join(format!("bundle-{id}"));
        gvisor_hardened_tests::direct::make_busybox_rootfs(&bundle.join("rootfs")).unwrap();
        let spec = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["true"], "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0}},
            "root": {"path": "rootfs"},
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
                "cgroupsPath": format!("/{id}"),
            },
            "annotations": manager
                .map(|m| serde_json::json!({"io.container.manager": m}))
                .unwrap_or_default(),
        });
        std::fs::write(bundle.join("config.json"), spec.to_string()).unwrap();
        bundle
    }

    /// `create` as the engines run it; the container's stdio is the create's and nothing here
    /// reads it.
    fn create(&self, id: &str, bundle: &std::path::Path, pid_file: &std::path::Path) -> bool {
        Command::new(runsc_hardened_binary().unwrap())
            .arg("--root")
            .arg(&self.root)
            .arg("--log")
            .arg(&self.log)
            .args(["--log-format=json", &self.policy_flag, "create", "--bundle"])
            .arg(bundle)
            .arg("--pid-file")
            .arg(pid_file)
            .arg(id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// Container `id`'s audit records.
    fn records(&self, id: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.audit)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|l| l["container_id"] == id)
            .collect()
    }
}

fn deleted_at_the_exit(manager: Option<&str>) {
    let lab = Lab::new("");
    let (root, log, runsc_root) = (&lab.root, &lab.log, &lab.runsc_root);
    let id = unique_id("early-delete");
    let bundle = lab.bundle(&id, manager);
    let pid_file = lab.dir.path().join("guard.pid");
    assert!(
        lab.create(&id, &bundle, &pid_file),
        "{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    let guard: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{guard}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).starts_with("runsc-hardened\0guard\0"),
        "the forked guard names itself: {:?}",
        String::from_utf8_lossy(&cmdline)
    );
    assert!(!inspect::runsc_state_files(runsc_root, Some(&id)).is_empty());
    let started = call(root, log, &[&lab.policy_flag, "start", &id]);
    assert!(started.success(), "{started}");
    poll_until("the guard to see the exit", Duration::from_secs(30), || {
        (!inspect::is_alive(guard)).then_some(())
    })
    .unwrap();
    // The marker follows runsc delete's success.
    let marker = root.join(&id).join("runsc-deleted");
    poll_until("the guard's runsc delete", Duration::from_secs(30), || {
        marker.is_file().then_some(())
    })
    .unwrap();
    assert!(inspect::runsc_state_files(runsc_root, Some(&id)).is_empty());
    let state = call(root, log, &["state", &id]);
    assert!(state.stdout.contains("\"stopped\""), "{state}");
    let deleted = call(root, log, &["delete", &id]);
    assert!(deleted.success(), "{deleted}");
    assert!(!root.join(&id).exists());
    let lines = lab.records(&id);
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["create", "start", "exit", "delete"]);
    assert!(lines[3].get("error").is_none(), "{}", lines[3]);
    let leaks = gvisor_hardened_tests::engine::container_leaks(&id, runsc_root, root);
    assert!(leaks.is_empty(), "{leaks}");
}

/// Egress on with no forwarder where the policy says: the engine's log names the path and the
/// fix, the create is audited as failed, and nothing is left (no sandbox, the spec put back).
#[test]
fn a_missing_forwarder_fails_the_create_naming_the_path_and_the_fix() {
    let lab = Lab::new(
        "[network.egress]\nallow = [\"api.example.test\"]\nforwarder = \"/nonexistent/gvh-forwarder\"",
    );
    let id = unique_id("no-fwd");
    let bundle = lab.bundle(&id, None);
    let original = std::fs::read(bundle.join("config.json")).unwrap();
    let pid_file = lab.dir.path().join("guard.pid");
    assert!(!lab.create(&id, &bundle, &pid_file));
    let error = last_error(&lab.log);
    assert!(
        error.contains("egress needs the forwarder binary at /nonexistent/gvh-forwarder")
            && error.contains("hack/build-forwarder.sh"),
        "{error}"
    );
    let events: Vec<String> = lab
        .records(&id)
        .iter()
        .map(|l| l["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["create-failed"]);
    assert!(!pid_file.exists());
    assert_eq!(std::fs::read(bundle.join("config.json")).unwrap(), original);
    let leaks = gvisor_hardened_tests::engine::container_leaks(&id, &lab.runsc_root, &lab.root);
    assert!(leaks.is_empty(), "{leaks}");
}

/// A create that fails after the guard made the sandbox (here: the engine's pid file cannot be
/// written) ends the guard and the sandbox, audits `create-failed` and leaves nothing.
#[test]
fn a_create_failing_after_the_sandbox_exists_leaves_nothing() {
    let lab = Lab::new("");
    let id = unique_id("late-failure");
    let bundle = lab.bundle(&id, Some("libpod"));
    let pid_file = lab.dir.path().join("no-such-dir").join("guard.pid");
    assert!(!lab.create(&id, &bundle, &pid_file));
    let error = last_error(&lab.log);
    assert!(error.contains("guard.pid"), "{error}");
    let events: Vec<String> = lab
        .records(&id)
        .iter()
        .map(|l| l["event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(events, ["create", "create-failed"]);
    gvisor_hardened_tests::engine::assert_container_gone(&id, &lab.runsc_root, &lab.root);
}

/// `runsc-hardened exec` without `--detach` (runc's command line; no engine uses it): the call
/// is the exec's guard, through the same operations as a detached exec's. Its output is cut at
/// the container's bound, its status is the call's, it is audited `exec`, `exec-start`,
/// `exec-exit` with the output counted.
#[test]
fn a_non_detached_exec_is_bounded_audited_and_exits_with_the_processs_status() {
    let lab = Lab::new("[output]\nmax_bytes = \"100\"");
    let (root, log) = (&lab.root, &lab.log);
    let id = unique_id("exec");
    let bundle = lab.bundle(&id, None);
    let config = bundle.join("config.json");
    let mut spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    spec["process"]["args"] = serde_json::json!(["sleep", "600"]);
    std::fs::write(&config, spec.to_string()).unwrap();
    let pid_file = lab.dir.path().join("guard.pid");
    assert!(
        lab.create(&id, &bundle, &pid_file),
        "{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    let started = call(root, log, &["start", &id]);
    assert!(started.success(), "{started}");

    let process = lab.dir.path().join("process.json");
    let exec = serde_json::json!({
        "args": ["sh", "-c", "yes x | head -c 500; exit 3"],
        "cwd": "/", "env": ["PATH=/bin"], "user": {"uid": 0, "gid": 0},
    });
    std::fs::write(&process, exec.to_string()).unwrap();
    let ran = call(
        root,
        log,
        &["exec", "--process", process.to_str().unwrap(), &id],
    );
    assert_eq!(ran.code(), 3, "{ran}");
    let cut = ran
        .stdout
        .find("[gvisor-hardened: output limit of 100 bytes");
    assert_eq!(cut, Some(100), "{ran}");

    let killed = call(root, log, &["kill", &id, "KILL"]);
    assert!(killed.success(), "{killed}");
    let guard: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    poll_until("the guard to see the exit", Duration::from_secs(30), || {
        (!inspect::is_alive(guard)).then_some(())
    })
    .unwrap();
    let deleted = call(root, log, &["delete", &id]);
    assert!(deleted.success(), "{deleted}");
    let records = lab.records(&id);
    let events: Vec<&str> = records
        .iter()
        .map(|l| l["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        events,
        [
            "create",
            "start",
            "exec",
            "exec-start",
            "exec-exit",
            "exit",
            "delete"
        ]
    );
    let exec_exit = &records[4];
    assert_eq!(exec_exit["exit_status"], 3, "{exec_exit}");
    assert_eq!(exec_exit["output_bytes"], 100, "{exec_exit}");
    assert_eq!(exec_exit["output_truncated"], true, "{exec_exit}");
    let leaks = gvisor_hardened_tests::engine::container_leaks(&id, &lab.runsc_root, &lab.root);
    assert!(leaks.is_empty(), "{leaks}");
}
