//! The locked append: open, lock, make sure the path still names the locked file, rotate when
//! full, read the last line, chain and write. Every shim on the node appends to the same file,
//! so each step that reads or renames happens under the live file's exclusive `flock`.
//!
//! Rotation renames the live file away under its lock and leaves the path empty; the next
//! writer (often the same one, on its next attempt) creates a new file and, finding it empty,
//! starts it with a genesis linked to the last line of `path.1`. A crash between the rename and
//! that first write leaves the same state, so it heals the same way.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use policy_injector::audit_chain::{self, Digest, Origin, SealInput, Tail};

use super::{AuditError, AuditLog};

/// Opens that found the path renamed or replaced after the lock was taken, before giving up.
/// Each is one rotation by another writer: a handful would already be extraordinary.
const MAX_ATTEMPTS: u32 = 32;
/// The last line is read backwards in chunks of this size...
const TAIL_CHUNK: u64 = 64 << 10;
/// ...up to this much. A longer line is not one this writer wrote (records are a few KiB): it
/// is treated as an unchained line and a new segment begins after it.
const MAX_TAIL: u64 = 8 << 20;
/// What `seq` and `prev` add to a record's line, for the rotation check.
const LINK_OVERHEAD: u64 = 100;

pub(super) fn append(
    log: &AuditLog,
    record: &[u8],
    durable: bool,
    seal: Option<&SealInput<'_>>,
) -> Result<Digest, AuditError> {
    let io = |source| AuditError::Io {
        path: log.path.clone(),
        source,
    };
    if let Some(dir) = log.path.parent() {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io)?;
    }
    for _ in 0..MAX_ATTEMPTS {
        let file = open_locked(&log.path).map_err(io)?;
        // Another writer may have rotated the file between our open and our lock: what we
        // hold is then `path.1`, and appending to it would fork the chain.
        if !still_named(&file, &log.path).map_err(io)? {
            continue;
        }
        let len = file.metadata().map_err(io)?.len();
        if len > 0 && len + record.len() as u64 + LINK_OVERHEAD > log.rotation.max_size {
            rotate(&log.path, log.rotation.keep).map_err(io)?;
            continue;
        }
        let tail = read_tail(&file, len).map_err(io)?;
        let rotated_last = if len == 0 {
            last_line_of(&numbered(&log.path, 1)).map_err(io)?
        } else {
            None
        };
        let tail_view = tail.view();
        let next = audit_chain::next(tail_view, rotated_last.as_deref());
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let node = hostname();
        let origin = Origin {
            time: &time,
            node: &node,
            policy_sha256: &log.policy_sha256,
        };
        let out = audit_chain::compose(tail_view, next, &origin, record, seal)
            .expect("a serialised audit record is a JSON object");
        write_whole(log, &file, len, &out.bytes, durable)?;
        if durable && len == 0 {
            // A file this append created: its name must reach the disk with the record.
            if let Some(dir) = log.path.parent() {
                File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
            }
        }
        return Ok(out.record);
    }
    Err(AuditError::Unstable {
        path: log.path.clone(),
        attempts: MAX_ATTEMPTS,
    })
}

/// Opens `path` for reading and appending (made 0600 if missing, never through a symlink) and
/// takes its exclusive `flock`, which lasts until the file is closed: how the log's writers, a
/// container trail's writers and `start` against the guard take turns.
pub fn open_locked(path: &Path) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)?;
    // SAFETY: flock on a descriptor we own; released when `file` is closed.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

/// One `write(2)`; on any failure the file is cut back to `before`, so no torn line stays.
fn write_whole(
    log: &AuditLog,
    mut file: &File,
    before: u64,
    bytes: &[u8],
    durable: bool,
) -> Result<(), AuditError> {
    let io = |source| AuditError::Io {
        path: log.path.clone(),
        source,
    };
    let result = match file.write(bytes) {
        Ok(n) if n == bytes.len() && durable => file.sync_data().map_err(io),
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(written) => Err(AuditError::ShortWrite {
            path: log.path.clone(),
            written,
            len: bytes.len(),
        }),
        Err(e) => Err(io(e)),
    };
    if result.is_err() {
        let _ = file.set_len(before);
    }
    result
}

fn still_named(file: &File, path: &Path) -> std::io::Result<bool> {
    let held = file.metadata()?;
    match std::fs::symlink_metadata(path) {
        Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// `path.N`.
pub(super) fn numbered(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// `path` -> `path.1`, shifting `path.1` -> `path.2` ... and dropping `path.<keep>`. Called
/// with the live file's lock held, so no other writer renames at the same time.
fn rotate(path: &Path, keep: u32) -> std::io::Result<()> {
    let ignore_missing = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    ignore_missing(std::fs::remove_file(numbered(path, keep)))?;
    for n in (1..keep).rev() {
        ignore_missing(std::fs::rename(numbered(path, n), numbered(path, n + 1)))?;
    }
    std::fs::rename(path, numbered(path, 1))?;
    // The renames must survive a crash together with the records written after them.
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The end of a file, as far as the chain needs it.
enum TailBytes {
    Empty,
    Line(Vec<u8>),
    Cut(Vec<u8>),
}

impl TailBytes {
    fn view(&self) -> Tail<'_> {
        match self {
            TailBytes::Empty => Tail::Empty,
            TailBytes::Line(l) => Tail::Line(l),
            TailBytes::Cut(c) => Tail::Cut(c),
        }
    }
}

/// Reads backwards from `len` until the start of the last line (or `MAX_TAIL` bytes).
fn read_tail(file: &File, len: u64) -> std::io::Result<TailBytes> {
    if len == 0 {
        return Ok(TailBytes::Empty);
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut start = len;
    loop {
        // Skip the file's final newline when looking for the one before the last line.
        let search_from = if buf.last() == Some(&b'\n') {
            buf.len() - 1
        } else {
            buf.len()
        };
        if let Some(i) = buf[..search_from].iter().rposition(|b| *b == b'\n') {
            buf.drain(..=i);
            break;
        }
        if start == 0 || len - start >= MAX_TAIL {
            break;
        }
        let n = TAIL_CHUNK.min(start);
        start -= n;
        let mut chunk = vec![0u8; n as usize];
        file.read_exact_at(&mut chunk, start)?;
        chunk.extend_from_slice(&buf);
        buf = chunk;
    }
    Ok(match buf.strip_suffix(b"\n") {
        Some(line) => TailBytes::Line(line.to_vec()),
        None => TailBytes::Cut(buf),
    })
}

/// The last whole line of the file at `path`, or `None` when there is no such file.
fn last_line_of(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    Ok(match read_tail(&file, len)? {
        TailBytes::Empty => None,
        TailBytes::Line(l) | TailBytes::Cut(l) => Some(l),
    })
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests;
