//! Setting aside what a sandbox left where the host's git, direnv or editor would run or follow
//! it. Renamed beside itself under a name the sandbox cannot predict (its container id and a
//! random nonce, with `RENAME_NOREPLACE`), so it stays there for the developer to read; where
//! the rename still fails, disarmed in place: removed without following a link, and whatever
//! cannot be removed loses every mode bit. Nothing is ever left as it was without the outcome
//! saying so.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{openat, renameat_with, Mode, OFlags, RenameFlags, CWD};

/// Names tried before the rename counts as failed: a collision of 64 random bits is not
/// something a second try should ever need, but an `EEXIST` is cheap to retry.
const ATTEMPTS: usize = 4;

/// What [`set_aside`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Renamed; where it is now.
    Moved(PathBuf),
    /// Not renamed (why), removed in place instead. `left`: what could not be removed and
    /// had its mode bits taken instead.
    Disarmed { why: String, left: Vec<PathBuf> },
    /// Neither renamed nor removed: what failed.
    Failed(String),
}

/// Sets `path` aside (see the module's comment) with `rename` ([`rename_aside`] but in tests).
pub(super) fn set_aside(
    path: &Path,
    container_id: &str,
    rename: fn(&Path, &str) -> io::Result<PathBuf>,
) -> Outcome {
    match rename(path, container_id) {
        Ok(to) => Outcome::Moved(to),
        Err(e) => disarm(path, &format!("could not be renamed aside ({e})")),
    }
}

/// Renames `path` to a fresh quarantine name in its own directory. The directory is opened
/// first and the rename made relative to it: a deep path a sandbox made can leave no room
/// for the longer name in PATH_MAX, a directory handle needs none.
pub(super) fn rename_aside(path: &Path, container_id: &str) -> io::Result<PathBuf> {
    let (parent, name) = split(path)?;
    let dir = openat(
        CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
    for _ in 0..ATTEMPTS {
        let new_name = policy_injector::workspace::quarantine_name(
            &name.to_string_lossy(),
            container_id,
            &nonce()?,
        );
        match renameat_with(&dir, name, &dir, &new_name, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(parent.join(new_name)),
            Err(e) if e == rustix::io::Errno::EXIST => last = e.into(),
            Err(e) => return Err(e.into()),
        }
    }
    Err(last)
}

/// Removes `path` in place, never through a link; what cannot be removed loses its mode bits.
/// `why` says why it was not renamed.
pub(super) fn disarm(path: &Path, why: &str) -> Outcome {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Outcome::Disarmed {
                why: why.to_string(),
                left: Vec::new(),
            }
        }
        Err(e) => return Outcome::Failed(format!("{why}; {}: {e}", path.display())),
    };
    // remove_dir_all does not follow links (std since 1.58).
    let removed = if meta.is_dir() {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    };
    if removed.is_ok() {
        return Outcome::Disarmed {
            why: why.to_string(),
            left: Vec::new(),
        };
    }
    let mut left = Vec::new();
    strip_modes(path, &mut left);
    if left.iter().any(|p| is_link(p)) {
        return Outcome::Failed(format!(
            "{why}; could not be removed either, and {} is a symbolic link that stays",
            path.display()
        ));
    }
    Outcome::Disarmed {
        why: why.to_string(),
        left,
    }
}

fn is_link(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// Takes every mode bit of what remains below `path` (children first: a directory without
/// its bits cannot be listed any more), removing what can be removed on the way.
fn strip_modes(path: &Path, left: &mut Vec<PathBuf>) {
    let Ok(meta) = fs::symlink_metadata(path) else {
        return;
    };
    if meta.file_type().is_symlink() {
        if fs::remove_file(path).is_err() {
            left.push(path.to_path_buf());
        }
        return;
    }
    if meta.is_dir() {
        if let Ok(entries) = fs::read_dir(path) {
            for e in entries.flatten() {
                strip_modes(&e.path(), left);
            }
        }
        if fs::remove_dir(path).is_ok() {
            return;
        }
    } else if fs::remove_file(path).is_ok() {
        return;
    }
    let _ = fs::set_permissions(path, fs::Permissions::from_mode(0o000));
    left.push(path.to_path_buf());
}

fn split(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a path with a parent and a name",
        )),
    }
}

/// 64 random bits as hex, from the kernel.
fn nonce() -> io::Result<String> {
    let mut bytes = [0u8; 8];
    let mut filled = 0;
    while filled < bytes.len() {
        // SAFETY: the buffer is valid for the length given.
        let n = unsafe {
            libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    Ok(crate::artifacts::hex(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_fresh_even_when_every_guessable_one_exists() {
        let dir = tempfile::tempdir().unwrap();
        let hooks = dir.path().join("hooks");
        fs::create_dir(&hooks).unwrap();
        // What a sandbox that knows its id can make before it exits: the names of the old
        // scheme, and the id-only prefix of the new one.
        for n in 0..1000 {
            let suffix = if n == 0 {
                String::new()
            } else {
                format!("-{n}")
            };
            fs::create_dir(dir.path().join(format!("hooks.quarantine-c0ffee{suffix}"))).unwrap();
        }
        match set_aside(&hooks, "c0ffee", rename_aside) {
            Outcome::Moved(to) => {
                let name = to.file_name().unwrap().to_string_lossy().into_owned();
                assert!(name.starts_with("hooks.quarantine-c0ffee-"), "{name}");
                assert_eq!(name.len(), "hooks.quarantine-c0ffee-".len() + 16);
                assert!(to.is_dir());
            }
            other => panic!("{other:?}"),
        }
        assert!(!hooks.exists());
    }

    #[test]
    fn a_path_too_deep_for_the_longer_name_is_still_renamed() {
        let dir = tempfile::tempdir().unwrap();
        // A parent path within PATH_MAX whose entry plus the quarantine suffix is not.
        let mut parent = dir.path().to_path_buf();
        while parent.as_os_str().len() < 4070 {
            parent.push("d".repeat(200.min(4070 - parent.as_os_str().len()).max(1)));
        }
        let hooks = parent.join("hooks");
        assert!(hooks.as_os_str().len() < 4095);
        mkdir_deep(&hooks);
        match rename_aside(&hooks, "c0ffee") {
            Ok(to) => assert!(to.as_os_str().len() > 4095, "{}", to.display()),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn what_cannot_be_renamed_is_removed_in_place_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        fs::write(&outside, "the owner's").unwrap();
        let hooks = dir.path().join("hooks");
        fs::create_dir(&hooks).unwrap();
        fs::write(hooks.join("pre-commit"), "#!/bin/sh\nevil\n").unwrap();
        std::os::unix::fs::symlink(&outside, hooks.join("post-commit")).unwrap();
        match disarm(&hooks, "test") {
            Outcome::Disarmed { left, .. } => assert!(left.is_empty(), "{left:?}"),
            other => panic!("{other:?}"),
        }
        assert!(!hooks.exists());
        assert_eq!(fs::read_to_string(&outside).unwrap(), "the owner's");
    }

    /// `create_dir_all` by path fails past PATH_MAX; one component at a time from a handle.
    fn mkdir_deep(path: &Path) {
        let mut cur = PathBuf::from("/");
        for c in path.components().skip(1) {
            cur.push(c);
            let _ = fs::create_dir(&cur);
        }
    }
}
