//! `policy-injector audit export` as a command: its exit codes (3 after the export when the chain
//! is broken), its redaction of a log written before the writer redacted, and a follow that ends
//! when its reader goes away. An intact log exits 0 in tests/tests/audit_export.rs. The mappings are
//! the library's unit tests; the schemas are checked in tests/tests/audit_export.rs.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_policy-injector"))
}

const OLD_CREATE: &str = r#"{"seq":1,"prev":"00","time":"2026-12-03T08:00:00.000Z","event":"create","namespace":"default","container_id":"c1","policy":{"path":"/p.toml","sha256":"","mode":"enforce"},"decisions":[{"rule":"environment","field":"process.env[PIP_INDEX_URL]","action":"added","before":null,"after":"PIP_INDEX_URL=https://u:planted-secret-77@pypi.test/simple","reason":"not set by the spec: environment.defaults"}],"oom":false,"timed_out":false,"process_limit_exceeded":false}"#; // net-scan: data

/// The line is exported, and since it is no chained record the status says so.
#[test]
fn an_old_logs_env_values_are_redacted_in_both_formats() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, format!("{OLD_CREATE}\n")).unwrap();
    for format in ["ocsf", "otel"] {
        let out = bin()
            .args(["audit", "export", "--format", format])
            .arg(&log)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(!text.contains("planted-secret-77"), "{format}: {text}");
        assert!(
            text.contains("PIP_INDEX_URL=<redacted>"),
            "{format}: {text}"
        );
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(stderr.contains("1 exported"), "{stderr}");
        assert!(stderr.contains("chain broken: "), "{stderr}");
    }
}

#[test]
fn a_missing_file_exits_1_naming_it() {
    let out = bin()
        .args([
            "audit",
            "export",
            "--format",
            "ocsf",
            "/nonexistent/audit.jsonl",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("/nonexistent/audit.jsonl"), "{stderr}");
}

#[test]
fn follow_needs_the_live_log() {
    let out = bin()
        .args(["audit", "export", "--format", "otel", "--follow", "x.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error: {out:?}");
}

#[test]
fn a_follow_ends_with_exit_1_when_its_reader_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.jsonl");
    std::fs::write(&log, format!("{OLD_CREATE}\n")).unwrap();
    let mut child = bin()
        .args([
            "audit",
            "export",
            "--format",
            "ocsf",
            "--follow",
            "--poll-ms",
            "10",
            "--log",
        ])
        .arg(&log)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.contains("\"class_uid\":1007"), "{first}");
    // The reader is gone (dropped above); the next record's write fails.
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        writeln!(f, "{OLD_CREATE}").unwrap();
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "still following with no reader");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("writing to stdout"), "{stderr}");
}
