//! `policy-injector audit attest` and `audit verify-attestation` end to end: a signed audit log
//! with an exit manifest as the shim leaves them, an attestation written from it, accepted by
//! our verifier and by a third-party one (securesystemslib's DSSE + in-toto-attestation's
//! Statement v1, tests/attest/verify_in_toto.py), and refused by both once tampered with.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

use policy_injector::audit_chain::sign::signing_key_from_pem;
use policy_injector::audit_chain::{self, Digest, Origin, SealInput, Tail};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_policy-injector"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The third-party verifier: exit 0 when it accepts.
fn python_verify(public: &Path, envelope: &Path, artifacts: Option<&Path>) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/attest/verify_in_toto.py");
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(public).arg(envelope);
    if let Some(dir) = artifacts {
        cmd.arg(dir);
    }
    let out = cmd.output().expect("python3 runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("ModuleNotFoundError"),
        "the third-party verifier is not installed (hack/lib.sh ensure_python_tools): {err}"
    );
    out
}

const ORIGIN: Origin<'static> = Origin {
    time: "2026-12-03T10:00:00.000Z",
    node: "node-1",
    policy_sha256: "",
};

fn sha(bytes: &[u8]) -> String {
    Digest::of(bytes).to_string()
}

/// Appends chained records to the file, as the shim's writer does; the container's records
/// are remembered and its final record is signed with `key`.
struct Writer<'a> {
    path: PathBuf,
    key: &'a policy_injector::audit_chain::sign::SigningKey,
    trail: Vec<Digest>,
}

impl Writer<'_> {
    fn append(&mut self, rec: Value, seal: bool) {
        let mut bytes = std::fs::read(&self.path).unwrap_or_default();
        let last = bytes
            .strip_suffix(b"\n")
            .map(|b| b.rsplit(|c| *c == b'\n').next().unwrap().to_vec());
        let tail = last.as_deref().map_or(Tail::Empty, Tail::Line);
        let next = audit_chain::next(tail, None);
        let input = seal.then(|| SealInput {
            key: self.key,
            namespace: "k8s.io",
            container_id: "agent-7",
            earlier: &self.trail,
        });
        let body = serde_json::to_vec(&rec).unwrap();
        let out = audit_chain::compose(tail, next, &ORIGIN, &body, input.as_ref()).unwrap();
        bytes.extend_from_slice(&out.bytes);
        std::fs::write(&self.path, bytes).unwrap();
        if rec["container_id"] == "agent-7" {
            self.trail.push(out.record);
        }
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: PathBuf,
    /// Stands for the container's root: the volume mounted at /workspace is root/workspace.
    rootfs: PathBuf,
    key: PathBuf,
    public: PathBuf,
    other_public: PathBuf,
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A pod's agent container that wrote two files into its workspace, reached one host and was
/// refused another, exited 0, and was deleted (its signed final record).
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    for prefix in ["audit-signing", "other"] {
        let o = run(&["audit", "keygen", "--out", s(&root.join(prefix))]);
        assert_eq!(o.status.code(), Some(0), "{o:?}");
    }
    let pem = std::fs::read_to_string(root.join("audit-signing.key")).unwrap();
    let key = signing_key_from_pem(&pem).unwrap();

    let rootfs = root.join("rootfs");
    let ws = rootfs.join("workspace");
    std::fs::create_dir_all(ws.join("out")).unwrap();
    std::fs::write(ws.join("out/report.md"), b"# findings\nnone\n").unwrap();
    std::fs::write(ws.join("main.rs"), b"fn main() {}\n").unwrap();
    std::fs::write(ws.join("README"), b"unchanged\n").unwrap();
    let file = |p: &str| {
        let bytes = std::fs::read(ws.join(p)).unwrap();
        json!({"path": p, "type": "file", "size": bytes.len(), "mode": "0644",
               "mtime_ns": 1_764_756_000_000_000_000_i64, "sha256": sha(&bytes)})
    };
    let logs = root.join("log");
    std::fs::create_dir_all(logs.join("artifacts")).unwrap();
    let manifest_path = logs.join("artifacts/agent-7-exit-20261203T100009.000Z.json");
    let policy_sha = sha(b"[audit]\nsigning_key = \"/etc/gvisor-hardened/audit-signing.key\"\n");
    let mut manifest = serde_json::to_vec(&json!({
        "version": 1, "container_id": "agent-7", "phase": "exit",
        "time": "2026-12-03T10:00:09.000Z",
        "manifest": {"complete": true, "all_hashed": true, "max_files": 50000,
            "max_hashed_bytes": 1_073_741_824_u64, "elapsed_ms": 3, "mounts": [{
                "destination": "/workspace", "source": s(&ws),
                "stats": {"entries": 5, "files": 3, "dirs": 2, "symlinks": 0, "special": 0,
                          "bytes": 40, "hashed_bytes": 40, "not_hashed": 0, "skipped_dirs": 0},
                "entries": [
                    {"path": "", "type": "dir", "size": 4096, "mode": "0755", "mtime_ns": 0},
                    file("README"), file("main.rs"),
                    {"path": "out", "type": "dir", "size": 4096, "mode": "0755", "mtime_ns": 0},
                    file("out/report.md")]}]},
        "start_sha256": sha(b"start"),
        "diff": {"exact": true,
            "added": [{"mount": "/workspace", "path": "out", "type": "dir"},
                      {"mount": "/workspace", "path": "out/report.md", "type": "file"}],
            "modified": [{"mount": "/workspace", "path": "main.rs", "type": "file",
                          "fields": ["size", "sha256"]}],
            "removed": []}
    }))
    .unwrap();
    manifest.push(b'\n');
    std::fs::write(&manifest_path, &manifest).unwrap();

    let log = logs.join("audit.jsonl");
    let mut w = Writer {
        path: log.clone(),
        key: &key,
        trail: Vec::new(),
    };
    let policy = json!({"path": "/etc/gvisor-hardened/policy.toml", "sha256": policy_sha,
                        "mode": "enforce"});
    let pod = json!({"name": "agent", "namespace": "team-a", "uid": "u-1",
                     "sandbox_id": "pause-1", "container_name": "agent"});
    let lifecycle = |event: &str, id: &str, time: &str, extra: Value| {
        let mut r = json!({"time": time, "event": event, "namespace": "k8s.io",
            "container_id": id, "image": "registry.example/agent@sha256:".to_string()
                + &sha(b"image"),
            "pod": pod, "policy": policy, "oom": false, "timed_out": false,
            "process_limit_exceeded": false});
        for (k, v) in extra.as_object().unwrap() {
            r[k] = v.clone();
        }
        r
    };
    let egress = |verdict: &str, host: &str, up: u64| {
        json!({"time": "2026-12-03T10:00:05.000Z", "event": "egress-connection",
            "namespace": "k8s.io", "sandbox_id": "pause-1", "container_id": "pause-1",
            "policy": "gvisor-hardened-agent", "peer": "10.0.0.2:40000", "method": "CONNECT", // net-scan: data
            "host": host, "port": 443, "verdict": verdict, "rule": "api.example.com", // net-scan: data
            "bytes_up": up, "bytes_down": up * 3, "duration_ms": 12})
    };
    w.append(
        lifecycle("create", "pause-1", "2026-12-03T10:00:00.000Z", json!({})),
        false,
    );
    w.append(
        lifecycle(
            "create",
            "agent-7",
            "2026-12-03T10:00:01.000Z",
            json!({"config_sha256": sha(b"config.json"),
                   "runsc_args": ["--network=sandbox", "--overlay2=root:self"],
                   "decisions": []}),
        ),
        false,
    );
    w.append(
        lifecycle(
            "start",
            "agent-7",
            "2026-12-03T10:00:02.000Z",
            json!({"pid": 4242}),
        ),
        false,
    );
    w.append(egress("allowed", "api.example.com", 1200), false); // net-scan: data
    w.append(egress("denied", "exfil.example.net", 0), false); // net-scan: data
    w.append(
        lifecycle(
            "exit",
            "agent-7",
            "2026-12-03T10:00:09.000Z",
            json!({"exit_status": 0, "exit_cause": "exited", "output_bytes": 6,
                "output_truncated": false,
                "output": {"complete": true, "discarded_bytes": 0,
                    "stdout": {"delivered_bytes": 6, "discarded_bytes": 0,
                               "sha256": sha(b"done.\n"), "marker_written": false}},
                "artifacts": {
                    "manifest": {"path": s(&manifest_path), "sha256": sha(&manifest),
                                 "bytes": manifest.len()},
                    "start_sha256": sha(b"start"), "complete": true, "all_hashed": true,
                    "diff": {"exact": true, "added": 2, "modified": 1, "removed": 0,
                             "added_paths": [], "modified_paths": [], "removed_paths": [],
                             "truncated": false}}}),
        ),
        false,
    );
    w.append(
        lifecycle("delete", "agent-7", "2026-12-03T10:00:10.000Z", json!({})),
        true,
    );
    Fixture {
        key: root.join("audit-signing.key"),
        public: root.join("audit-signing.pub"),
        other_public: root.join("other.pub"),
        _dir: dir,
        root,
        log,
        rootfs,
    }
}

fn attest(f: &Fixture, out: &Path) -> Output {
    run(&[
        "audit",
        "attest",
        "--log",
        s(&f.log),
        "--container",
        "agent-7",
        "--key",
        s(&f.key),
        "--out",
        s(out),
    ])
}

fn ours(public: &Path, envelope: &Path, artifacts: Option<&Path>) -> Output {
    let mut args = vec!["audit", "verify-attestation", "--public-key", s(public)];
    if let Some(dir) = artifacts {
        args.extend(["--artifacts", s(dir)]);
    }
    args.push(s(envelope));
    run(&args)
}

fn payload(envelope: &Path) -> (Value, Value) {
    let env: Value = serde_json::from_slice(&std::fs::read(envelope).unwrap()).unwrap();
    let p = B64.decode(env["payload"].as_str().unwrap()).unwrap();
    (env, serde_json::from_slice(&p).unwrap())
}

/// `envelope` with its payload replaced by `edit` of its bytes, the signature kept.
fn tampered(envelope: &Path, to: &Path, edit: impl Fn(&mut Vec<u8>)) {
    let mut env: Value = serde_json::from_slice(&std::fs::read(envelope).unwrap()).unwrap();
    let mut p = B64.decode(env["payload"].as_str().unwrap()).unwrap();
    edit(&mut p);
    env["payload"] = json!(B64.encode(p));
    std::fs::write(to, serde_json::to_vec(&env).unwrap()).unwrap();
}

fn refused_by_both(public: &Path, envelope: &Path, artifacts: Option<&Path>) {
    let o = ours(public, envelope, artifacts);
    assert_eq!(o.status.code(), Some(3), "ours accepted it: {o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).starts_with("refused: "),
        "{o:?}"
    );
    let p = python_verify(public, envelope, artifacts);
    assert_eq!(
        p.status.code(),
        Some(1),
        "the third party accepted it: {p:?}"
    );
    assert!(
        String::from_utf8_lossy(&p.stderr).contains("refused: "),
        "{p:?}"
    );
}

#[test]
fn an_attestation_of_a_signed_run_verifies_with_ours_and_with_securesystemslib() {
    let f = fixture();
    let env = f.root.join("agent-7.intoto.json");
    let o = attest(&f, &env);
    assert_eq!(o.status.code(), Some(0), "{o:?}");

    let (envelope, statement) = payload(&env);
    assert_eq!(envelope["payloadType"], "application/vnd.in-toto+json");
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1"); // net-scan: data
    assert_eq!(
        statement["predicateType"],
        "https://gvisor-hardened.dev/run/v1" // net-scan: data
    );
    let names: Vec<&str> = statement["subject"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["/workspace/main.rs", "/workspace/out/report.md"]);
    assert_eq!(
        statement["subject"][1]["digest"]["sha256"],
        sha(b"# findings\nnone\n")
    );
    let p = &statement["predicate"];
    assert_eq!(p["exit"], json!({"status": 0, "cause": "exited"}));
    assert_eq!(p["config_sha256"], sha(b"config.json"));
    assert_eq!(p["image_digest"], format!("sha256:{}", sha(b"image")));
    assert_eq!(
        p["egress"]["connections"],
        json!({"allowed": 1, "denied": 1})
    );
    assert_eq!(
        p["egress"]["hosts_denied"],
        json!(["exfil.example.net:443"]) // net-scan: data
    );
    assert_eq!(p["output"]["stdout_sha256"], sha(b"done.\n"));
    assert_eq!(p["times"]["started"], "2026-12-03T10:00:02.000Z");
    assert_eq!(p["audit"]["records"], 4);

    let o = ours(&f.public, &env, Some(&f.rootfs));
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.starts_with("attestation verified: ")
            && text.contains("2 subject(s), sandbox k8s.io/agent-7, exit 0 (exited)")
            && text.contains("artifacts: all 2 subject(s)"),
        "{text}"
    );
    let p = python_verify(&f.public, &env, Some(&f.rootfs));
    assert_eq!(p.status.code(), Some(0), "{p:?}");
    assert!(String::from_utf8_lossy(&p.stdout).starts_with("verified: 2 subject(s)"));
}

#[test]
fn a_tampered_attestation_is_refused_by_ours_and_by_securesystemslib() {
    let f = fixture();
    let env = f.root.join("agent-7.intoto.json");
    assert_eq!(attest(&f, &env).status.code(), Some(0));

    // One payload byte: the exit cause.
    let bad = f.root.join("byte.json");
    tampered(&env, &bad, |p| {
        let at = p.windows(8).position(|w| w == b"\"exited\"").unwrap();
        p[at + 1] = b'E';
    });
    refused_by_both(&f.public, &bad, None);

    // A subject's digest, to pass off another file as the one the sandbox wrote.
    let (_, statement) = payload(&env);
    let digest = statement["subject"][0]["digest"]["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let bad = f.root.join("digest.json");
    tampered(&env, &bad, |p| {
        let text = String::from_utf8(p.clone()).unwrap();
        *p = text.replace(&digest, &sha(b"another file")).into_bytes();
    });
    refused_by_both(&f.public, &bad, None);

    // The wrong key.
    refused_by_both(&f.other_public, &env, None);

    // Intact envelope, but a file on disk is not what the sandbox wrote.
    std::fs::write(
        f.rootfs.join("workspace/out/report.md"),
        b"# findings\nall good\n",
    )
    .unwrap();
    refused_by_both(&f.public, &env, Some(&f.rootfs));
}

#[test]
fn attest_refuses_a_log_that_does_not_verify_with_the_key() {
    let f = fixture();
    let text = std::fs::read_to_string(&f.log).unwrap();
    std::fs::write(
        &f.log,
        text.replace("exfil.example.net", "docs.example.org"), // net-scan: data
    )
    .unwrap();
    let o = attest(&f, &f.root.join("x.json"));
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout)
            .starts_with("not attested: the audit log does not verify"),
        "{o:?}"
    );
    assert!(!f.root.join("x.json").exists());
}

#[test]
fn attest_refuses_an_exit_manifest_edited_on_disk() {
    let f = fixture();
    let manifest = std::fs::read_dir(f.log.parent().unwrap().join("artifacts"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("out/report.md", "out/REPORT.md")).unwrap();
    let o = attest(&f, &f.root.join("x.json"));
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the exit manifest's sha256 is"),
        "{o:?}"
    );
}

#[test]
fn a_container_still_running_has_no_attestation() {
    let f = fixture();
    let o = run(&[
        "audit",
        "attest",
        "--log",
        s(&f.log),
        "--container",
        "pause-1",
        "--key",
        s(&f.key),
    ]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("container pause-1: its last run has no signed final record"),
        "{o:?}"
    );
}
