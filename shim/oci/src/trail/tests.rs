use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use policy_injector::audit_chain::sign::{key_pair_pem, verifying_key_from_pem};

use super::*;
use gvisor_hardened_core::audit::test_support::{subject, verify};
use gvisor_hardened_core::audit::{AuditEvent, Trail};

fn signer(dir: &Path) -> (Signer, policy_injector::audit_chain::sign::VerifyingKey) {
    let (private, public) = key_pair_pem([7; 32]);
    let path = dir.join("key.pem");
    std::fs::write(&path, private).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    (
        Signer::load(&path).unwrap(),
        verifying_key_from_pem(&public).unwrap(),
    )
}

/// `create` (in memory, before the state directory), then records from other "processes"
/// (separate StateTrails on the same directory, as start, the guard and delete are), sealed.
fn lifecycle(dir: &Path, signer: Option<&Signer>) -> PathBuf {
    let log = AuditLog::new(dir.join("audit.jsonl"));
    let s = subject("c1");
    let created = Trail::new(log.clone(), None, &s);
    created
        .append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    let at = |_: &str| StateTrail::new(log.clone(), &state, "default", "c1");
    at("create").begin(&created.hashes()).unwrap();
    at("start")
        .append(&AuditRecord::new(AuditEvent::Start, &s))
        .unwrap();
    at("guard")
        .append_value(&serde_json::json!({"event": "egress-connection", "namespace": "default", "container_id": "c1"}))
        .unwrap();
    at("guard")
        .append(&AuditRecord::new(AuditEvent::Exit, &s))
        .unwrap();
    at("delete")
        .seal(&AuditRecord::new(AuditEvent::Delete, &s), signer)
        .unwrap();
    log.path().to_path_buf()
}

#[test]
fn records_written_by_several_processes_are_sealed_by_delete_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (signer, public) = signer(dir.path());
    let log = lifecycle(dir.path(), Some(&signer));
    let summary = verify(&log, Some(public)).unwrap();
    assert_eq!(summary.signatures.unwrap().sealed, 1);
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "delete");
    assert_eq!(last["sig"]["records"], 5, "{last}");
}

#[test]
fn without_a_key_the_final_record_is_a_plain_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = lifecycle(dir.path(), None);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("\"sig\""), "{text}");
    verify(&log, None).unwrap();
}

#[test]
fn concurrent_writers_keep_the_hashes_in_log_order() {
    let dir = tempfile::tempdir().unwrap();
    let (signer, public) = signer(dir.path());
    let log = AuditLog::new(dir.path().join("audit.jsonl"));
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let s = Arc::new(subject("c1"));
    StateTrail::new(log.clone(), &state, "default", "c1")
        .append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (log, state, s) = (log.clone(), state.clone(), s.clone());
            std::thread::spawn(move || {
                for _ in 0..20 {
                    StateTrail::new(log.clone(), &state, "default", "c1")
                        .append(&AuditRecord::new(AuditEvent::Update, &s))
                        .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    StateTrail::new(log.clone(), &state, "default", "c1")
        .seal(&AuditRecord::new(AuditEvent::Delete, &s), Some(&signer))
        .unwrap();
    let summary = verify(log.path(), Some(public)).unwrap();
    assert_eq!(summary.signatures.unwrap().sealed, 1);
    let text = std::fs::read_to_string(log.path()).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["sig"]["records"], 1 + 8 * 20 + 1, "{last}");
}

#[test]
fn a_record_after_the_seal_is_written_but_not_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let (signer, _) = signer(dir.path());
    lifecycle(dir.path(), Some(&signer));
    let s = subject("c1");
    let log = AuditLog::new(dir.path().join("audit.jsonl"));
    let state = dir.path().join("state");
    let before = std::fs::read_to_string(state.join(TRAIL)).unwrap();
    StateTrail::new(log, &state, "default", "c1")
        .append(&AuditRecord::new(AuditEvent::Update, &s))
        .unwrap();
    assert_eq!(std::fs::read_to_string(state.join(TRAIL)).unwrap(), before);
}
