//! Signed trails: wrong key, altered, removed and added records, a cut tail, each caught even
//! when the chain itself was recomputed.

use super::sign::{self, SigFailure, SigningKey};
use super::tests::{at, kind, rec, Log, ORIGIN};
use super::verify::verify_all;
use super::*;

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// Two sandboxes interleaved, each sealed by its delete; a rejected container between them.
fn signed_log(k: &SigningKey) -> Log {
    let mut log = Log::new();
    let mut a = vec![log.append(&rec("create", "a"))];
    let mut b = vec![log.append(&rec("create", "b"))];
    a.push(log.append(&rec("start", "a")));
    log.append(&rec("create-rejected", "r"));
    b.push(log.append(&rec("start", "b")));
    a.push(log.append(&rec("exit", "a")));
    let seal = |earlier: &[Digest]| -> Vec<Digest> { earlier.to_vec() };
    let ea = seal(&a);
    log.append_sealed(
        &rec("delete", "a"),
        Some(&SealInput {
            key: k,
            namespace: "default",
            container_id: "a",
            earlier: &ea,
        }),
    );
    b.push(log.append(&rec("exit", "b")));
    log.rotate();
    log.append_sealed(
        &rec("delete", "b"),
        Some(&SealInput {
            key: k,
            namespace: "default",
            container_id: "b",
            earlier: &b,
        }),
    );
    log
}

fn sig_failure(r: Result<Summary, Break>) -> (Location, SigFailure) {
    match kind(r) {
        (loc, BreakKind::Signature { failure, .. }) => (loc, failure),
        other => panic!("expected a signature failure, got {other:?}"),
    }
}

#[test]
fn signed_trails_verify_with_the_right_key() {
    let k = key(7);
    let log = signed_log(&k);
    let s = log.verify_with(Some(k.verifying_key()), false).unwrap();
    let sigs = s.signatures.unwrap();
    assert_eq!((sigs.sealed, sigs.standalone, sigs.partial), (2, 1, 0));
    // The signed line is still a chained JSON record, sig last.
    let last = log.files[1]
        .strip_suffix(b"\n")
        .unwrap()
        .rsplit(|b| *b == b'\n')
        .next()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(last).unwrap();
    assert_eq!(v["sig"]["records"], 4);
    assert_eq!(v["sig"]["alg"], "ed25519");
    // And the chain alone verifies without a key.
    assert!(log.verify().unwrap().signatures.is_none());
}

#[test]
fn a_wrong_key_is_named() {
    let log = signed_log(&key(7));
    let (_, f) = sig_failure(log.verify_with(Some(key(8).verifying_key()), false));
    assert!(matches!(f, SigFailure::WrongKey { .. }), "{f:?}");
}

#[test]
fn a_forged_signature_with_the_right_key_id_does_not_verify() {
    // An attacker rewrites a sandbox's history, recomputes the chain and re-signs with their
    // own key but copies the expected key_id.
    let real = key(7);
    let forger = key(9);
    let mut log = signed_log(&forger);
    let real_id = sign::key_id(&real.verifying_key());
    let forged_id = sign::key_id(&forger.verifying_key());
    for f in &mut log.files {
        *f = String::from_utf8(f.clone())
            .unwrap()
            .replace(&forged_id, &real_id)
            .into_bytes();
    }
    let (_, f) = sig_failure(rechain(&log).verify_with(Some(real.verifying_key()), false));
    assert_eq!(f, SigFailure::Mismatch);
}

/// Recomputes every link (what anyone with write access can do): only signatures are left to
/// catch an edit.
fn rechain(log: &Log) -> Log {
    let mut out = Log::new();
    for (i, f) in log.files.iter().enumerate() {
        if i > 0 {
            out.rotate();
        }
        for line in f.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            if v["event"] == "genesis" {
                continue;
            }
            let body = strip_link(line);
            let rotated = out.rotated_last();
            let tail = out.tail();
            let n = next(tail, rotated.as_deref());
            // Re-link without re-signing: the sig member rides along in the body.
            let bytes = compose(tail, n, &ORIGIN, &body, None).unwrap().bytes;
            out.files.last_mut().unwrap().extend_from_slice(&bytes);
        }
    }
    out
}

/// A chained line without its `seq` and `prev` members.
fn strip_link(line: &[u8]) -> Vec<u8> {
    let s = std::str::from_utf8(line).unwrap();
    let rest = &s[s.find(",\"time\"").unwrap() + 1..];
    format!("{{{rest}").into_bytes()
}

#[test]
fn an_altered_record_fails_its_sandbox_signature_even_with_the_chain_recomputed() {
    let k = key(7);
    let mut log = signed_log(&k);
    let text = String::from_utf8(log.files[0].clone()).unwrap();
    log.files[0] = text
        .replacen(
            "\"event\":\"start\",\"namespace\":\"default\",\"container_id\":\"a\"",
            "\"event\":\"start\",\"namespace\":\"default\",\"container_id\":\"a\",\"note\":\"x\"",
            1,
        )
        .into_bytes();
    assert!(
        log.verify().is_err(),
        "the plain chain catches the naive edit"
    );
    let (loc, f) = sig_failure(rechain(&log).verify_with(Some(k.verifying_key()), false));
    assert_eq!(f, SigFailure::Mismatch);
    assert_eq!(loc, at(0, 8), "reported at sandbox a's final record");
}

#[test]
fn a_removed_record_fails_its_sandbox_signature_even_with_the_chain_recomputed() {
    let k = key(7);
    let mut log = signed_log(&k);
    // b's exit, after a's final record: a removal before it would also move a's final record,
    // whose signature pins its seq and prev.
    let lines: Vec<Vec<u8>> = log
        .lines(0)
        .into_iter()
        .filter(|l| {
            !String::from_utf8_lossy(l)
                .contains("\"event\":\"exit\",\"namespace\":\"default\",\"container_id\":\"b\"")
        })
        .collect();
    log.set_lines(0, lines);
    let (_, f) = sig_failure(rechain(&log).verify_with(Some(k.verifying_key()), false));
    assert_eq!(
        f,
        SigFailure::Count {
            signed: 4,
            found: 3
        }
    );
}

#[test]
fn a_cut_tail_leaves_a_sandbox_without_its_signed_final_record() {
    let k = key(7);
    let mut log = signed_log(&k);
    log.files.pop();
    let (loc, kind) = kind(log.verify_with(Some(k.verifying_key()), false));
    assert_eq!(loc, at(0, 3), "named at sandbox b's create");
    match &kind {
        BreakKind::Unsealed {
            sandbox,
            last_event,
            ..
        } => {
            assert_eq!(sandbox, "default/b");
            assert_eq!(last_event, "exit");
        }
        other => panic!("{other:?}"),
    }
    let text = Break { at: loc, kind }.to_string();
    assert!(text.contains("still running"), "{text}");
    // A live log may hold running sandboxes: --allow-open lists them instead.
    let s = log.verify_with(Some(k.verifying_key()), true).unwrap();
    assert_eq!(s.signatures.unwrap().open, vec!["default/b".to_string()]);
}

#[test]
fn a_record_after_its_sandbox_was_sealed_is_uncovered() {
    let k = key(7);
    let mut log = signed_log(&k);
    log.append(&rec("exec", "a"));
    let (_, kind) = kind(log.verify_with(Some(k.verifying_key()), false));
    assert!(matches!(kind, BreakKind::Uncovered { .. }), "{kind:?}");
}

#[test]
fn sandboxes_created_before_the_first_file_given_are_partial_not_failures() {
    let k = key(7);
    let log = signed_log(&k);
    let f1 = log.files[1].clone();
    let s = verify_all(&[("f1", &f1)], Some(k.verifying_key()), false).unwrap();
    assert_eq!(s.signatures.unwrap().partial, 1);
}

#[test]
fn the_sig_member_must_be_last_and_as_written() {
    let k = key(7);
    let mut log = signed_log(&k);
    let text = String::from_utf8(log.files[1].clone()).unwrap();
    log.files[1] = text
        .replace("{\"alg\":\"ed25519\",", "{ \"alg\":\"ed25519\",")
        .into_bytes();
    let (_, f) = sig_failure(rechain(&log).verify_with(Some(k.verifying_key()), false));
    assert!(matches!(f, SigFailure::Malformed(_)), "{f:?}");
}

#[test]
fn keys_round_trip_through_pem() {
    let (private, public) = sign::key_pair_pem([3; 32]);
    assert!(private.starts_with("-----BEGIN PRIVATE KEY-----"));
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"));
    let k = sign::signing_key_from_pem(&private).unwrap();
    assert_eq!(
        sign::verifying_key_from_pem(&public).unwrap(),
        k.verifying_key()
    );
    assert!(matches!(
        sign::signing_key_from_pem(&public),
        Err(SigningError::PrivateKey(_))
    ));
    assert!(matches!(
        sign::verifying_key_from_pem("junk"),
        Err(SigningError::PublicKey(_))
    ));
}
