use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::super::test_support::{files_of, subject, verify};
use super::super::{AuditEvent, AuditLog, AuditRecord, Rotation};
use super::*;

fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn small(path: &Path, max_size: u64, keep: u32) -> AuditLog {
    AuditLog::new(path).with_rotation(Rotation { max_size, keep })
}

#[test]
fn appended_records_form_an_intact_chain_with_the_hashes_returned() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path().join("audit.jsonl")).with_policy_sha256("cafe");
    let s = subject("c1");
    let mut hashes = Vec::new();
    for event in [AuditEvent::Create, AuditEvent::Start, AuditEvent::Exit] {
        hashes.push(log.append(&AuditRecord::new(event, &s)).unwrap());
    }
    let summary = verify(log.path(), None).unwrap();
    assert_eq!((summary.records, summary.last_seq), (4, Some(3)));
    assert!(summary.from_origin);
    let text = std::fs::read_to_string(log.path()).unwrap();
    let on_disk: Vec<Digest> = text
        .lines()
        .skip(1)
        .map(|l| audit_chain::hash_line(l.as_bytes()))
        .collect();
    assert_eq!(hashes, on_disk);
    let genesis = &lines(log.path())[0];
    assert_eq!(genesis["policy_sha256"], "cafe");
    assert_eq!(genesis["node"], hostname());
}

#[test]
fn a_full_file_is_rotated_and_the_new_file_links_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = small(&path, 2048, 3);
    let s = subject("c1");
    for _ in 0..40 {
        log.append(&AuditRecord::new(AuditEvent::Exec, &s)).unwrap();
    }
    let files = files_of(&path);
    assert_eq!(
        files.len(),
        4,
        "keep = 3 rotated files plus the live one: {files:?}"
    );
    assert!(!numbered(&path, 4).exists());
    for f in &files {
        assert!(
            std::fs::metadata(f).unwrap().len() <= 2048,
            "{}",
            f.display()
        );
        assert_eq!(lines(f)[0]["event"], "genesis");
    }
    assert_eq!(lines(&path)[0]["reason"], "rotated");
    let summary = verify(&path, None).unwrap();
    assert!(!summary.from_origin, "the oldest files were dropped");
    assert_eq!(summary.files, 4);
}

#[test]
fn an_empty_live_file_after_a_crash_mid_rotation_links_to_path_1() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path);
    let s = subject("c1");
    log.append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();
    // A rotation that renamed the file and died before the next write.
    std::fs::rename(&path, numbered(&path, 1)).unwrap();
    log.append(&AuditRecord::new(AuditEvent::Start, &s))
        .unwrap();
    assert_eq!(lines(&path)[0]["reason"], "rotated");
    assert_eq!(verify(&path, None).unwrap().records, 4);
}

/// Waits until some process is blocked in `flock` on the inode `ino` (`/proc/locks` lists
/// waiters with `->`).
fn wait_for_lock_waiter(ino: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let needle = format!(":{ino} ");
    loop {
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        if locks
            .lines()
            .any(|l| l.contains("->") && l.contains(&needle))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no writer waited on the lock:\n{locks}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_writer_that_opened_the_file_before_a_rotation_appends_to_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path);
    let s = subject("c1");
    log.append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();

    // Another writer holds the lock; ours opens the file and blocks on it.
    let held = File::open(&path).unwrap();
    assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX) }, 0);
    let ino = held.metadata().unwrap().ino();
    let writer = {
        let log = log.clone();
        std::thread::spawn(move || {
            let s = subject("c1");
            log.append(&AuditRecord::new(AuditEvent::Start, &s))
        })
    };
    wait_for_lock_waiter(ino);
    // The lock holder rotates the file away, then lets go.
    std::fs::rename(&path, numbered(&path, 1)).unwrap();
    let rotated_before = std::fs::read(numbered(&path, 1)).unwrap();
    drop(held);
    writer.join().unwrap().unwrap();

    assert_eq!(
        std::fs::read(numbered(&path, 1)).unwrap(),
        rotated_before,
        "the writer appended to the file it had opened, not the one the path names"
    );
    let live = lines(&path);
    assert_eq!(live.len(), 2);
    assert_eq!(live[0]["event"], "genesis");
    assert_eq!(live[1]["event"], "start");
    verify(&path, None).unwrap();
}

#[test]
fn a_cut_last_line_is_ended_and_a_new_segment_begins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path);
    let s = subject("c1");
    log.append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    log.append(&AuditRecord::new(AuditEvent::Start, &s))
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let all: Vec<&str> = text.lines().collect();
    assert_eq!(all.len(), 4, "{text}");
    let g: serde_json::Value = serde_json::from_str(all[2]).unwrap();
    assert_eq!(g["reason"], "after-cut-line");
    assert_eq!(
        g["prev"],
        audit_chain::hash_line(all[1].as_bytes()).to_string()
    );
    let b = verify(&path, None).unwrap_err();
    assert_eq!(b.at.line, 2, "{b}");
}

#[test]
fn a_record_longer_than_a_read_chunk_is_chained_correctly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::new(&path);
    let s = subject("c1");
    let mut big = AuditRecord::new(AuditEvent::CreateFailed, &s);
    big.error = Some("x".repeat(3 * TAIL_CHUNK as usize));
    log.append(&big).unwrap();
    log.append(&AuditRecord::new(AuditEvent::Delete, &s))
        .unwrap();
    assert_eq!(verify(&path, None).unwrap().records, 3);
}

#[test]
fn a_failed_append_leaves_the_log_as_it_was() {
    // /dev/full takes no byte: the append fails, and a regular file would be cut back.
    let s = subject("c1");
    let err = AuditLog::new("/dev/full")
        .append(&AuditRecord::new(AuditEvent::Create, &s))
        .unwrap_err();
    assert!(err.to_string().contains("/dev/full"), "{err}");
}

/// 24 threads, each appending through its own descriptor as a shim would, with rotation every
/// few dozen records: every record lands exactly once, in one intact chain.
#[test]
fn concurrent_writers_with_rotation_keep_one_intact_chain() {
    const WRITERS: usize = 24;
    const EACH: usize = 25;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = small(&path, 16 << 10, 1000);
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let log = &log;
            scope.spawn(move || {
                let s = subject(&format!("w{w}"));
                for i in 0..EACH {
                    let mut r = AuditRecord::new(AuditEvent::Exec, &s);
                    r.pid = Some(i as u32);
                    log.append(&r).unwrap();
                }
            });
        }
    });
    let files = files_of(&path);
    assert!(
        files.len() > 3,
        "rotation happened during the run: {files:?}"
    );
    let summary = verify(&path, None).unwrap();
    assert!(summary.from_origin);
    let records: Vec<serde_json::Value> = files.iter().flat_map(|f| lines(f)).collect();
    let non_genesis: Vec<&serde_json::Value> =
        records.iter().filter(|r| r["event"] != "genesis").collect();
    assert_eq!(non_genesis.len(), WRITERS * EACH);
    assert_eq!(summary.records as usize, records.len());
    for w in 0..WRITERS {
        let pids: Vec<u64> = non_genesis
            .iter()
            .filter(|r| r["container_id"] == format!("w{w}"))
            .map(|r| r["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids, (0..EACH as u64).collect::<Vec<_>>(), "writer w{w}");
    }
}
