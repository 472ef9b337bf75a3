//! One manifest entry and its JSON form. Paths and symlink targets are bytes: the JSON carries
//! `path` (UTF-8, or a lossy rendering with U+FFFD) and, only when the bytes are not UTF-8,
//! `path_hex` with the exact bytes; a reader takes `path_hex` when present.

use serde::{Deserialize, Serialize};

/// A path relative to its mount, as raw bytes ("" is the mount itself).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RawPath(pub Vec<u8>);

impl RawPath {
    /// The readable form: the path itself when UTF-8, else a lossy rendering.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// The exact bytes as hex, when the readable form is not exact.
    pub fn exact_hex(&self) -> Option<String> {
        std::str::from_utf8(&self.0)
            .is_err()
            .then(|| super::hex(&self.0))
    }

    fn from_wire(text: String, hex: Option<String>) -> Result<RawPath, String> {
        match hex {
            None => Ok(RawPath(text.into_bytes())),
            Some(h) => unhex(&h).map(RawPath),
        }
    }
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {s:?}"));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("bad hex {s:?}"))
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    Char,
    Block,
    Unknown,
}

impl EntryKind {
    pub(crate) fn from_mode(mode: u32) -> EntryKind {
        match mode & libc::S_IFMT {
            libc::S_IFREG => EntryKind::File,
            libc::S_IFDIR => EntryKind::Dir,
            libc::S_IFLNK => EntryKind::Symlink,
            libc::S_IFIFO => EntryKind::Fifo,
            libc::S_IFSOCK => EntryKind::Socket,
            libc::S_IFCHR => EntryKind::Char,
            libc::S_IFBLK => EntryKind::Block,
            _ => EntryKind::Unknown,
        }
    }
}

/// Why a regular file has no sha256.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotHashed {
    /// Hashing it would have crossed `max_hashed_bytes`.
    MaxHashedBytes,
    /// The walk's deadline passed while it was read.
    Deadline,
    /// Its size or mtime changed while it was read (it was being written).
    ChangedWhileHashed,
    /// It could not be opened or read (the error is in the shim's log).
    Unreadable,
}

/// Why a directory's contents are not in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Skipped {
    /// Nested deeper than `MAX_DEPTH`.
    Depth,
    /// Another filesystem is mounted there.
    OtherFilesystem,
    /// It could not be opened.
    Unreadable,
}

/// What the walk reads of a file's `stat`: the fields an entry and the walk's checks use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Meta {
    pub dev: u64,
    pub ino: u64,
    /// The file type and permission bits, as `st_mode`.
    pub mode: u32,
    pub uid: u32,
    pub rdev: u64,
    /// `st_size`, never negative for what the kernel reports.
    pub size: u64,
    /// `st_mtime`, `st_mtime_nsec`.
    pub mtime: (i64, i64),
}

impl From<&rustix::fs::Stat> for Meta {
    fn from(st: &rustix::fs::Stat) -> Meta {
        Meta {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            uid: st.st_uid,
            rdev: st.st_rdev,
            size: u64::try_from(st.st_size).unwrap_or(0),
            mtime: (
                st.st_mtime,
                i64::try_from(st.st_mtime_nsec).unwrap_or(i64::MAX),
            ),
        }
    }
}

/// One thing found under a mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "EntryWire", try_from = "EntryWire")]
pub struct Entry {
    pub path: RawPath,
    pub kind: EntryKind,
    /// `st_size` (a symlink's is its target's length).
    pub size: u64,
    /// Permission bits, setuid/setgid/sticky included.
    pub mode: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Regular files that were hashed.
    pub sha256: Option<String>,
    pub not_hashed: Option<NotHashed>,
    /// Symlinks: the target as stored, never resolved.
    pub target: Option<RawPath>,
    /// Character and block devices: "major:minor".
    pub rdev: Option<String>,
    /// Directories whose contents were not walked.
    pub skipped: Option<Skipped>,
}

impl Entry {
    pub(crate) fn new(path: RawPath, kind: EntryKind, st: &Meta) -> Entry {
        let rdev = matches!(kind, EntryKind::Char | EntryKind::Block).then(|| {
            format!(
                "{}:{}",
                rustix::fs::major(st.rdev),
                rustix::fs::minor(st.rdev)
            )
        });
        Entry {
            path,
            kind,
            size: st.size,
            mode: st.mode & 0o7777,
            // Saturating: the sandbox chooses the mtime, and an overflow must not panic.
            mtime_ns: st
                .mtime
                .0
                .saturating_mul(1_000_000_000)
                .saturating_add(st.mtime.1),
            sha256: None,
            not_hashed: None,
            target: None,
            rdev,
            skipped: None,
        }
    }
}

/// The JSON shape of an entry.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryWire {
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_hex: Option<String>,
    #[serde(rename = "type")]
    kind: EntryKind,
    size: u64,
    /// Octal, e.g. "0644".
    mode: String,
    mtime_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    not_hashed: Option<NotHashed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    target_hex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rdev: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    skipped: Option<Skipped>,
}

impl From<Entry> for EntryWire {
    fn from(e: Entry) -> EntryWire {
        EntryWire {
            path: e.path.display(),
            path_hex: e.path.exact_hex(),
            kind: e.kind,
            size: e.size,
            mode: format!("{:04o}", e.mode),
            mtime_ns: e.mtime_ns,
            sha256: e.sha256,
            not_hashed: e.not_hashed,
            target: e.target.as_ref().map(RawPath::display),
            target_hex: e.target.as_ref().and_then(RawPath::exact_hex),
            rdev: e.rdev,
            skipped: e.skipped,
        }
    }
}

impl TryFrom<EntryWire> for Entry {
    type Error = String;
    fn try_from(w: EntryWire) -> Result<Entry, String> {
        let mode = u32::from_str_radix(&w.mode, 8)
            .ok()
            .filter(|m| *m <= 0o7777)
            .ok_or_else(|| format!("bad mode {:?}", w.mode))?;
        let target = match (w.target, w.target_hex) {
            (None, None) => None,
            (Some(t), h) => Some(RawPath::from_wire(t, h)?),
            (None, Some(_)) => return Err("target_hex without target".into()),
        };
        Ok(Entry {
            path: RawPath::from_wire(w.path, w.path_hex)?,
            kind: w.kind,
            size: w.size,
            mode,
            mtime_ns: w.mtime_ns,
            sha256: w.sha256,
            not_hashed: w.not_hashed,
            target,
            rdev: w.rdev,
            skipped: w.skipped,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &[u8]) -> Entry {
        Entry {
            path: RawPath(path.to_vec()),
            kind: EntryKind::Symlink,
            size: 3,
            mode: 0o4755,
            mtime_ns: 1_700_000_000_123_456_789,
            sha256: None,
            not_hashed: None,
            target: Some(RawPath(b"\xff/x".to_vec())),
            rdev: None,
            skipped: None,
        }
    }

    #[test]
    fn utf8_names_are_plain_strings() {
        let v = serde_json::to_value(entry("dir/caf\u{e9}".as_bytes())).unwrap();
        assert_eq!(v["path"], "dir/caf\u{e9}");
        assert!(v.get("path_hex").is_none());
        assert_eq!(v["mode"], "4755");
        assert_eq!(v["type"], "symlink");
    }

    #[test]
    fn non_utf8_names_round_trip_exactly() {
        let e = entry(b"a/\xff\xfe\n\0name");
        let json = serde_json::to_string(&e).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["path_hex"], "612ffffe0a006e616d65");
        assert_eq!(v["target_hex"], "ff2f78");
        assert!(v["path"].as_str().unwrap().contains('\u{fffd}'));
        let back: Entry = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn an_mtime_far_in_the_future_saturates() {
        let st = Meta {
            mode: libc::S_IFREG | 0o644,
            mtime: (i64::MAX / 2, 999_999_999),
            ..Meta::default()
        };
        let e = Entry::new(RawPath(b"x".to_vec()), EntryKind::File, &st);
        assert_eq!(e.mtime_ns, i64::MAX);
    }

    #[test]
    fn bad_hex_or_mode_is_refused() {
        let mut v = serde_json::to_value(entry(b"x")).unwrap();
        v["path_hex"] = "zz".into();
        assert!(serde_json::from_value::<Entry>(v.clone()).is_err());
        v["path_hex"] = "7".into();
        assert!(serde_json::from_value::<Entry>(v.clone()).is_err());
        let mut v = serde_json::to_value(entry(b"x")).unwrap();
        v["mode"] = "99999".into();
        assert!(serde_json::from_value::<Entry>(v).is_err());
    }
}
