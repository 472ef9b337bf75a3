//! File operations on trees a sandbox wrote: nothing is followed through a symbolic link,
//! nothing is read without a bound, and nothing is opened that is not a regular file.

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::WorkspaceError;

/// The longest path git can use: PATH_MAX less the terminating NUL. A deeper directory can be
/// neither opened by path nor be a working directory (`getcwd` fails), so git never finds a
/// repository there.
pub(super) const MAX_GIT_PATH: usize = 4095;

pub(super) struct DirEntry {
    pub name: OsString,
    pub is_dir: bool,
    pub is_file: bool,
    pub is_symlink: bool,
}

pub(super) struct Listed {
    pub entries: Vec<DirEntry>,
    pub dev: u64,
    pub ino: u64,
}

/// The entries of a directory, typed from `readdir` (no `stat` per entry where the filesystem
/// gives the type), and the directory's own identity.
pub(super) fn list_dir(path: &Path) -> Result<Listed, WorkspaceError> {
    let meta = fs::symlink_metadata(path).map_err(WorkspaceError::io(path))?;
    let mut entries = Vec::new();
    for e in fs::read_dir(path).map_err(WorkspaceError::io(path))? {
        let e = e.map_err(WorkspaceError::io(path))?;
        let t = e.file_type().map_err(WorkspaceError::io(e.path()))?;
        entries.push(DirEntry {
            name: e.file_name(),
            is_dir: t.is_dir(),
            is_file: t.is_file(),
            is_symlink: t.is_symlink(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Listed {
        entries,
        dev: meta.dev(),
        ino: meta.ino(),
    })
}

/// What a file was, to tell later whether someone replaced or rewrote it: a rename gives a
/// new inode, a rewrite in place a new size or mtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i128,
}

impl Fingerprint {
    pub(super) fn of(meta: &fs::Metadata) -> Fingerprint {
        Fingerprint {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }

    /// The fingerprint of the entry at `path` (not followed), `None` if there is none.
    pub(super) fn at(path: &Path) -> Result<Option<Fingerprint>, WorkspaceError> {
        match fs::symlink_metadata(path) {
            Ok(m) => Ok(Some(Fingerprint::of(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(WorkspaceError::io(path)(e)),
        }
    }
}

/// Reads a regular file without following a link at its last component, refusing more than
/// `limit` bytes. `Ok(None)`: there is no such file.
pub(super) fn read_regular(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, WorkspaceError> {
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(WorkspaceError::io(path)(e)),
    };
    let meta = file.metadata().map_err(WorkspaceError::io(path))?;
    if !meta.is_file() {
        return Err(WorkspaceError::Refused {
            path: path.to_path_buf(),
            reason: "not a regular file".into(),
        });
    }
    if meta.len() > limit {
        return Err(WorkspaceError::Refused {
            path: path.to_path_buf(),
            reason: format!("{} bytes, more than the {limit} allowed", meta.len()),
        });
    }
    let mut out = Vec::with_capacity(meta.len() as usize);
    file.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(WorkspaceError::io(path))?;
    if out.len() as u64 > limit {
        return Err(WorkspaceError::Refused {
            path: path.to_path_buf(),
            reason: format!("grew past the {limit} bytes allowed while read"),
        });
    }
    Ok(Some(out))
}

/// Creates `path` exclusively (never through a link), writes `bytes` and syncs it, with the
/// owner of `like` and its read and write bits (what this writes is data, never a program).
pub(super) fn write_new(
    path: &Path,
    bytes: &[u8],
    like: Option<&fs::Metadata>,
) -> Result<(), WorkspaceError> {
    use std::io::Write;
    let mode = like.map_or(0o644, |m| m.mode() & 0o666);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(WorkspaceError::io(path))?;
    f.write_all(bytes).map_err(WorkspaceError::io(path))?;
    if let Some(m) = like {
        std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()))
            .map_err(WorkspaceError::io(path))?;
    }
    f.sync_all().map_err(WorkspaceError::io(path))?;
    Ok(())
}
