//! runsc's state directory (its `--root`): one `<container>_sandbox:<sandbox>.state` file per
//! container and a `.lock` file beside it that runsc flocks around every read and write.
//!
//! runsc removes both when it deletes a container, but any runsc command that loads a
//! container creates the lock file first (open with O_CREAT) and leaves it when the state is
//! already gone. containerd runs one `delete` action per task of a dead shim, all at once;
//! one deleting a pod's sandbox while another loads its containers leaves lock files of a
//! sandbox that no longer exists. [`sweep_gone_sandbox_locks`] is how the delete action
//! removes them.

use std::path::{Path, PathBuf};

const STATE: &str = "state";
const LOCK: &str = "lock";

fn file(root: &Path, container: &str, sandbox: &str, extension: &str) -> PathBuf {
    root.join(format!("{container}_sandbox:{sandbox}.{extension}"))
}

/// runsc's state and lock files of container `container` in sandbox `sandbox` under `root`.
pub fn state_and_lock(root: &Path, container: &str, sandbox: &str) -> (PathBuf, PathBuf) {
    (
        file(root, container, sandbox, STATE),
        file(root, container, sandbox, LOCK),
    )
}

/// (container, sandbox, extension) of a runsc state-directory file name.
fn parse(name: &str) -> Option<(&str, &str, &str)> {
    let (container, rest) = name.split_once("_sandbox:")?;
    let (sandbox, extension) = rest.rsplit_once('.')?;
    Some((container, sandbox, extension))
}

fn entries(root: &Path) -> Vec<String> {
    std::fs::read_dir(root)
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The sandbox runsc keeps container `container` in, while its state file exists.
pub fn sandbox_of(root: &Path, container: &str) -> Option<String> {
    entries(root)
        .into_iter()
        .find_map(|name| match parse(&name) {
            Some((c, sandbox, STATE)) if c == container => Some(sandbox.to_string()),
            _ => None,
        })
}

/// A flock on the state directory itself. runsc never takes it; our cleanups hold it shared
/// while their runsc runs and exclusive while they sweep, so that a sweep never runs while
/// another cleanup's runsc may be recreating a lock, and cleanups still run at once.
pub struct CleanupLock(std::fs::File);

impl CleanupLock {
    /// Takes the lock shared, for a cleanup's runsc commands.
    pub fn shared(root: &Path) -> std::io::Result<CleanupLock> {
        let dir = std::fs::File::open(root)?;
        rustix::fs::flock(&dir, rustix::fs::FlockOperation::LockShared)?;
        Ok(CleanupLock(dir))
    }

    /// Trades the shared lock for the exclusive one, for a sweep: waits until no other
    /// cleanup's runsc runs. (flock converts by releasing first, so another cleanup may take
    /// the exclusive lock in between; that is harmless, each sweep checks afresh.)
    pub fn exclusive(self) -> std::io::Result<CleanupLock> {
        rustix::fs::flock(&self.0, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(self)
    }
}

/// When no container of `sandbox` has a state file left, removes the sandbox's lock files and
/// returns them; a sandbox with any state left is not touched. Safe only for a sandbox that
/// can get no new container: runsc creates a new container's lock before its state.
pub fn sweep_gone_sandbox_locks(root: &Path, sandbox: &str) -> std::io::Result<Vec<PathBuf>> {
    let names = entries(root);
    let mine = || {
        names
            .iter()
            .filter_map(|n| parse(n).map(|p| (n, p)))
            .filter(|(_, (_, s, _))| *s == sandbox)
    };
    if mine().any(|(_, (_, _, ext))| ext == STATE) {
        return Ok(Vec::new());
    }
    let mut removed = Vec::new();
    for (name, _) in mine().filter(|(_, (_, _, ext))| *ext == LOCK) {
        let path = root.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => removed.push(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, container: &str, sandbox: &str, extension: &str) {
        std::fs::write(file(root, container, sandbox, extension), b"").unwrap();
    }

    #[test]
    fn a_container_is_found_in_the_sandbox_its_state_names() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "app", "pool-7", STATE);
        touch(dir.path(), "app", "pool-7", LOCK);
        touch(dir.path(), "other", "pod-1", STATE);
        assert_eq!(sandbox_of(dir.path(), "app").as_deref(), Some("pool-7"));
        assert_eq!(sandbox_of(dir.path(), "ap"), None);
        touch(dir.path(), "lonely", "pod-2", LOCK);
        assert_eq!(sandbox_of(dir.path(), "lonely"), None, "a lock is no state");
    }

    #[test]
    fn locks_of_a_sandbox_with_no_state_left_go_and_nothing_else_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        touch(root, "pod", "pod", LOCK);
        touch(root, "a", "pod", LOCK);
        touch(root, "x", "live", STATE);
        touch(root, "x", "live", LOCK);
        touch(root, "y", "live", LOCK);
        std::fs::write(root.join("unrelated.lock"), b"").unwrap();

        let mut removed = sweep_gone_sandbox_locks(root, "pod").unwrap();
        removed.sort();
        assert_eq!(
            removed,
            vec![file(root, "a", "pod", LOCK), file(root, "pod", "pod", LOCK)]
        );
        // A sandbox with a state left keeps every lock, also one whose state is not there yet.
        assert!(sweep_gone_sandbox_locks(root, "live").unwrap().is_empty());
        let mut left = entries(root);
        left.sort();
        assert_eq!(
            left,
            [
                "unrelated.lock",
                "x_sandbox:live.lock",
                "x_sandbox:live.state",
                "y_sandbox:live.lock"
            ]
        );
    }

    #[test]
    fn a_sandbox_id_that_prefixes_another_is_not_confused_with_it() {
        let dir = tempfile::tempdir().unwrap();
        touch(dir.path(), "c", "pod-10", STATE);
        touch(dir.path(), "c", "pod-1", LOCK);
        assert_eq!(
            sweep_gone_sandbox_locks(dir.path(), "pod-1").unwrap(),
            vec![file(dir.path(), "c", "pod-1", LOCK)]
        );
        assert!(sweep_gone_sandbox_locks(dir.path(), "pod-10")
            .unwrap()
            .is_empty());
    }
}
