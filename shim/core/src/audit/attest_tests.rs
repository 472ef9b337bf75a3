//! A run attestation (`policy_injector::attestation`, behind `policy-injector audit attest`)
//! built from what this writer writes: records made with the shim's own types, appended
//! through a signed [`Trail`], egress lines through [`AuditLog`], and real start and exit
//! manifests of a volume the "sandbox" writes to. A record field, an event or the manifest's
//! format renamed here without the attestation following breaks this test, not a verifier.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::time::SystemTime;

use policy_injector::attestation::{self, RunFold};
use policy_injector::audit_chain::sign::{key_pair_pem, signing_key_from_pem};
use policy_injector::policy::ArtifactsPolicy;

use super::test_support::{egress_connection, files_of};
use super::*;
use crate::artifacts::{record_exit, record_start_of, WritableMount};
use crate::egress::audit::{AuditLine, Verdict};

fn subject(id: &str) -> Subject {
    Subject {
        namespace: "k8s.io".into(),
        container_id: id.into(),
        image: Some(format!("registry.example/agent@sha256:{}", "ab".repeat(32))),
        pod: Some(PodRef {
            name: Some("agent".into()),
            namespace: Some("team-a".into()),
            uid: None,
            sandbox_id: Some("pause".into()),
            container_name: Some("agent".into()),
        }),
        policy: PolicyRef {
            path: "/etc/gvisor-hardened/policy.toml".into(),
            sha256: "cd".repeat(32),
            mode: "enforce".into(),
        },
    }
}

#[test]
fn an_attestation_is_built_from_what_the_shims_writer_and_manifests_write() {
    let dir = tempfile::tempdir().unwrap();
    let (private, _) = key_pair_pem([9; 32]);
    let key_path = dir.path().join("audit.key");
    std::fs::write(&key_path, &private).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let signer = Arc::new(Signer::load(&key_path).unwrap());
    let log = AuditLog::new(dir.path().join("log/audit.jsonl"));
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(&volume).unwrap();
    std::fs::write(volume.join("kept"), b"as it was").unwrap();
    std::fs::write(volume.join("edited"), b"before").unwrap();

    let pause = subject("pause");
    log.append(&AuditRecord::new(AuditEvent::Create, &pause))
        .unwrap();
    let app = subject("app");
    let trail = Trail::new(log.clone(), Some(signer.clone()), &app);
    let mut create = AuditRecord::new(AuditEvent::Create, &app);
    let config = "ef".repeat(32);
    create.config_sha256 = Some(&config);
    trail.append(&create).unwrap();
    let mounts = vec![WritableMount {
        source: volume.clone(),
        destination: "/workspace".into(),
    }];
    let policy = ArtifactsPolicy::default();
    let start = record_start_of(mounts, &policy, log.path(), "app")
        .unwrap()
        .expect("one writable mount");
    let mut started = AuditRecord::new(AuditEvent::Start, &app);
    started.artifacts = Some(ArtifactsAudit::Start(&start));
    trail.append(&started).unwrap();

    // What the sandbox does: one file written, one edited, and two connections tried.
    std::fs::write(volume.join("edited"), b"after").unwrap();
    std::fs::write(volume.join("result.json"), b"{\"ok\":true}").unwrap();
    for (host, verdict, up) in [
        ("api.example.test", Verdict::Allowed, 100),
        ("exfil.example.test", Verdict::Denied, 0),
    ] {
        log.append_value(&AuditLine::now(
            "k8s.io",
            &egress_connection(host, verdict, up, up * 2),
        ))
        .unwrap();
    }

    let exit_manifest = Ok(record_exit(&start, &policy, log.path(), "app").unwrap());
    let mut exit = AuditRecord::new(AuditEvent::Exit, &app);
    exit.set_exit(&crate::exit::Exit {
        status: 0,
        at: SystemTime::now(),
        cause: ExitCause::Exited,
    });
    exit.artifacts = Some(ArtifactsAudit::of_exit(&exit_manifest));
    trail.append(&exit).unwrap();
    trail
        .seal(&AuditRecord::new(AuditEvent::Delete, &app))
        .unwrap();

    let mut fold = RunFold::new("app", None);
    for f in files_of(log.path()) {
        let bytes = std::fs::read(&f).unwrap();
        for line in bytes.strip_suffix(b"\n").unwrap().split(|b| *b == b'\n') {
            fold.line(line);
        }
    }
    let run = fold.finish().unwrap();
    let recorded = run.artifacts.manifest.clone().expect("the exit manifest");
    let bytes = std::fs::read(&recorded.path).unwrap();
    let written = attestation::written_files(&bytes, &recorded.sha256, "app").unwrap();
    let statement = attestation::statement(run, written).unwrap();
    let key = signing_key_from_pem(&private).unwrap();
    let envelope = attestation::sign(&statement, &key);
    let back = attestation::verify(&envelope, &key.verifying_key()).unwrap();

    let subjects: Vec<(&str, &str)> = back
        .subject
        .iter()
        .map(|s| (s.name.as_str(), s.digest["sha256"].as_str()))
        .collect();
    let sha = |b: &[u8]| policy_injector::audit_chain::Digest::of(b).to_string();
    assert_eq!(
        subjects,
        [
            ("/workspace/edited", &*sha(b"after")),
            ("/workspace/result.json", &*sha(b"{\"ok\":true}")),
        ]
    );
    let p = &back.predicate;
    assert_eq!(
        p["exit"],
        serde_json::json!({"status": 0, "cause": "exited"})
    );
    assert_eq!(p["config_sha256"], config.as_str());
    assert_eq!(p["image_digest"], format!("sha256:{}", "ab".repeat(32)));
    assert_eq!(p["policy"]["sha256"], "cd".repeat(32));
    assert_eq!(p["egress"]["connections"]["allowed"], 1);
    assert_eq!(p["egress"]["connections"]["denied"], 1);
    assert_eq!(p["egress"]["bytes_down"], 200);
    assert_eq!(p["artifacts"]["exact"], true);
    assert_eq!(p["audit"]["records"], 4, "create, start, exit, delete");
    assert_eq!(p["audit"]["key_id"], signer.key_id().as_str());
    assert_eq!(envelope.signatures[0].keyid, signer.key_id());
}
