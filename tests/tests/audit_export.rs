//! `policy-injector audit export` over a log the shim's own writer wrote: records made with the
//! shim's types (a create whose decisions come from the real `harden`, with a planted secret in
//! the environment; start, exec, exits by limit, a refusal, a failure, egress connections of
//! every verdict, lookups, the forwarder's and proxy's events, the byte cap), appended by
//! `AuditLog` with rotation. Every record is exported in both formats; every OCSF line validates
//! against OCSF 1.8.0's published schema for its class (all six classes the mapping uses are
//! present), every OTel line parses as OTLP LogsData, no planted
//! value is anywhere, and `--follow` writes records appended after it started, across a
//! rotation. No containerd, no runsc: files only.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use gvisor_hardened_core::audit::test_support::{egress_connection, exit, pod_subject as subject};
use gvisor_hardened_core::audit::{AuditEvent, AuditLog, AuditRecord, Rotation};
use gvisor_hardened_core::egress::audit::{AuditLine, LookupSource, Verdict};
use gvisor_hardened_core::egress::{EgressAudit, EgressEvent};
use gvisor_hardened_core::exit::ExitCause;
use gvisor_hardened_tests::audit_tools::{
    outcome, policy_injector_binary, validate_against_schema, validate_ocsf, validate_otlp,
};
use policy_injector::{harden, Context, HardenError, Policy, Rejection, Rule};
use serde_json::json;

const SECRET: &str = "planted-secret-4b1d9e";
const OCSF_VERSION: &str = "1.8.0";

/// The proxy's record of a CONNECT to `host`, with what the exporter maps besides the core's
/// fixture: the resolved address, the rule, the reason and the SNI.
fn connection(verdict: Verdict, host: &str, reason: Option<&str>) -> EgressAudit {
    let mut rec = egress_connection(host, verdict, 300, 4000);
    if let EgressEvent::Connection(c) = &mut rec.event {
        c.resolved = (verdict != Verdict::Denied).then(|| "192.0.2.1:443".parse().unwrap()); // net-scan: data
        c.rule = if verdict == Verdict::Denied {
            "not-allowlisted".into()
        } else {
            format!("{host}:443")
        };
        c.reason = reason.map(str::to_string);
        c.sni = Some(host.into());
        c.duration_ms = 20;
    }
    rec
}

/// One sandbox's life and its neighbours', as the shim writes them.
fn write_a_run(log: &AuditLog) {
    let mut policy = Policy::default();
    policy.environment.defaults = [(
        "PIP_INDEX_URL".to_string(),
        format!("https://ci:{SECRET}@pypi.internal.test/simple"), // net-scan: data
    )]
    .into_iter()
    .collect();
    let spec = json!({
        "ociVersion": "1.0.2-dev",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/",
                    "env": ["PATH=/bin", format!("API_KEY={SECRET}")]},
        "root": {"path": "rootfs"},
        "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"},
                                 {"type": "mount"}, {"type": "network"}]}
    });
    let hardened = harden(&spec, &policy, &Context::default()).unwrap();
    let (pause, app) = (subject("pause", "pause"), subject("app", "pause"));
    for s in [&pause, &app] {
        let mut create = AuditRecord::new(AuditEvent::Create, s);
        create.decisions = Some(&hardened.decisions);
        log.append(&create).unwrap();
        let mut start = AuditRecord::new(AuditEvent::Start, s);
        start.pid = Some(4242);
        log.append(&start).unwrap();
    }
    let mut exec = AuditRecord::new(AuditEvent::Exec, &app);
    exec.exec_id = Some("e1");
    log.append(&exec).unwrap();
    let mut exec_exit = AuditRecord::new(AuditEvent::ExecExit, &app);
    exec_exit.exec_id = Some("e1");
    exec_exit.pid = Some(4300);
    exec_exit.set_exit(&exit(ExitCause::Exited, 0));
    log.append(&exec_exit).unwrap();
    for (verdict, host, reason) in [
        (Verdict::Allowed, "api.example.test", None),
        (
            Verdict::Denied,
            "exfil.example.test",
            Some("not on the egress allowlist"),
        ),
        (Verdict::Cut, "api.example.test", Some("byte cap reached")),
        (
            Verdict::Failed,
            "down.example.test",
            Some("connection refused"),
        ),
    ] {
        let rec = connection(verdict, host, reason);
        log.append_value(&AuditLine::now("k8s.io", &rec)).unwrap();
    }
    // The proxy's other records: lookups (DNS, the policy's hosts table, a failed one), the
    // forwarder starting, dying and starting again, the byte cap, credentials injected, the
    // proxy's stop.
    let others = [
        EgressEvent::Lookup {
            host: "api.example.test".into(),
            source: LookupSource::Dns,
            answers: vec![
                "192.0.2.1".parse().unwrap(),   // net-scan: data
                "2001:db8::1".parse().unwrap(), // net-scan: data
            ],
            error: None,
        },
        EgressEvent::Lookup {
            host: "pinned.example.test".into(),
            source: LookupSource::Static,
            answers: vec!["192.0.2.9".parse().unwrap()], // net-scan: data
            error: None,
        },
        EgressEvent::Lookup {
            host: "down.example.test".into(),
            source: LookupSource::Dns,
            answers: vec![],
            error: Some("no addresses".into()),
        },
        EgressEvent::ForwarderReady {
            listen: "127.0.0.1:3128".into(), // net-scan: data
            attempt: 1,
        },
        EgressEvent::ForwarderDied {
            reason: "exited: signal 9".into(),
            attempt: 1,
        },
        EgressEvent::ForwarderReady {
            listen: "127.0.0.1:3128".into(), // net-scan: data
            attempt: 2,
        },
        EgressEvent::ByteCapCrossed {
            max_bytes: 1 << 20,
            used: (1 << 20) + 4000,
        },
        // A credential injected by a rule, and one without rules (any request).
        EgressEvent::CredentialInjected {
            host: "api.example.test".into(),
            port: 443,
            header: "x-api-key".into(),
            rule: Some("POST /v1/messages".into()),
            method: "POST".into(),
            replaced_workload_header: true,
        },
        EgressEvent::CredentialInjected {
            host: "git.example.test".into(),
            port: 443,
            header: "authorization".into(),
            rule: None,
            method: "PROPFIND".into(),
            replaced_workload_header: false,
        },
        EgressEvent::ProxyStopped,
    ];
    for event in others {
        let rec = EgressAudit {
            event,
            ..connection(Verdict::Allowed, "x", None)
        };
        log.append_value(&AuditLine::now("k8s.io", &rec)).unwrap();
    }
    let rejected_subject = subject("bad", "bad");
    let mut rejected = AuditRecord::new(AuditEvent::CreateRejected, &rejected_subject);
    rejected.error = Some(
        HardenError::Rejected(vec![Rejection {
            rule: Rule::Mounts,
            field: "mounts[/host]".into(),
            reason: "bind of denied host path".into(),
        }])
        .to_string(),
    );
    log.append(&rejected).unwrap();
    let mut failed = AuditRecord::new(AuditEvent::CreateFailed, &rejected_subject);
    failed.error = Some("runsc create: exit status 1".into());
    log.append(&failed).unwrap();
    log.append(&AuditRecord::new(AuditEvent::Timeout, &app))
        .unwrap();
    let mut app_exit = AuditRecord::new(AuditEvent::Exit, &app);
    app_exit.pid = Some(4242);
    app_exit.set_exit(&exit(ExitCause::Timeout, 137));
    log.append(&app_exit).unwrap();
    let mut pause_exit = AuditRecord::new(AuditEvent::Exit, &pause);
    pause_exit.set_exit(&exit(ExitCause::Oom, 137));
    log.append(&pause_exit).unwrap();
    for s in [&app, &pause] {
        log.append(&AuditRecord::new(AuditEvent::Delete, s))
            .unwrap();
    }
}

fn export(format: &str, log: &Path, out: &Path) -> String {
    let o = Command::new(policy_injector_binary().unwrap())
        .args(["audit", "export", "--format", format, "--log"])
        .arg(log)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    std::fs::write(out, &o.stdout).unwrap();
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn ocsf_and_otel_exports_of_the_shims_records_fit_the_published_schemas() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path().join("audit.jsonl")).with_rotation(Rotation {
        max_size: 16 << 10,
        keep: 100,
    });
    write_a_run(&log);
    assert!(
        dir.path().join("audit.jsonl.1").exists(),
        "the log never rotated"
    );
    let written: String = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    assert!(
        !written.contains(SECRET),
        "the log holds the planted secret"
    );
    let files: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let refs: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    validate_against_schema(&refs).unwrap();

    let ocsf_file = dir.path().join("export.ocsf");
    let ocsf = export("ocsf", log.path(), &ocsf_file);
    let otel_file = dir.path().join("export.otel");
    let otel = export("otel", log.path(), &otel_file);
    for (name, text) in [("ocsf", &ocsf), ("otel", &otel)] {
        assert!(
            !text.contains(SECRET),
            "the {name} export holds the planted secret"
        );
    }
    // Every record has a class in both formats.
    let records = written.lines().count();
    assert_eq!(ocsf.lines().count(), records);
    assert_eq!(otel.lines().count(), records);
    let count = |text: &str, what: &str| text.matches(what).count();
    let genesis = count(&written, "\"event\":\"genesis\"");
    for (class, n) in [
        (1007, 12),
        (1008, genesis),
        (2004, 3),
        (4001, 3),
        (4002, 2),
        (4003, 3),
        (6002, 4),
    ] {
        assert_eq!(
            count(&ocsf, &format!("\"class_uid\":{class},")),
            n,
            "OCSF class {class}"
        );
        assert_eq!(
            count(
                &otel,
                &format!(
                    "\"key\":\"gvisor_hardened.ocsf.class_uid\",\"value\":{{\"intValue\":\"{class}\"}}"
                )
            ),
            n,
            "OTel records naming OCSF class {class}"
        );
    }

    let checked = validate_ocsf(OCSF_VERSION, &ocsf_file).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", checked.trim());
    let parsed = validate_otlp(&otel_file).unwrap_or_else(|e| panic!("{e}"));
    println!("{}", parsed.trim());
}

#[test]
fn export_follow_writes_records_appended_after_it_started_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path().join("audit.jsonl")).with_rotation(Rotation {
        max_size: 4 << 10,
        keep: 100,
    });
    let s = subject("app", "app");
    log.append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();
    let mut child = Command::new(policy_injector_binary().unwrap())
        .args([
            "audit",
            "export",
            "--format",
            "otel",
            "--follow",
            "--poll-ms",
            "20",
        ])
        .arg("--log")
        .arg(log.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| {
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("no line for {what}"))
    };
    assert!(next("genesis").contains("gvisor_hardened.genesis"));
    assert!(next("create").contains("gvisor_hardened.create"));
    // Enough starts to rotate the 4 KiB file a few times while the follower runs.
    for pid in 0..20 {
        let mut start = AuditRecord::new(AuditEvent::Start, &s);
        start.pid = Some(1000 + pid);
        log.append(&start).unwrap();
    }
    assert!(dir.path().join("audit.jsonl.2").exists(), "no rotation");
    let mut pids = Vec::new();
    while pids.len() < 20 {
        let line = next("a start");
        if line.contains("gvisor_hardened.genesis") {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let attrs = v["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["attributes"]
            .as_array()
            .unwrap()
            .clone();
        let pid = attrs
            .iter()
            .find(|a| a["key"] == "process.pid")
            .map(|a| a["value"]["intValue"].as_str().unwrap().to_string())
            .unwrap();
        pids.push(pid.parse::<u32>().unwrap());
    }
    assert_eq!(
        pids,
        (1000..1020).collect::<Vec<_>>(),
        "each once, in order"
    );
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let _ = outcome(&out);
}
