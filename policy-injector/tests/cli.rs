//! The `policy-injector` binary: exit codes, one-line errors, and `--in-place` never writing a
//! rejected spec.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use policy_injector::{Policy, DEFAULT_POLICY_TOML};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_policy-injector"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("the binary runs")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn copy_to_temp(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    let dst = dir.path().join("config.json");
    std::fs::copy(fixture(name), &dst).unwrap();
    dst
}

#[test]
fn harden_prints_the_hardened_spec_and_exits_0() {
    let o = run(&["harden", fixture("ctr-plain.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let spec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(spec["root"]["readonly"], true);
    assert_eq!(spec["process"]["user"]["uid"], 65534);
    assert!(o.stderr.is_empty());
}

#[test]
fn rejected_spec_exits_2_with_one_line_naming_rule() {
    let o = run(&["harden", fixture("ctr-bind-etc.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.starts_with("error: rejected by policy: mounts: "),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(o.stdout.is_empty());
}

#[test]
fn token_source_flag_removes_that_bind_or_rejects_under_a_reject_policy() {
    let config = fixture("ctr-bind.json");
    let config = config.to_str().unwrap();
    let mounted = |spec: &serde_json::Value| {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["source"] == "/srv/ghdata")
    };
    let o = run(&["harden", config]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(mounted(&serde_json::from_slice(&o.stdout).unwrap()));

    let o = run(&["harden", "--token-source", "/srv/ghdata", config]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!mounted(&serde_json::from_slice(&o.stdout).unwrap()));
    let o = run(&["explain", "--token-source", "/srv/ghdata", config]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("bind source /srv/ghdata holds a Kubernetes service-account token"),
        "{text}"
    );

    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[mounts]\ntoken_volumes = \"reject\"\n").unwrap();
    let o = run(&[
        "harden",
        "--policy",
        policy.to_str().unwrap(),
        "--token-source",
        "/srv/ghdata",
        config,
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("error: rejected by policy: mounts: mounts[/data]"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn in_place_rewrites_an_accepted_spec() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_to_temp(&dir, "ctr-plain.json");
    let printed = run(&["harden", path.to_str().unwrap()]);
    let o = run(&["harden", "--in-place", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), printed.stdout);
    // The rewritten file is already hardened: doing it again changes nothing.
    let again = run(&["harden", path.to_str().unwrap()]);
    assert_eq!(again.stdout, printed.stdout);
}

#[test]
fn in_place_writes_nothing_when_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = copy_to_temp(&dir, "ctr-net-host.json");
    let before = std::fs::read(&path).unwrap();
    let o = run(&["harden", "--in-place", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temp file left behind");
}

#[test]
fn malformed_json_exits_1_naming_file_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, "{\n  \"ociVersion\": \"1.0.2\",\n  \"process\": [\n").unwrap();
    let o = run(&["harden", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("config.json") && err.contains("line 4"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn wrongly_typed_spec_field_exits_1_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        r#"{"root": {"path": "r"}, "process": {"user": {"uid": "root"}}}"#,
    )
    .unwrap();
    let o = run(&["harden", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("process.user.uid"), "{}", stderr(&o));
}

#[test]
fn missing_input_exits_1() {
    let o = run(&["harden", "/nonexistent/config.json"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with("error: cannot read /nonexistent/config.json"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bad_policy_exits_1_naming_file_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "version = 1\n[resources]\ncpu = \"lots\"\n").unwrap();
    let o = run(&[
        "harden",
        "--policy",
        policy.to_str().unwrap(),
        fixture("ctr-plain.json").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("policy.toml") && err.contains("resources.cpu") && err.contains("line 3"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

#[test]
fn policy_file_changes_the_result() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[resources]\nmemory = \"512Mi\"\n").unwrap();
    let o = run(&[
        "harden",
        "--policy",
        policy.to_str().unwrap(),
        fixture("ctr-plain.json").to_str().unwrap(),
    ]);
    let spec: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(spec["linux"]["resources"]["memory"]["limit"], 512i64 << 20);
}

#[test]
fn audit_policy_prints_the_spec_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "mode = \"audit\"\n").unwrap();
    let input = fixture("ctr-net-host.json");
    let o = run(&[
        "harden",
        "--policy",
        policy.to_str().unwrap(),
        input.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let orig: serde_json::Value = serde_json::from_slice(&std::fs::read(&input).unwrap()).unwrap();
    assert_eq!(out, orig);
    assert!(stderr(&o).contains("would-be rejection"), "{}", stderr(&o));
}

#[test]
fn explain_groups_by_rule() {
    let o = run(&["explain", fixture("ctr-env.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("verdict: accepted"));
    for section in [
        "[capabilities]",
        "[user]",
        "[environment]",
        "[scratch]",
        "[mounts]",
        "[resources]",
    ] {
        assert!(text.contains(section), "{section} missing:\n{text}");
    }
    assert!(
        text.contains("API_TOKEN") && !text.contains("not-a-real-token"),
        "{text}"
    );
    assert!(!text.contains("hunter2"));
}

#[test]
fn explain_lists_rejections_and_exits_0() {
    let o = run(&["explain", fixture("ctr-net-host.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(
        text.contains("verdict: rejected (3 rejection(s))"),
        "{text}"
    );
    assert!(
        text.contains("REJECTED linux.namespaces[network]"),
        "{text}"
    );
}

#[test]
fn explain_json_is_machine_readable() {
    let o = run(&[
        "explain",
        "--json",
        fixture("ctr-limits.json").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verdict"], "accepted");
    assert_eq!(v["runsc_args"][0], "--network=none");
    assert!(v["runsc_args"]
        .as_array()
        .unwrap()
        .contains(&serde_json::json!("--oci-seccomp")));
    assert_eq!(
        v["rules"]["annotations"][0]["field"],
        "annotations.dev.gvisor.flag.net-raw"
    );
    assert_eq!(v["lifetime"]["max_runtime"], "1h");
}

#[test]
fn default_policy_prints_the_embedded_text_which_loads_to_the_default() {
    let o = run(&["default-policy"]);
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8(o.stdout).unwrap();
    assert_eq!(text, DEFAULT_POLICY_TOML);
    assert_eq!(Policy::from_toml_str(&text).unwrap(), Policy::default());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("default.toml");
    std::fs::write(&path, &text).unwrap();
    let check = run(&["check-policy", path.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
}

#[test]
fn default_policy_prints_a_preset_that_check_policy_accepts() {
    let o = run(&["default-policy", "--preset", "coding-agent"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = String::from_utf8(o.stdout).unwrap();
    assert_eq!(text, policy_injector::preset("coding-agent").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, &text).unwrap();
    let check = run(&["check-policy", path.to_str().unwrap()]);
    assert_eq!(check.status.code(), Some(0), "{}", stderr(&check));
    let unknown = run(&["default-policy", "--preset", "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("coding-agent"),
        "{}",
        stderr(&unknown)
    );
}

#[test]
fn check_policy_reports_the_first_problem() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, "[runsc.extra_flags]\nignore-cgroups = true\n").unwrap();
    let o = run(&["check-policy", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("runsc.extra_flags.ignore-cgroups") && err.contains("line 2"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1);
}

#[test]
fn every_subcommand_has_help() {
    for args in [
        vec!["--help"],
        vec!["harden", "--help"],
        vec!["explain", "--help"],
        vec!["default-policy", "--help"],
        vec!["check-policy", "--help"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("Usage"),
            "{args:?}"
        );
    }
}

#[test]
fn usage_errors_exit_nonzero() {
    let o = run(&["harden"]);
    assert_ne!(o.status.code(), Some(0));
}

#[test]
fn pod_namespaces_given_on_the_command_line_may_be_joined() {
    let f = fixture("bench-cri-like.json");
    let without = run(&["harden", f.to_str().unwrap()]);
    assert_eq!(without.status.code(), Some(2));
    assert!(
        stderr(&without).contains("linux.namespaces[ipc]"),
        "{}",
        stderr(&without)
    );
    let with = run(&[
        "harden",
        "--pod-namespace",
        "/proc/4242/ns/ipc",
        "--pod-namespace",
        "/proc/4242/ns/uts",
        f.to_str().unwrap(),
    ]);
    assert_eq!(with.status.code(), Some(0), "{}", stderr(&with));
}

#[test]
fn readme_carries_the_default_policy_verbatim() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    assert!(
        readme.contains(DEFAULT_POLICY_TOML),
        "README's default policy is out of date"
    );
}
