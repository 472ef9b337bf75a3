//! The walk against hostile trees: each shape an untrusted sandbox can leave in its volume.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::{Duration, Instant};

use super::walk::{fstatat_nofollow, Walker};
use super::*;

fn mount(dir: &Path) -> WritableMount {
    WritableMount {
        source: dir.to_path_buf(),
        destination: "/data".into(),
    }
}

fn walk(dir: &Path, bounds: Bounds) -> Manifest {
    build_manifest(&[mount(dir)], &bounds)
}

fn roomy() -> Bounds {
    Bounds::new(100_000, 1 << 30, Duration::from_secs(30))
}

fn entry<'m>(m: &'m Manifest, path: &[u8]) -> &'m Entry {
    m.mounts[0]
        .entries
        .iter()
        .find(|e| e.path.0 == path)
        .unwrap_or_else(|| panic!("no entry {:?}", String::from_utf8_lossy(path)))
}

#[test]
fn regular_files_are_hashed_and_directories_walked() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("sub/deeper")).unwrap();
    std::fs::write(d.path().join("sub/deeper/hello"), b"hello").unwrap();
    std::fs::write(d.path().join("empty"), b"").unwrap();
    let m = walk(d.path(), roomy());
    assert!(m.complete && m.all_hashed, "{m:?}");
    let hello = entry(&m, b"sub/deeper/hello");
    assert_eq!(hello.kind, EntryKind::File);
    assert_eq!(hello.size, 5);
    assert_eq!(
        hello.sha256.as_deref(),
        Some("2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    );
    assert_eq!(
        entry(&m, b"empty").sha256.as_deref(),
        Some("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    );
    assert_eq!(entry(&m, b"sub").kind, EntryKind::Dir);
    assert_eq!(m.mounts[0].stats.files, 2);
    assert_eq!(m.mounts[0].stats.dirs, 2);
    let paths: Vec<_> = m.mounts[0].entries.iter().map(|e| e.path.clone()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "entries are sorted by path");
}

#[test]
fn symlinks_are_recorded_never_followed_and_loops_end() {
    let d = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), b"host file").unwrap();
    symlink(outside.path(), d.path().join("escape")).unwrap();
    symlink("loop-b", d.path().join("loop-a")).unwrap();
    symlink("loop-a", d.path().join("loop-b")).unwrap();
    symlink(".", d.path().join("self")).unwrap();
    symlink("..", d.path().join("up")).unwrap();
    let m = walk(d.path(), roomy());
    assert!(m.complete, "{m:?}");
    let escape = entry(&m, b"escape");
    assert_eq!(escape.kind, EntryKind::Symlink);
    assert_eq!(
        escape.target.as_ref().unwrap().0,
        outside.path().as_os_str().as_bytes()
    );
    assert_eq!(entry(&m, b"loop-a").target.as_ref().unwrap().0, b"loop-b");
    assert_eq!(m.mounts[0].stats.entries, 5, "nothing behind a link: {m:?}");
}

#[test]
fn fifos_and_sockets_are_recorded_never_opened() {
    let d = tempfile::tempdir().unwrap();
    let fifo = CString::new(d.path().join("fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo on a path we own.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let _sock = std::os::unix::net::UnixListener::bind(d.path().join("sock")).unwrap();
    // Opening the FIFO for reading would block forever: no writer ever comes.
    let m = walk(d.path(), Bounds::new(100, 1 << 20, Duration::from_secs(5)));
    assert!(m.stopped.is_none(), "{m:?}");
    assert_eq!(entry(&m, b"fifo").kind, EntryKind::Fifo);
    assert_eq!(entry(&m, b"sock").kind, EntryKind::Socket);
    assert_eq!(m.mounts[0].stats.special, 2);
}

/// mknod needs CAP_MKNOD: with the tests that need root (`host-tests`).
#[cfg(feature = "host-tests")]
#[test]
fn device_nodes_are_recorded_with_their_numbers_never_opened() {
    let d = tempfile::tempdir().unwrap();
    let dev = CString::new(d.path().join("null").as_os_str().as_bytes()).unwrap();
    // SAFETY: mknod on a path we own.
    assert_eq!(
        unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) },
        0,
        "mknod: {}",
        std::io::Error::last_os_error()
    );
    let m = walk(d.path(), Bounds::new(100, 1 << 20, Duration::from_secs(5)));
    let null = entry(&m, b"null");
    assert_eq!(null.kind, EntryKind::Char);
    assert_eq!(null.rdev.as_deref(), Some("1:3"));
    assert!(null.sha256.is_none() && null.not_hashed.is_none());
    assert_eq!(m.mounts[0].stats.special, 1);
}

#[test]
fn a_file_swapped_for_a_fifo_after_lstat_is_not_opened() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("x"), b"regular").unwrap();
    let dir = std::fs::File::open(d.path()).unwrap();
    let name = CString::new("x").unwrap();
    use std::os::fd::AsFd;
    let st = fstatat_nofollow(dir.as_fd(), &name).unwrap();
    // The sandbox replaces the file between the walk's lstat and its open.
    std::fs::remove_file(d.path().join("x")).unwrap();
    let path = CString::new(d.path().join("x").as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o644) }, 0);
    let bounds = Bounds::new(10, 1 << 20, Duration::from_secs(5));
    let mut walker = Walker::new(&bounds);
    let mut e = Entry::new(RawPath(b"x".to_vec()), EntryKind::File, &st);
    walker.hash_at(&mut e, dir.as_fd(), &name, &st);
    assert_eq!(e.not_hashed, Some(NotHashed::ChangedWhileHashed));
    assert!(e.sha256.is_none());
}

#[test]
fn a_file_that_grows_or_shrinks_under_the_read_has_no_hash() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("log");
    std::fs::write(&p, vec![b'a'; 100_000]).unwrap();
    let dir = std::fs::File::open(d.path()).unwrap();
    let name = CString::new("log").unwrap();
    use std::os::fd::AsFd;
    let bounds = Bounds::new(10, 1 << 30, Duration::from_secs(5));
    for new_len in [200_000u64, 50_000] {
        let st = fstatat_nofollow(dir.as_fd(), &name).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(new_len)
            .unwrap();
        let mut walker = Walker::new(&bounds);
        let mut e = Entry::new(RawPath(b"log".to_vec()), EntryKind::File, &st);
        walker.hash_at(&mut e, dir.as_fd(), &name, &st);
        assert_eq!(
            e.not_hashed,
            Some(NotHashed::ChangedWhileHashed),
            "{new_len}"
        );
    }
}

#[test]
fn a_file_written_during_the_walk_never_stretches_the_read() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("growing");
    std::fs::write(&p, vec![0u8; 4 << 20]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (p, stop) = (p.clone(), stop.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
            // Growth stops below the hashing budget: on a loaded machine an unbounded
            // writer could pass the budget before the walk's lstat, and the file would
            // be named unhashed, which is right but not what this test is about.
            let mut grown = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && grown < 48 << 20 {
                f.write_all(&[1u8; 64 << 10]).unwrap();
                grown += 64 << 10;
            }
        })
    };
    let budget = 64 << 20;
    let m = walk(d.path(), Bounds::new(10, budget, Duration::from_secs(10)));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let e = entry(&m, b"growing");
    assert!(m.stopped.is_none(), "{m:?}");
    // Only what lstat saw is read, however fast the file grows.
    assert!(m.mounts[0].stats.hashed_bytes <= e.size, "{m:?}");
    assert!(m.mounts[0].stats.hashed_bytes >= 4 << 20, "{m:?}");
    assert!(e.sha256.is_some() != e.not_hashed.is_some(), "{e:?}");
}

#[test]
fn names_that_are_not_utf8_are_kept_exactly() {
    let d = tempfile::tempdir().unwrap();
    let name = OsStr::from_bytes(b"caf\xe9-\xff\n");
    std::fs::create_dir(d.path().join(name)).unwrap();
    std::fs::write(d.path().join(name).join("x"), b"1").unwrap();
    symlink(OsStr::from_bytes(b"\xfe"), d.path().join("link")).unwrap();
    let m = walk(d.path(), roomy());
    let mut inner = b"caf\xe9-\xff\n".to_vec();
    inner.extend_from_slice(b"/x");
    assert_eq!(entry(&m, &inner).size, 1);
    let json = serde_json::to_string(&m).unwrap();
    let back: Manifest = serde_json::from_str(&json).unwrap();
    assert_eq!(back, m);
    assert_eq!(entry(&back, b"link").target.as_ref().unwrap().0, b"\xfe");
}

#[test]
fn deep_nesting_stops_at_max_depth() {
    let d = tempfile::tempdir().unwrap();
    let mut p = d.path().to_path_buf();
    for _ in 0..(MAX_DEPTH + 40) {
        p.push("d");
    }
    std::fs::create_dir_all(&p).unwrap();
    let m = walk(d.path(), roomy());
    assert!(!m.complete);
    assert_eq!(m.mounts[0].stats.skipped_dirs, 1);
    let skipped: Vec<_> = m.mounts[0]
        .entries
        .iter()
        .filter(|e| e.skipped.is_some())
        .collect();
    assert_eq!(skipped[0].skipped, Some(Skipped::Depth));
    assert_eq!(skipped[0].path.0.split(|b| *b == b'/').count(), MAX_DEPTH);
}

#[test]
fn many_files_stop_at_max_files_and_say_so() {
    let d = tempfile::tempdir().unwrap();
    for i in 0..1500 {
        std::fs::write(d.path().join(format!("f{i}")), b"").unwrap();
    }
    let m = walk(d.path(), Bounds::new(500, 1 << 20, Duration::from_secs(30)));
    assert_eq!(m.stopped, Some(StopReason::MaxFiles));
    assert_eq!(m.mounts[0].stopped, Some(StopReason::MaxFiles));
    assert_eq!(m.mounts[0].entries.len(), 500);
    assert!(!m.complete);
}

#[test]
fn files_past_max_hashed_bytes_are_named_not_hashed() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("big"), vec![7u8; 300_000]).unwrap();
    std::fs::write(d.path().join("small"), vec![7u8; 1000]).unwrap();
    let m = walk(d.path(), Bounds::new(100, 100_000, Duration::from_secs(10)));
    let big = entry(&m, b"big");
    assert_eq!(big.not_hashed, Some(NotHashed::MaxHashedBytes));
    assert_eq!(big.size, 300_000);
    assert!(entry(&m, b"small").sha256.is_some());
    assert!(m.complete && !m.all_hashed);
    assert_eq!(m.mounts[0].stats.not_hashed, 1);
    assert_eq!(m.mounts[0].stats.hashed_bytes, 1000);
}

#[test]
fn the_deadline_stops_the_walk() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("a"), b"x").unwrap();
    let past = Bounds {
        max_files: 100,
        max_hashed_bytes: 1 << 20,
        deadline: Instant::now(),
    };
    let m = walk(d.path(), past);
    assert_eq!(m.stopped, Some(StopReason::Deadline));
    assert!(m.mounts[0].entries.is_empty() && !m.complete);
}

#[test]
fn the_deadline_cuts_a_long_hash() {
    let d = tempfile::tempdir().unwrap();
    let f = std::fs::File::create(d.path().join("huge")).unwrap();
    // Sparse: 64 GiB of zeros would take the hash a minute; the deadline is 200 ms.
    f.set_len(64 << 30).unwrap();
    let started = Instant::now();
    let m = walk(
        d.path(),
        Bounds::new(10, u64::MAX, Duration::from_millis(200)),
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(m.stopped, Some(StopReason::Deadline));
    assert_eq!(entry(&m, b"huge").not_hashed, Some(NotHashed::Deadline));
}

#[test]
fn a_missing_source_is_an_error_in_the_manifest_not_a_failure() {
    let d = tempfile::tempdir().unwrap();
    let m = walk(&d.path().join("gone"), roomy());
    assert!(m.mounts[0].error.is_some());
    assert!(!m.complete);
}

#[test]
fn a_single_file_bind_is_one_entry() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("f"), b"hello").unwrap();
    let m = walk(&d.path().join("f"), roomy());
    assert_eq!(m.mounts[0].entries.len(), 1);
    let e = entry(&m, b"");
    assert_eq!(e.kind, EntryKind::File);
    assert!(e.sha256.is_some());
}

#[test]
fn budgets_are_shared_by_all_mounts() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for i in 0..6 {
        std::fs::write(a.path().join(format!("{i}")), b"").unwrap();
        std::fs::write(b.path().join(format!("{i}")), b"").unwrap();
    }
    let mounts = [mount(a.path()), mount(b.path())];
    let m = build_manifest(&mounts, &Bounds::new(8, 1 << 20, Duration::from_secs(5)));
    assert_eq!(m.mounts[0].entries.len(), 6);
    assert_eq!(m.mounts[1].entries.len(), 2);
    assert_eq!(m.stopped, Some(StopReason::MaxFiles));
}
