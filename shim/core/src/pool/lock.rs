//! The key's fill lock: an flock on `<key>/lock`, held by the one filler that works on a key
//! (its pid and start time written inside, so a drain can ask it to stop) or by a drain that
//! locked the fillers out. Its own module so the filler and the drain both use it without
//! using each other for it.

use std::os::fd::AsFd;
use std::time::Duration;

use super::store::{KeyDir, PoolError};

/// Opens (creating) the key's lock file, unlocked.
pub(super) fn open_lock(kd: &KeyDir) -> Result<std::fs::File, PoolError> {
    let path = kd.lock_path();
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| PoolError::Io {
            path,
            what: "opening the fill lock",
            source,
        })
}

/// The lock for a filler, if no other filler or drain holds it; with this process named in it.
pub(super) fn take_for_filler(kd: &KeyDir) -> Result<Option<std::fs::File>, PoolError> {
    let lock = open_lock(kd)?;
    if rustix::fs::flock(
        lock.as_fd(),
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )
    .is_err()
    {
        return Ok(None);
    }
    write_holder(&lock);
    Ok(Some(lock))
}

/// Writes this process's pid and start time into the lock it holds, for a drain to stop it by.
fn write_holder(lock: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    let pid = std::process::id() as i32;
    let Some(start) = gvisor_hardened_proc::host_process::start_time_of(pid) else {
        return;
    };
    let _ = lock
        .set_len(0)
        .and_then(|()| lock.write_all_at(format!("{pid} {start}\n").as_bytes(), 0));
}

/// The pid and start time in a lock file's text.
fn parse_holder(text: &str) -> Option<(i32, u64)> {
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// Takes the key's fill lock for a drain. A filler that holds it is asked to stop (SIGTERM
/// through a pidfd, checked against the start time it wrote into the lock file) and waited for:
/// it ends after the boot it is in, if any, and writes its last log line before it exits. A
/// filler that holds the lock but has not written its pid yet is not signalled; the lock is
/// then taken when it ends on its own.
pub(super) fn lock_out_filler(kd: &KeyDir) -> Result<std::fs::File, PoolError> {
    use gvisor_hardened_proc::host_process::{start_time_of, HostProcess};
    use rustix::fs::{flock, FlockOperation};
    let lock = open_lock(kd)?;
    if flock(lock.as_fd(), FlockOperation::NonBlockingLockExclusive).is_ok() {
        return Ok(lock);
    }
    let holder = std::fs::read_to_string(kd.lock_path())
        .ok()
        .and_then(|t| parse_holder(&t))
        .and_then(|(pid, start)| HostProcess::open_checked(pid, Some(start), start_time_of));
    if let Some(filler) = holder {
        if filler.signal(libc::SIGTERM).is_ok() {
            filler.wait_exited(Duration::from_secs(60));
        }
    }
    flock(lock.as_fd(), FlockOperation::LockExclusive).map_err(|e| PoolError::Io {
        path: kd.lock_path(),
        what: "taking the fill lock",
        source: e.into(),
    })?;
    Ok(lock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_file_names_its_holder_by_pid_and_start_time() {
        assert_eq!(parse_holder("4242 987654\n"), Some((4242, 987654)));
        assert_eq!(parse_holder(""), None);
        assert_eq!(parse_holder("4242"), None);
    }

    #[test]
    fn a_drain_takes_a_free_lock_at_once_and_holds_it_from_a_filler() {
        let tmp = tempfile::tempdir().unwrap();
        let kd = KeyDir::new(tmp.path().to_str().unwrap(), "default", "k");
        kd.create().unwrap();
        let held = lock_out_filler(&kd).unwrap();
        assert!(take_for_filler(&kd).unwrap().is_none());
        drop(held);
        let filler = take_for_filler(&kd).unwrap().expect("free again");
        let text = std::fs::read_to_string(kd.lock_path()).unwrap();
        assert_eq!(
            parse_holder(&text).map(|(pid, _)| pid),
            Some(std::process::id() as i32)
        );
        drop(filler);
    }
}
