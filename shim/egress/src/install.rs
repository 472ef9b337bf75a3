//! The forwarder binary a sandbox with egress runs, made sure of before the sandbox is created:
//! a missing or unusable one would otherwise surface as runsc's `stat ... no such file or
//! directory` buried in its JSON output, after the sandbox half-existed.
//!
//! The runtime carries its own forwarder (built by `build.rs`, the same source the installer's
//! image ships). At the policy's default path it is the runtime's copy that runs: written
//! there when the file is missing or is not this runtime's (an older install's, one whose mode
//! lets others rewrite it), through a temp file whose bytes are checked against the embedded
//! copy's sha256 before a rename puts it in place. So installing the shim (or runsc-hardened)
//! is all egress needs, and the forwarder always speaks the protocol of the proxy that drives
//! it. A path the policy names explicitly is the operator's file: checked, never written.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use policy_injector::egress::DEFAULT_FORWARDER;
use sha2::{Digest, Sha256};

/// The forwarder this runtime was built with.
pub const EMBEDDED: &[u8] = include_bytes!(env!("GVH_EMBEDDED_FORWARDER"));

/// Where cargo built [`EMBEDDED`] (the tests run that file).
pub const EMBEDDED_BUILD_PATH: &str = env!("GVH_EMBEDDED_FORWARDER");

/// Why the forwarder at `path` cannot serve egress; the message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("egress needs the forwarder binary at {path} ([network.egress] forwarder): {why}; {fix}")]
pub struct ForwarderUnusable {
    pub path: String,
    pub why: String,
    pub fix: &'static str,
}

const FIX_OPERATORS: &str = "build it with hack/build-forwarder.sh and install it there as root, \
     mode 0755, or leave [network.egress] forwarder unset (the runtime then writes its own copy \
     to its default path), or turn egress off (an empty [network.egress] allow)";
const FIX_DEFAULT: &str = "the runtime writes its own copy there when it is missing or not its \
     own, which needs a directory only root can write; or turn egress off (an empty \
     [network.egress] allow)";

/// Makes sure the forwarder at `path` (the egress plan's) can run: the runtime's own copy at
/// the default path, the operator's file anywhere else.
pub fn prepare_forwarder(path: &Path) -> Result<(), ForwarderUnusable> {
    if path == Path::new(DEFAULT_FORWARDER) {
        ensure_embedded_at(path)
    } else {
        check_forwarder(path)
    }
}

/// A regular file (after symlinks), executable, writable by its owner only: anyone else who
/// could rewrite it would run code inside every sandbox as the forwarder.
pub fn check_forwarder(path: &Path) -> Result<(), ForwarderUnusable> {
    check(path)
        .map(drop)
        .map_err(|why| unusable(path, why, FIX_OPERATORS))
}

fn check(path: &Path) -> Result<fs::Metadata, String> {
    let meta = fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!("not executable (mode {:o})", mode & 0o7777));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "writable by group or others (mode {:o})",
            mode & 0o7777
        ));
    }
    Ok(meta)
}

fn unusable(path: &Path, why: String, fix: &'static str) -> ForwarderUnusable {
    ForwarderUnusable {
        path: path.display().to_string(),
        why,
        fix,
    }
}

/// Whether `bytes` are the embedded forwarder's, by sha256 (its own computed once).
fn is_embedded(bytes: &[u8]) -> bool {
    static SUM: OnceLock<[u8; 32]> = OnceLock::new();
    let want = SUM.get_or_init(|| Sha256::digest(EMBEDDED).into());
    <[u8; 32]>::from(Sha256::digest(bytes)) == *want
}

/// The file last found to hold the embedded copy, by identity and change time: a shim serving a
/// pod hashes it once, not at every container's create.
static VERIFIED: Mutex<Option<(u64, u64, i64, i64)>> = Mutex::new(None);

fn identity(meta: &fs::Metadata) -> (u64, u64, i64, i64) {
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

/// Makes `path` hold this runtime's forwarder (see the module comment).
pub fn ensure_embedded_at(path: &Path) -> Result<(), ForwarderUnusable> {
    match check(path) {
        Ok(meta) if holds_embedded(path, &meta) => return Ok(()),
        Ok(_) => log::warn!(
            "{}: not this runtime's forwarder; replacing it with the runtime's own copy",
            path.display()
        ),
        Err(why) if fs::symlink_metadata(path).is_ok() => log::warn!(
            "{}: {why}; replacing it with the runtime's own copy",
            path.display()
        ),
        Err(_) => log::info!("writing the runtime's forwarder to {}", path.display()),
    }
    write_embedded(path).map_err(|why| unusable(path, why, FIX_DEFAULT))?;
    let meta = check(path).map_err(|why| unusable(path, why, FIX_DEFAULT))?;
    *VERIFIED.lock().unwrap_or_else(|e| e.into_inner()) = Some(identity(&meta));
    Ok(())
}

fn holds_embedded(path: &Path, meta: &fs::Metadata) -> bool {
    if meta.len() != EMBEDDED.len() as u64 {
        return false;
    }
    let id = identity(meta);
    let mut verified = VERIFIED.lock().unwrap_or_else(|e| e.into_inner());
    if *verified == Some(id) {
        return true;
    }
    let same = fs::read(path).is_ok_and(|bytes| is_embedded(&bytes));
    if same {
        *verified = Some(id);
    }
    same
}

/// Writes [`EMBEDDED`] to a temp file beside `path`, checks what landed against its sha256,
/// and renames it into place (mode 0755). The directory is made (0755) if missing and must be
/// writable by its owner only: otherwise someone else could swap the file after the check.
fn write_embedded(path: &Path) -> Result<(), String> {
    let dir = path
        .parent()
        .ok_or_else(|| "the path has no directory".to_string())?;
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let dir_mode = fs::metadata(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .permissions()
        .mode();
    if dir_mode & 0o022 != 0 {
        return Err(format!(
            "its directory {} is writable by group or others (mode {:o})",
            dir.display(),
            dir_mode & 0o7777
        ));
    }
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let written = (|| -> Result<(), String> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o700)
            .open(&tmp)
            .map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        f.write_all(EMBEDDED)
            .and_then(|()| f.sync_all())
            .map_err(|e| format!("writing {}: {e}", tmp.display()))?;
        let landed = fs::read(&tmp).map_err(|e| format!("reading back {}: {e}", tmp.display()))?;
        if !is_embedded(&landed) {
            return Err(format!(
                "{} does not hold what was written (sha256 differs)",
                tmp.display()
            ));
        }
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod {}: {e}", tmp.display()))?;
        fs::rename(&tmp, path).map_err(|e| format!("renaming into place: {e}"))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
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

    #[test]
    fn the_embedded_forwarder_is_the_static_binary_cargo_built() {
        assert!(EMBEDDED.starts_with(b"\x7fELF"));
        assert_eq!(std::fs::read(EMBEDDED_BUILD_PATH).unwrap(), EMBEDDED);
    }

    #[test]
    fn a_missing_forwarder_is_written_from_the_embedded_copy_and_then_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib/gvisor-hardened-forwarder");
        ensure_embedded_at(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), EMBEDDED);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        // Present and the same: not rewritten (same inode).
        ensure_embedded_at(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().ino(), meta.ino());
        // No temp file left beside it.
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["gvisor-hardened-forwarder"]);
    }

    #[test]
    fn a_forwarder_that_is_not_the_runtimes_own_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        // An older install's (other bytes), one of the right size with other bytes, and one
        // others may rewrite.
        let mut same_size = EMBEDDED.to_vec();
        same_size[1000] ^= 0xff;
        for (bytes, mode) in [
            (b"old forwarder".to_vec(), 0o755),
            (same_size, 0o755),
            (EMBEDDED.to_vec(), 0o777),
        ] {
            let path = dir.path().join("gvisor-hardened-forwarder");
            std::fs::write(&path, &bytes).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            ensure_embedded_at(&path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), EMBEDDED);
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
                0o755
            );
        }
    }

    #[test]
    fn no_forwarder_is_written_where_others_could_swap_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = dir.path().join("gvisor-hardened-forwarder");
        let e = ensure_embedded_at(&path).unwrap_err().to_string();
        assert!(e.contains("writable by group or others (mode 777)"), "{e}");
        assert!(e.contains("writes its own copy"), "{e}");
        assert!(!path.exists());
    }
}
