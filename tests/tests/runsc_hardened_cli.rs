//! runsc-hardened called as the engines call it, without an engine: what it refuses before it
//! touches anything, what it answers for ids it does not know, and its runc-style version.

use std::process::Command;

use gvisor_hardened_tests::engine::runsc_hardened_binary;
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
            "invalid container id",
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
