//! The metrics exporter (`policy_injector::metrics`, behind `policy-injector audit metrics`)
//! counts what this writer writes: records made with the shim's own types and appended by
//! [`AuditLog`], rotations included, folded line by line. An event or field renamed here without
//! the exporter following breaks this test, not a dashboard.

use policy_injector::metrics::Metrics;
use policy_injector::{HardenError, Rejection, Rule};

use super::test_support::{egress_connection, exit, files_of, pod_subject as subject};
use super::*;
use crate::egress::audit::{AuditLine, Verdict};
use crate::egress::{EgressAudit, EgressEvent};

fn fold(log: &AuditLog) -> Metrics {
    let mut m = Metrics::new();
    for f in files_of(log.path()) {
        m.begin_file(&f.display().to_string());
        let bytes = std::fs::read(&f).unwrap();
        for line in bytes.strip_suffix(b"\n").unwrap().split(|b| *b == b'\n') {
            m.line(line, true);
        }
    }
    m
}

#[test]
fn the_exporter_counts_what_the_shims_writer_writes() {
    let dir = tempfile::tempdir().unwrap();
    // Small files: the log rotates a few times along the way.
    let log = AuditLog::new(dir.path().join("audit.jsonl")).with_rotation(Rotation {
        max_size: 8 << 10,
        keep: 100,
    });
    let policy = "/etc/gvisor-hardened/policy.toml";
    let (pause, app) = (subject("pause", "pause"), subject("app", "pause"));
    for s in [&pause, &app] {
        log.append(&AuditRecord::new(AuditEvent::Create, s))
            .unwrap();
        log.append(&AuditRecord::new(AuditEvent::Start, s)).unwrap();
    }
    let rejected = HardenError::Rejected(vec![Rejection {
        rule: Rule::Mounts,
        field: "mounts[/host]".into(),
        reason: "bind of denied host path".into(),
    }]);
    for i in 0..40 {
        let s = subject(&format!("r{i}"), &format!("r{i}"));
        let mut rec = AuditRecord::new(AuditEvent::CreateRejected, &s);
        rec.error = Some(rejected.to_string());
        log.append(&rec).unwrap();
    }
    let egress = egress_connection("api.example.test", Verdict::Allowed, 300, 4000);
    log.append_value(&AuditLine::now("k8s.io", &egress))
        .unwrap();
    let restart = EgressAudit {
        event: EgressEvent::ForwarderReady {
            listen: "127.0.0.1:3128".into(),
            attempt: 2,
        },
        ..egress.clone()
    };
    log.append_value(&AuditLine::now("k8s.io", &restart))
        .unwrap();
    let mut oom = AuditRecord::new(AuditEvent::Exit, &app);
    oom.set_exit(&exit(ExitCause::Oom, 137));
    oom.output_truncated = Some(true);
    log.append(&oom).unwrap();
    let mut limit = AuditRecord::new(AuditEvent::Exit, &pause);
    limit.set_exit(&exit(ExitCause::IdleTimeout, 143));
    log.append(&limit).unwrap();
    assert!(
        PathBuf::from(format!("{}.1", log.path().display())).exists(),
        "the log never rotated"
    );

    let m = fold(&log);
    assert_eq!(m.containers_created.get(&[policy]), 2.0);
    assert_eq!(m.sandboxes_created.get(&[policy]), 1.0);
    assert_eq!(m.sandboxes_running.get(&[policy]), 0.0);
    assert_eq!(m.start_latency.count(&[policy]), 2);
    assert_eq!(m.refusals.get(&[policy, "mounts", "create"]), 40.0);
    assert_eq!(m.exits.get(&[policy, "oom"]), 1.0);
    assert_eq!(m.exits.get(&[policy, "idle-timeout"]), 1.0);
    assert_eq!(m.output_truncations.get(&[policy]), 1.0);
    let agent = "gvisor-hardened-agent";
    assert_eq!(
        m.egress_connections
            .get(&[agent, "allowed", "api.example.test:443", "api.example.test"]),
        1.0
    );
    assert_eq!(m.egress_bytes.get(&[agent, "down"]), 4000.0);
    assert_eq!(m.forwarder_restarts.get(&[agent]), 1.0);
    assert_eq!(m.unparsed_lines.get(&[]), 0.0);
    assert_eq!(m.chain_intact.get(&[]), 1.0);
    assert!(m.files_opened.get(&[]) >= 3.0, "{}", m.render());
}
