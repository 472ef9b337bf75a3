//! `policy-injector audit verify` and `audit keygen`: exit codes, the verdict lines, key files.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use policy_injector::audit_chain::sign::{signing_key_from_pem, SigningKey};
use policy_injector::audit_chain::{self, Digest, Origin, SealInput, Tail};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_policy-injector"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const ORIGIN: Origin<'static> = Origin {
    time: "2026-01-01T00:00:00.000Z",
    node: "n",
    policy_sha256: "ab",
};

/// Appends `record` to the file at `path` as the shim's writer would (no rotation).
fn append(path: &Path, record: &str, seal: Option<&SealInput<'_>>) -> Digest {
    let mut bytes = std::fs::read(path).unwrap_or_default();
    let last = bytes
        .strip_suffix(b"\n")
        .map(|b| b.rsplit(|c| *c == b'\n').next().unwrap().to_vec());
    let tail = match &last {
        Some(l) => Tail::Line(l),
        None => Tail::Empty,
    };
    let next = audit_chain::next(tail, None);
    let out = audit_chain::compose(tail, next, &ORIGIN, record.as_bytes(), seal).unwrap();
    bytes.extend_from_slice(&out.bytes);
    std::fs::write(path, bytes).unwrap();
    out.record
}

fn rec(event: &str, id: &str) -> String {
    format!(r#"{{"time":"t","event":"{event}","namespace":"default","container_id":"{id}"}}"#)
}

/// A log with one sandbox, sealed with `key` when given.
fn log(dir: &Path, key: Option<&SigningKey>) -> PathBuf {
    let path = dir.join("audit.jsonl");
    let mut hashes = Vec::new();
    for e in ["create", "start", "exit"] {
        hashes.push(append(&path, &rec(e, "c1"), None));
    }
    let seal = key.map(|key| SealInput {
        key,
        namespace: "default",
        container_id: "c1",
        earlier: &hashes,
    });
    append(&path, &rec("delete", "c1"), seal.as_ref());
    path
}

#[test]
fn an_intact_log_prints_the_record_count_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let path = log(dir.path(), None);
    let o = run(&["audit", "verify", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(stdout(&o).lines().next(), Some("5 records, chain intact"));
}

#[test]
fn a_tampered_copy_names_the_line_and_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let path = log(dir.path(), None);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("\"start\"", "\"stop\"", 1)).unwrap();
    let o = run(&["audit", "verify", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let out = stdout(&o);
    assert!(
        out.starts_with("chain broken: ") && out.contains("audit.jsonl line 3: record altered"),
        "{out}"
    );
}

#[test]
fn an_unreadable_file_exits_1() {
    let o = run(&["audit", "verify", "/nonexistent/audit.jsonl"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/audit.jsonl"));
}

#[test]
fn log_reads_the_rotated_files_first() {
    let dir = tempfile::tempdir().unwrap();
    let path = log(dir.path(), None);
    // Rotated by hand: the live file's genesis links to the last record of audit.jsonl.1.
    std::fs::rename(&path, dir.path().join("audit.jsonl.1")).unwrap();
    let last = std::fs::read(dir.path().join("audit.jsonl.1")).unwrap();
    let last = last
        .strip_suffix(b"\n")
        .unwrap()
        .rsplit(|c| *c == b'\n')
        .next()
        .unwrap()
        .to_vec();
    let next = audit_chain::next(Tail::Empty, Some(&last));
    let out = audit_chain::compose(
        Tail::Empty,
        next,
        &ORIGIN,
        rec("create", "c2").as_bytes(),
        None,
    )
    .unwrap();
    std::fs::write(&path, out.bytes).unwrap();
    let o = run(&["audit", "verify", "--log", path.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).starts_with("7 records, chain intact\n2 file(s)"));
    // Newest first is the wrong order, and said so.
    let o = run(&[
        "audit",
        "verify",
        path.to_str().unwrap(),
        dir.path().join("audit.jsonl.1").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(3), "{o:?}");
}

#[test]
fn keygen_writes_a_private_key_only_root_reads_and_a_public_key_that_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("node");
    let o = run(&["audit", "keygen", "--out", prefix.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let private = dir.path().join("node.key");
    let public = dir.path().join("node.pub");
    let mode = std::fs::metadata(&private).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let key = signing_key_from_pem(&std::fs::read_to_string(&private).unwrap()).unwrap();

    let path = log(dir.path(), Some(&key));
    let o = run(&[
        "audit",
        "verify",
        "--public-key",
        public.to_str().unwrap(),
        path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("signatures: 1 sandbox(es) signed and verified"));

    // Never overwrites a key.
    let again = run(&["audit", "keygen", "--out", prefix.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(
        signing_key_from_pem(&std::fs::read_to_string(&private).unwrap()).unwrap(),
        key
    );
}

#[test]
fn verify_with_a_key_fails_on_a_wrong_key_and_on_a_cut_tail() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("k");
    assert!(run(&["audit", "keygen", "--out", prefix.to_str().unwrap()])
        .status
        .success());
    let other = dir.path().join("other");
    assert!(run(&["audit", "keygen", "--out", other.to_str().unwrap()])
        .status
        .success());
    let key =
        signing_key_from_pem(&std::fs::read_to_string(dir.path().join("k.key")).unwrap()).unwrap();
    let path = log(dir.path(), Some(&key));
    let verify = |public: &str, file: &Path| {
        run(&[
            "audit",
            "verify",
            "--public-key",
            dir.path().join(public).to_str().unwrap(),
            file.to_str().unwrap(),
        ])
    };
    let wrong = verify("other.pub", &path);
    assert_eq!(wrong.status.code(), Some(3));
    assert!(
        stdout(&wrong).contains("not with the given public key"),
        "{wrong:?}"
    );

    // The last record (the signed delete) cut away at a line boundary: the chain alone cannot
    // tell, the signature check can.
    let text = std::fs::read_to_string(&path).unwrap();
    let cut: String = text.lines().take(4).map(|l| format!("{l}\n")).collect();
    let cut_path = dir.path().join("cut.jsonl");
    std::fs::write(&cut_path, cut).unwrap();
    assert!(run(&["audit", "verify", cut_path.to_str().unwrap()])
        .status
        .success());
    let o = verify("k.pub", &cut_path);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        stdout(&o).contains("sandbox default/c1 was created here but has no signed final record"),
        "{o:?}"
    );
    let mut allow = Command::new(env!("CARGO_BIN_EXE_policy-injector"));
    allow.args([
        "audit",
        "verify",
        "--allow-open",
        "--public-key",
        dir.path().join("k.pub").to_str().unwrap(),
        cut_path.to_str().unwrap(),
    ]);
    let o = allow.output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(stdout(&o).contains("open (no signed final record yet"));
}

#[test]
fn keygen_output_is_accepted_by_openssl_as_ed25519() {
    // Interoperability: the PEM files are the standard PKCS#8 / SPKI encodings.
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ossl");
    assert!(run(&["audit", "keygen", "--out", prefix.to_str().unwrap()])
        .status
        .success());
    let o = Command::new("openssl")
        .args(["pkey", "-in"])
        .arg(dir.path().join("ossl.key"))
        .args(["-pubout"])
        .output()
        .expect("openssl runs (Debian package openssl)");
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        std::fs::read_to_string(dir.path().join("ossl.pub")).unwrap()
    );
    // And a key openssl made is a key the shim can sign with.
    let made = dir.path().join("made.key");
    let o = Command::new("openssl")
        .args(["genpkey", "-algorithm", "ed25519", "-out"])
        .arg(&made)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    signing_key_from_pem(&std::fs::read_to_string(&made).unwrap()).unwrap();
}
