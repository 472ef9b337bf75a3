//! Replacing a file whole: the bytes go to a private temporary file in the same directory, which
//! is then renamed over the target, so a reader (runsc, a restarted shim, the `delete` action, an
//! operator) sees the old file or the new one, never half of one.
//!
//! One definition for the shim's state files, bundle files, caches and evidence; a leaf, so any
//! module can use it without depending on the bundle or audit code.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How a file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The file's mode, set exactly (the umask does not narrow it).
    pub mode: u32,
    /// Flushed to disk, and the rename too, before returning: for what must survive a node crash
    /// (evidence, a trust store runsc reads on the next start). Bundle and state files live on
    /// tmpfs and are recreated with the task, so they skip the cost.
    pub durable: bool,
}

impl Options {
    /// Owner-only and not flushed: bundle and state files.
    pub const PRIVATE: Options = Options {
        mode: 0o600,
        durable: false,
    };
}

/// Replaces `path` with `bytes` (see the module comment). On failure the temporary file is
/// removed and the target is left as it was.
pub fn write(path: &Path, bytes: &[u8], options: Options) -> std::io::Result<()> {
    let tmp = temporary_name(path)?;
    let result = (|| {
        // A fresh name each time, opened without following a link: a planted file or symlink
        // at the temporary name makes this fail rather than write through it.
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(options.mode)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(options.mode))?;
        if options.durable {
            f.sync_all()?;
        }
        drop(f);
        std::fs::rename(&tmp, path)?;
        if options.durable {
            File::open(directory_of(path))?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// A hidden name beside `path`, unique to this process and call, so concurrent writers of one
/// target never share a temporary file.
fn temporary_name(path: &Path) -> std::io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}: not a file path", path.display()),
        )
    })?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    Ok(directory_of(path).join(tmp))
}

fn directory_of(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_write_replaces_the_file_whole_with_exactly_the_mode_asked_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old").unwrap();
        for options in [
            Options::PRIVATE,
            Options {
                mode: 0o644,
                durable: true,
            },
        ] {
            write(&path, b"new", options).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"new");
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, options.mode);
            assert_eq!(entries(dir.path()), ["state.json"]);
        }
    }

    #[test]
    fn a_write_that_cannot_land_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        // A directory in the target's place: the rename fails after the bytes were written.
        let path = dir.path().join("taken");
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), "kept").unwrap();
        assert!(write(&path, b"new", Options::PRIVATE).is_err());
        assert_eq!(entries(dir.path()), ["taken"]);
        assert_eq!(std::fs::read(path.join("inside")).unwrap(), b"kept");
    }

    #[test]
    fn writers_of_one_target_never_share_a_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared");
        std::thread::scope(|s| {
            for i in 0..8u8 {
                let path = &path;
                s.spawn(move || {
                    for _ in 0..50 {
                        write(path, &[i; 4096], Options::PRIVATE).unwrap();
                    }
                });
            }
        });
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert!(bytes.iter().all(|b| *b == bytes[0]), "a torn write landed");
        assert_eq!(entries(dir.path()), ["shared"]);
    }
}
