//! Faults: the audit log cannot take the Create line (a directory in its place, a read-only
//! filesystem, a full disk). The audit is part of the runtime's contract, so Create must fail
//! closed with an error naming the audit log, start nothing and leave nothing behind.

use std::fs;
use std::path::Path;

use gvisor_hardened_tests::fault::{audit_lines, TestPolicy, TmpfsMount};
use gvisor_hardened_tests::*;

fn containerd() -> (Containerd, TestImage) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    (c, image)
}

/// Runs a task whose policy logs to `audit`, and checks that Create failed closed because of
/// it. Returns ctr's output.
fn run_must_fail_on_audit(c: &Containerd, image: &TestImage, audit: &Path) -> CommandOutput {
    let policy = TestPolicy::builder(c, &unique_id("audit"))
        .audit_path(audit)
        .write()
        .unwrap();
    let id = unique_id("audit");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh("echo the-sandbox-ran"),
        )
        .unwrap();
    assert!(
        !out.success(),
        "Create succeeded without its audit line: {out}"
    );
    assert!(!out.stdout.contains("the-sandbox-ran"), "{out}");
    assert!(
        out.stderr.contains("audit log") && out.stderr.contains(&*audit.to_string_lossy()),
        "the error must name the audit log {}: {out}",
        audit.display()
    );
    assert_nothing_left(c, &id, &policy.runtime());
    out
}

#[test]
fn audit_log_that_is_a_directory_fails_the_create_closed() {
    let (c, image) = containerd();
    let audit = c.dir().join("audit-is-a-dir");
    fs::create_dir(&audit).unwrap();
    let out = run_must_fail_on_audit(&c, &image, &audit);
    assert!(out.stderr.contains("Is a directory"), "{out}");
    assert_clean_shutdown(c);
}

#[test]
fn audit_log_on_a_read_only_filesystem_fails_the_create_closed() {
    let (c, image) = containerd();
    let ro = TmpfsMount::new(&c.dir().join("ro"), "ro,size=64k").unwrap();
    let audit = ro.path().join("audit.jsonl");
    let out = run_must_fail_on_audit(&c, &image, &audit);
    assert!(out.stderr.contains("Read-only file system"), "{out}");
    drop(ro);
    assert_clean_shutdown(c);
}

#[test]
fn audit_log_on_a_full_disk_fails_the_create_closed() {
    let (c, image) = containerd();
    let full = TmpfsMount::new(&c.dir().join("full"), "size=64k").unwrap();
    let audit = full.path().join("audit.jsonl");
    // An earlier line that fills its page exactly: no slack left for the next append.
    fs::write(&audit, padded_line(4096)).unwrap();
    full.fill("filler").unwrap();
    let out = run_must_fail_on_audit(&c, &image, &audit);
    assert!(out.stderr.contains("No space left on device"), "{out}");
    assert_eq!(audit_lines(&audit).len(), 1, "the log changed");
    drop(full);
    assert_clean_shutdown(c);
}

/// A disk that fills up in the middle of the Create line: the kernel takes the part that fits
/// and refuses the rest (a short write). The Create must fail, and the log must not be left
/// with a torn line (the next record would be glued to it and every JSONL reader would choke).
#[test]
fn audit_log_filling_up_mid_line_fails_the_create_and_leaves_whole_lines() {
    let (c, image) = containerd();
    let full = TmpfsMount::new(&c.dir().join("nearly-full"), "size=64k").unwrap();
    let audit = full.path().join("audit.jsonl");
    // 200 bytes of slack in the log's last page: less than any Create line.
    fs::write(&audit, padded_line(4096 - 200)).unwrap();
    full.fill("filler").unwrap();
    run_must_fail_on_audit(&c, &image, &audit);
    let lines = audit_lines(&audit);
    let torn: Vec<_> = lines.iter().filter(|l| !l.is_object()).collect();
    assert!(
        torn.is_empty(),
        "audit log holds torn lines after a failed append: {torn:?}"
    );
    drop(full);
    assert_clean_shutdown(c);
}

/// One JSON line of exactly `len` bytes, newline included.
fn padded_line(len: usize) -> String {
    let overhead = r#"{"pad":""}"#.len() + 1;
    format!("{{\"pad\":\"{}\"}}\n", "x".repeat(len - overhead))
}
