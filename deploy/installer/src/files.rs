//! Atomic file installation with sha256 verification.
//!
//! Files land via a temp file in the destination directory and a rename, so a crash or a
//! concurrent reader never sees half a shim binary or half a policy; the copy is then read back
//! and hashed.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum FileError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("removing {path}: {source}")]
    Remove {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: sha256 after copy is {found}, expected {expected}")]
    Verify {
        path: PathBuf,
        expected: String,
        found: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOutcome {
    Unchanged,
    Written,
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Reads a file; `Ok(None)` when it does not exist.
pub fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, FileError> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(FileError::Read {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Copies `src` to `dest` with `mode`, atomically; no write when the content and mode match.
pub fn install_file(
    src: &Path,
    dest: &Path,
    mode: u32,
) -> Result<(FileOutcome, String), FileError> {
    let bytes = fs::read(src).map_err(|source| FileError::Read {
        path: src.to_path_buf(),
        source,
    })?;
    let want = sha256_hex(&bytes);
    if let Some(existing) = read_optional(dest)? {
        let same_mode = fs::metadata(dest)
            .map(|m| m.permissions().mode() & 0o7777 == mode)
            .unwrap_or(false);
        if same_mode && sha256_hex(&existing) == want {
            return Ok((FileOutcome::Unchanged, want));
        }
    }
    write_atomic(dest, &bytes, mode)?;
    Ok((FileOutcome::Written, want))
}

/// Writes `bytes` to `path` through a temp file and rename, then verifies the sha256.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), FileError> {
    let werr = |source| FileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir).map_err(werr)?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(path.file_name().unwrap_or_default());
    tmp_name.push(format!(".gvh-tmp-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        // The umask may have narrowed the mode given to open.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        // Make the rename itself durable before anyone restarts containerd on it.
        File::open(dir)?.sync_all()
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(werr(e));
    }
    let back = fs::read(path).map_err(|source| FileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let (expected, found) = (sha256_hex(bytes), sha256_hex(&back));
    if expected != found {
        return Err(FileError::Verify {
            path: path.to_path_buf(),
            expected,
            found,
        });
    }
    Ok(())
}

/// Removes a file; `Ok(false)` when it was already gone.
pub fn remove_if_exists(path: &Path) -> Result<bool, FileError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(FileError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Removes a directory if it is empty (ours to clean, but never someone else's files).
pub fn remove_dir_if_empty(path: &Path) -> Result<(), FileError> {
    match fs::remove_dir(path) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::DirectoryNotEmpty
            ) =>
        {
            Ok(())
        }
        Err(source) => Err(FileError::Remove {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Permission bits of a file, for writing its replacement with the same mode.
pub fn mode_of(path: &Path) -> Option<u32> {
    fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input_is_the_known_value() {
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn install_writes_then_reports_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        fs::write(&src, b"shim").unwrap();
        let dest = dir.path().join("a/b/dest");
        let (first, sum) = install_file(&src, &dest, 0o755).unwrap();
        assert_eq!(first, FileOutcome::Written);
        assert_eq!(sum, sha256_hex(b"shim"));
        assert_eq!(mode_of(&dest), Some(0o755));
        let (second, _) = install_file(&src, &dest, 0o755).unwrap();
        assert_eq!(second, FileOutcome::Unchanged);
        // No temp files left behind.
        assert_eq!(fs::read_dir(dest.parent().unwrap()).unwrap().count(), 1);
    }

    #[test]
    fn install_rewrites_when_only_the_mode_differs() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        fs::write(&src, b"p").unwrap();
        let dest = dir.path().join("dest");
        install_file(&src, &dest, 0o600).unwrap();
        let (again, _) = install_file(&src, &dest, 0o644).unwrap();
        assert_eq!(again, FileOutcome::Written);
        assert_eq!(mode_of(&dest), Some(0o644));
    }

    #[test]
    fn missing_source_is_a_read_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = install_file(&dir.path().join("nope"), &dir.path().join("d"), 0o644).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    fn remove_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, b"x").unwrap();
        assert!(remove_if_exists(&p).unwrap());
        assert!(!remove_if_exists(&p).unwrap());
    }
}
