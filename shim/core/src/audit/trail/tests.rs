use std::os::unix::fs::PermissionsExt;

use policy_injector::audit_chain::sign::{key_pair_pem, verifying_key_from_pem};
use policy_injector::audit_chain::{BreakKind, SigFailure};

use super::super::test_support::{subject, verify};
use super::super::{AuditEvent, Rotation};
use super::*;

/// A key pair in `dir`: (private key path, public key).
fn key_in(dir: &Path, seed: u8) -> (PathBuf, sign::VerifyingKey) {
    let (private, public) = key_pair_pem([seed; 32]);
    let path = dir.join(format!("key-{seed}.pem"));
    std::fs::write(&path, private).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (path, verifying_key_from_pem(&public).unwrap())
}

fn policy(dir: &Path, key: Option<&Path>) -> AuditPolicy {
    AuditPolicy {
        path: dir.join("audit.jsonl").display().to_string(),
        signing_key: key.map(|k| k.display().to_string()).unwrap_or_default(),
        ..AuditPolicy::default()
    }
}

/// create, start, exit, then the delete sealed.
fn lifecycle(trail: &Trail, s: &Subject) {
    for e in [AuditEvent::Create, AuditEvent::Start, AuditEvent::Exit] {
        trail.append(&AuditRecord::new(e, s)).unwrap();
    }
    trail
        .seal(&AuditRecord::new(AuditEvent::Delete, s))
        .unwrap();
}

#[test]
fn a_sealed_trail_verifies_with_the_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = key_in(dir.path(), 1);
    let p = policy(dir.path(), Some(&key));
    let s = subject("c1");
    let trail = Trail::for_policy(&p, "ab", &s).unwrap();
    assert!(trail.signs());
    lifecycle(&trail, &s);
    assert!(trail.is_sealed());
    let summary = verify(trail.log().path(), Some(public)).unwrap();
    assert_eq!(summary.signatures.unwrap().sealed, 1);
    let text = std::fs::read_to_string(trail.log().path()).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "delete");
    assert_eq!(last["sig"]["records"], 4);
}

#[test]
fn the_wrong_public_key_fails_verification() {
    let dir = tempfile::tempdir().unwrap();
    let (key, _) = key_in(dir.path(), 1);
    let (_, other) = key_in(dir.path(), 2);
    let s = subject("c1");
    let trail = Trail::for_policy(&policy(dir.path(), Some(&key)), "ab", &s).unwrap();
    lifecycle(&trail, &s);
    let b = verify(trail.log().path(), Some(other)).unwrap_err();
    assert!(
        matches!(
            b.kind,
            BreakKind::Signature {
                failure: SigFailure::WrongKey { .. },
                ..
            }
        ),
        "{b}"
    );
}

#[test]
fn an_unsealed_trail_is_reported_as_cut_or_running() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = key_in(dir.path(), 1);
    let s = subject("c1");
    let trail = Trail::for_policy(&policy(dir.path(), Some(&key)), "ab", &s).unwrap();
    trail
        .append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();
    let b = verify(trail.log().path(), Some(public)).unwrap_err();
    assert!(matches!(b.kind, BreakKind::Unsealed { .. }), "{b}");
    assert!(b.to_string().contains("still running"), "{b}");
}

#[test]
fn without_a_key_seal_is_a_plain_append() {
    let dir = tempfile::tempdir().unwrap();
    let s = subject("c1");
    let trail = Trail::for_policy(&policy(dir.path(), None), "ab", &s).unwrap();
    assert!(!trail.signs());
    lifecycle(&trail, &s);
    let text = std::fs::read_to_string(trail.log().path()).unwrap();
    assert!(!text.contains("\"sig\""), "{text}");
    verify(trail.log().path(), None).unwrap();
}

#[test]
fn an_unusable_signing_key_fails_with_its_path_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let s = subject("c1");
    let missing = dir.path().join("missing.pem");
    let (loose, _) = key_in(dir.path(), 3);
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o644)).unwrap();
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a key").unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (good, _) = key_in(dir.path(), 4);
    let link = dir.path().join("link.pem");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    for (path, why) in [
        (&missing, "No such file"),
        (&loose, "mode 0644"),
        (&garbage, "PKCS#8"),
        (&link, "cannot open"),
    ] {
        let err = Trail::for_policy(&policy(dir.path(), Some(path)), "ab", &s).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&*path.to_string_lossy()) && text.contains(why),
            "{text}"
        );
    }
    assert!(
        !dir.path().join("audit.jsonl").exists(),
        "nothing written before the key loaded"
    );
}

#[test]
fn a_record_after_the_seal_is_written_but_uncovered() {
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = key_in(dir.path(), 1);
    let s = subject("c1");
    let trail = Trail::for_policy(&policy(dir.path(), Some(&key)), "ab", &s).unwrap();
    lifecycle(&trail, &s);
    trail
        .append(&AuditRecord::new(AuditEvent::Exec, &s))
        .unwrap();
    let b = verify(trail.log().path(), Some(public)).unwrap_err();
    assert!(matches!(b.kind, BreakKind::Uncovered { .. }), "{b}");
}

/// 20 sandboxes at once, each on its own thread through its own trail (as 20 shims would),
/// with the log rotating under them: one intact chain and 20 verified signatures.
#[test]
fn twenty_sandboxes_at_once_with_rotation_keep_chain_and_signatures() {
    const SANDBOXES: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let (key, public) = key_in(dir.path(), 5);
    let p = policy(dir.path(), Some(&key));
    let signer = Arc::new(Signer::for_policy(&p).unwrap().unwrap());
    let log = AuditLog::for_policy(&p, "ab").with_rotation(Rotation {
        max_size: 4 << 10,
        keep: 1000,
    });
    std::thread::scope(|scope| {
        for i in 0..SANDBOXES {
            let (log, signer) = (log.clone(), signer.clone());
            scope.spawn(move || {
                let s = subject(&format!("sb{i}"));
                let trail = Trail::new(log, Some(signer), &s);
                trail
                    .append(&AuditRecord::new(AuditEvent::Create, &s))
                    .unwrap();
                trail
                    .append(&AuditRecord::new(AuditEvent::Start, &s))
                    .unwrap();
                for _ in 0..3 {
                    trail
                        .append(&AuditRecord::new(AuditEvent::Exec, &s))
                        .unwrap();
                }
                trail
                    .append(&AuditRecord::new(AuditEvent::Exit, &s))
                    .unwrap();
                trail
                    .seal(&AuditRecord::new(AuditEvent::Delete, &s))
                    .unwrap();
            });
        }
    });
    let rotated = dir.path().join("audit.jsonl.1");
    assert!(rotated.exists(), "the log rotated during the run");
    let summary = verify(log.path(), Some(public)).unwrap();
    let sigs = summary.signatures.unwrap();
    assert_eq!(sigs.sealed, SANDBOXES as u64);
    assert!(sigs.open.is_empty());
    assert!(summary.from_origin);
}
