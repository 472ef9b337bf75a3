use serde_json::json;

use super::*;
use crate::audit_chain::{self, Origin, SealInput, Tail};

const A: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";
const ORIGIN: Origin<'static> = Origin {
    time: "2026-01-01T00:00:00.000Z",
    node: "n",
    policy_sha256: "",
};

/// Chained lines as the shim's writer appends them; `seal` signs the container's trail.
struct Log {
    lines: Vec<Vec<u8>>,
    trail: Vec<audit_chain::Digest>,
}

impl Log {
    fn new() -> Log {
        Log {
            lines: Vec::new(),
            trail: Vec::new(),
        }
    }

    fn push(&mut self, rec: serde_json::Value, seal: Option<&SigningKey>) {
        let body = serde_json::to_vec(&rec).unwrap();
        let last = self.lines.last().cloned();
        let tail = last.as_deref().map_or(Tail::Empty, Tail::Line);
        let next = audit_chain::next(tail, None);
        let input = seal.map(|key| SealInput {
            key,
            namespace: "k8s.io",
            container_id: "app",
            earlier: &self.trail,
        });
        let out = audit_chain::compose(tail, next, &ORIGIN, &body, input.as_ref()).unwrap();
        for l in out.bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            self.lines.push(l.to_vec());
        }
        if rec["container_id"] == "app" {
            self.trail.push(out.record);
        }
    }

    fn fold(&self, id: &str, ns: Option<&str>) -> Result<RunPredicate, RunError> {
        let mut f = RunFold::new(id, ns);
        for l in &self.lines {
            f.line(l);
        }
        f.finish()
    }
}

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

fn policy() -> serde_json::Value {
    json!({"path": "/etc/gvisor-hardened/policy.toml", "sha256": A, "mode": "enforce"})
}

fn lifecycle(event: &str, id: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut r = json!({"time": format!("2026-01-01T00:00:0{}.000Z", event.len() % 10),
        "event": event, "namespace": "k8s.io", "container_id": id,
        "pod": {"name": "agent", "sandbox_id": "pause"}, "policy": policy(),
        "oom": false, "timed_out": false, "process_limit_exceeded": false});
    for (k, v) in extra.as_object().unwrap() {
        r[k] = v.clone();
    }
    r
}

fn egress(sandbox: &str, verdict: &str, host: &str, up: u64) -> serde_json::Value {
    json!({"time": "2026-01-01T00:00:05.000Z", "event": "egress-connection",
        "namespace": "k8s.io", "sandbox_id": sandbox, "container_id": sandbox, "policy": "p",
        "host": host, "port": 443, "verdict": verdict, "rule": "r",
        "bytes_up": up, "bytes_down": 2 * up, "duration_ms": 1})
}

/// A pod's app container: created, started, reached one host and was refused another through
/// the pod's proxy, exited with an exit manifest, deleted (the signed final record).
fn pod_run() -> Log {
    let mut log = Log::new();
    log.push(lifecycle("create", "pause", json!({})), None);
    log.push(egress("pause", "allowed", "early.example", 1), None);
    log.push(
        lifecycle(
            "create",
            "app",
            json!({"image": "registry.example/agent@sha256:".to_string() + A,
                   "config_sha256": A, "runsc_args": ["--network=none"]}),
        ),
        None,
    );
    log.push(lifecycle("start", "app", json!({"pid": 42})), None);
    log.push(egress("pause", "allowed", "api.example", 10), None);
    log.push(egress("pause", "denied", "evil.example", 0), None);
    log.push(egress("other", "allowed", "not-ours.example", 99), None);
    log.push(
        lifecycle(
            "exit",
            "app",
            json!({"exit_status": 0, "exit_cause": "exited", "output_bytes": 12,
                "output_truncated": false,
                "output": {"complete": true, "discarded_bytes": 0,
                           "stdout": {"delivered_bytes": 12, "discarded_bytes": 0,
                                      "sha256": A, "marker_written": false}},
                "artifacts": {"manifest": {"path": "/var/log/gvisor-hardened/artifacts/app-exit.json",
                                           "sha256": A, "bytes": 10},
                              "start_sha256": A, "complete": true, "all_hashed": true,
                              "diff": {"exact": true, "added": 1, "modified": 0, "removed": 0,
                                       "added_paths": [], "modified_paths": [],
                                       "removed_paths": [], "truncated": false}}}),
        ),
        None,
    );
    log.push(egress("pause", "allowed", "after-exit.example", 5), None);
    log.push(lifecycle("delete", "app", json!({})), Some(&key()));
    log
}

#[test]
fn a_pods_run_is_folded_from_its_records_and_its_pods_egress_while_it_ran() {
    let run = pod_run().fold("app", None).unwrap();
    assert_eq!(run.sandbox.container_id, "app");
    assert_eq!(run.image_digest.as_deref(), Some(&*format!("sha256:{A}")));
    assert_eq!(run.config_sha256.as_deref(), Some(A));
    assert_eq!(run.policy, Some(policy()));
    let exit = run.exit.clone().unwrap();
    assert_eq!((exit.status, exit.cause.as_deref()), (0, Some("exited")));
    assert_eq!(
        run.output.as_ref().unwrap().stdout_sha256.as_deref(),
        Some(A)
    );
    let e = run.egress.clone().unwrap();
    assert_eq!(e.connections["allowed"], 1, "{e:?}");
    assert_eq!(e.connections["denied"], 1);
    assert_eq!((e.bytes_up, e.bytes_down), (10, 20));
    assert!(e.hosts_denied.contains("evil.example:443"));
    assert!(
        !e.hosts_allowed.contains("early.example:443"),
        "before the run"
    );
    assert!(!e.hosts_allowed.contains("not-ours.example:443"));
    assert_eq!(run.artifacts.manifest.as_ref().unwrap().sha256, A);
    assert_eq!(run.audit.records, 4, "create, start, exit, delete");
    assert_eq!(
        run.audit.key_id,
        crate::audit_chain::sign::key_id(&key().verifying_key())
    );
    assert!(!run.times.started.clone().unwrap().is_empty());
}

#[test]
fn a_run_without_its_signed_final_record_is_not_attested() {
    let mut log = pod_run();
    log.push(lifecycle("create", "app", json!({})), None);
    assert_eq!(
        log.fold("app", None).unwrap_err(),
        RunError::NotEnded { id: "app".into() }
    );
    assert_eq!(
        log.fold("nope", None).unwrap_err(),
        RunError::NotFound("nope".into())
    );
}

#[test]
fn the_same_id_in_two_namespaces_needs_a_namespace() {
    let mut log = pod_run();
    let mut other = lifecycle("create", "app", json!({}));
    other["namespace"] = json!("default");
    log.push(other, None);
    assert!(matches!(
        log.fold("app", None),
        Err(RunError::Ambiguous { .. })
    ));
    assert!(log.fold("app", Some("k8s.io")).is_ok());
}

fn written() -> Written {
    Written {
        subjects: vec![ResourceDescriptor {
            name: "/data/out.txt".into(),
            digest: [("sha256".to_string(), A.to_string())].into(),
        }],
        unattested: vec![],
        exact: true,
    }
}

#[test]
fn a_signed_statement_verifies_and_a_changed_subject_does_not() {
    let run = pod_run().fold("app", None).unwrap();
    let st = statement(run, written()).unwrap();
    let env = sign(&st, &key());
    let back = verify(&env, &key().verifying_key()).unwrap();
    assert_eq!(back, st);
    assert_eq!(back.predicate["exit"]["cause"], "exited");

    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let payload = String::from_utf8(b64.decode(&env.payload).unwrap()).unwrap();
    let mut tampered = env.clone();
    tampered.payload = b64.encode(payload.replace(A, &A.replace('2', "3")));
    assert!(matches!(
        verify(&tampered, &key().verifying_key()),
        Err(AttestationError::Dsse(DsseError::Mismatch(_)))
    ));
}

#[test]
fn a_run_that_wrote_nothing_has_no_statement() {
    let run = pod_run().fold("app", None).unwrap();
    let none = Written {
        subjects: vec![],
        ..written()
    };
    assert!(matches!(
        statement(run, none),
        Err(AttestationError::NoSubject(_))
    ));
}
