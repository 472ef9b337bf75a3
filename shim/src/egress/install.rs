//! The forwarder binary the policy names, checked before a sandbox with egress is created: a
//! missing or unusable one would otherwise surface as runsc's `stat ... no such file or
//! directory` buried in its JSON output, after the sandbox half-existed.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Why the forwarder at `path` cannot serve egress; the message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "egress needs the forwarder binary at {path} ([network.egress] forwarder): {why}; build it with \
     hack/build-forwarder.sh and install it there as root, mode 0755 (the Kubernetes installer does), \
     or turn egress off (an empty [network.egress] allow)"
)]
pub struct ForwarderUnusable {
    pub path: String,
    pub why: String,
}

/// A regular file (after symlinks), executable, writable by its owner only: anyone else who
/// could rewrite it would run code inside every sandbox as the forwarder.
pub fn check_forwarder(path: &Path) -> Result<(), ForwarderUnusable> {
    let unusable = |why: String| ForwarderUnusable {
        path: path.display().to_string(),
        why,
    };
    let meta = std::fs::metadata(path).map_err(|e| unusable(e.to_string()))?;
    if !meta.is_file() {
        return Err(unusable("not a regular file".into()));
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(unusable(format!(
            "not executable (mode {:o})",
            mode & 0o7777
        )));
    }
    if mode & 0o022 != 0 {
        return Err(unusable(format!(
            "writable by group or others (mode {:o})",
            mode & 0o7777
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, mode: u32) -> std::path::PathBuf {
        let p = dir.join(format!("fwd-{mode:o}"));
        std::fs::write(&p, b"#!/bin/true\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn an_installed_forwarder_passes() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(check_forwarder(&file(dir.path(), 0o755)), Ok(()));
    }

    #[test]
    fn a_missing_or_unusable_forwarder_names_the_path_the_cause_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (dir.path().join("absent"), "No such file or directory"),
            (dir.path().to_path_buf(), "not a regular file"),
            (file(dir.path(), 0o644), "not executable (mode 644)"),
            (
                file(dir.path(), 0o777),
                "writable by group or others (mode 777)",
            ),
        ];
        for (path, cause) in cases {
            let e = check_forwarder(&path).unwrap_err().to_string();
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(e.contains(cause), "{e}");
            assert!(e.contains("hack/build-forwarder.sh"), "{e}");
        }
    }
}
