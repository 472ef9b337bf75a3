//! The bounded walk of the writable mounts. Every step works on descriptors (`openat`,
//! `fstatat` with `AT_SYMLINK_NOFOLLOW`, `readlinkat`), so a name swapped for a symlink between
//! two calls cannot lead the walk out of the mount.

use std::ffi::{CStr, CString};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::Instant;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags, CWD};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::entry::{Entry, EntryKind, Meta, NotHashed, RawPath, Skipped};
use super::{hex, Bounds, WritableMount, MAX_DEPTH};

/// Bytes read per `read(2)` while hashing; the deadline is checked between reads.
const HASH_CHUNK: usize = 64 << 10;

/// Why the walk ended before it had seen everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    MaxFiles,
    Deadline,
}

/// Counts for one mount.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootStats {
    pub entries: u64,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// FIFOs, sockets, devices.
    pub special: u64,
    /// Sum of the regular files' sizes.
    pub bytes: u64,
    /// Bytes read for hashing.
    pub hashed_bytes: u64,
    /// Regular files without a sha256.
    pub not_hashed: u64,
    /// Directories named but not entered.
    pub skipped_dirs: u64,
    /// Directories that failed part-way through reading, and entries that could not be
    /// looked at for another reason than having gone.
    #[serde(default)]
    pub errors: u64,
}

/// The manifest of one writable mount.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootManifest {
    pub destination: String,
    pub source: String,
    /// The mount's source could not be opened; it has no entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The walk stopped in (or before) this mount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopReason>,
    pub stats: RootStats,
    /// Sorted by path bytes.
    pub entries: Vec<Entry>,
}

/// The manifest of all writable mounts of a sandbox at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Every mount opened and walked to the end, no directory left out.
    pub complete: bool,
    /// Every regular file named has a sha256.
    pub all_hashed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<StopReason>,
    pub max_files: u64,
    pub max_hashed_bytes: u64,
    pub elapsed_ms: u64,
    pub mounts: Vec<RootManifest>,
}

/// `<gitdir>/gvisor-hardened`, as `crate::workspace` makes it: a directory of that name owned
/// by the runtime's user (root on a node; a sandbox has no capability to make one) with mode
/// 0700.
fn is_staging_parent(name: &[u8], st: &Meta) -> bool {
    name == policy_injector::workspace::STAGING_DIR.as_bytes()
        && FileType::from_raw_mode(st.mode) == FileType::Directory
        && st.uid == rustix::process::geteuid().as_raw()
        && st.mode & 0o777 == 0o700
}

/// Walks each mount within `bounds` (shared by all mounts) and returns what it saw. Never fails
/// as a whole: a mount that cannot be opened carries its error, a file that cannot be read is
/// named without a hash. Blocking: run it on a blocking thread.
pub fn build_manifest(mounts: &[WritableMount], bounds: &Bounds) -> Manifest {
    let started = Instant::now();
    let mut walker = Walker::new(bounds);
    let roots: Vec<RootManifest> = mounts.iter().map(|m| walker.root(m)).collect();
    let complete = walker.stopped.is_none()
        && roots
            .iter()
            .all(|r| r.error.is_none() && r.stats.skipped_dirs == 0 && r.stats.errors == 0);
    let all_hashed = roots.iter().all(|r| r.stats.not_hashed == 0);
    Manifest {
        complete,
        all_hashed,
        stopped: walker.stopped,
        max_files: bounds.max_files,
        max_hashed_bytes: bounds.max_hashed_bytes,
        elapsed_ms: started.elapsed().as_millis() as u64,
        mounts: roots,
    }
}

pub(super) struct Walker<'b> {
    bounds: &'b Bounds,
    named: u64,
    hashed: u64,
    stopped: Option<StopReason>,
    buf: Vec<u8>,
}

struct Frame {
    dir: DirStream,
    rel: Vec<u8>,
    depth: usize,
}

impl<'b> Walker<'b> {
    pub(super) fn new(bounds: &'b Bounds) -> Walker<'b> {
        Walker {
            bounds,
            named: 0,
            hashed: 0,
            stopped: None,
            buf: vec![0; HASH_CHUNK],
        }
    }

    fn out_of_time(&mut self) -> bool {
        if self.stopped.is_none() && Instant::now() >= self.bounds.deadline {
            self.stopped = Some(StopReason::Deadline);
        }
        self.stopped == Some(StopReason::Deadline)
    }

    fn root(&mut self, m: &WritableMount) -> RootManifest {
        let mut out = RootManifest {
            destination: m.destination.clone(),
            source: m.source.to_string_lossy().into_owned(),
            error: None,
            stopped: None,
            stats: RootStats::default(),
            entries: Vec::new(),
        };
        if self.stopped.is_some() || self.out_of_time() {
            out.stopped = self.stopped;
            return out;
        }
        let hashed_before = self.hashed;
        // The source itself is followed if it is a symlink, as the bind mount followed it.
        let opened = CString::new(m.source.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
            .and_then(|c| open_path(CWD, &c, OFlags::empty()))
            .and_then(|fd| fstat(fd.as_fd()).map(|st| (fd, st)));
        let (fd, st) = match opened {
            Ok(v) => v,
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        };
        let kind = EntryKind::from_mode(st.mode);
        match kind {
            EntryKind::Dir => match open_dir_at(fd.as_fd(), c".") {
                Ok(dir) => self.walk_dir(dir, st.dev, &mut out),
                Err(e) => out.error = Some(e.to_string()),
            },
            _ => {
                // A single-file bind: one entry, path "".
                self.named += 1;
                let mut entry = Entry::new(RawPath::default(), kind, &st);
                if kind == EntryKind::File {
                    self.hash_opened(&mut entry, fd, &st);
                }
                count(&mut out.stats, &entry);
                out.entries.push(entry);
            }
        }
        out.stopped = self.stopped;
        out.stats.hashed_bytes = self.hashed - hashed_before;
        out.entries.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        out
    }

    fn walk_dir(&mut self, root: DirStream, root_dev: u64, out: &mut RootManifest) {
        let mut frames = vec![Frame {
            dir: root,
            rel: Vec::new(),
            depth: 0,
        }];
        while let Some(top) = frames.last_mut() {
            if self.out_of_time() {
                return;
            }
            let name = match top.dir.next_name() {
                Ok(Some(n)) => n,
                Ok(None) => {
                    frames.pop();
                    continue;
                }
                Err(_) => {
                    out.stats.errors += 1;
                    frames.pop();
                    continue;
                }
            };
            let name_bytes = name.to_bytes();
            if name_bytes == b"." || name_bytes == b".." {
                continue;
            }
            if self.named >= self.bounds.max_files {
                self.stopped = Some(StopReason::MaxFiles);
                return;
            }
            let depth = top.depth;
            let mut rel = Vec::with_capacity(top.rel.len() + 1 + name_bytes.len());
            if !top.rel.is_empty() {
                rel.extend_from_slice(&top.rel);
                rel.push(b'/');
            }
            rel.extend_from_slice(name_bytes);
            let dirfd = top.dir.fd();
            let st = match fstatat_nofollow(dirfd, &name) {
                Ok(st) => st,
                // Removed since readdir saw it: it is not there any more.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(_) => {
                    out.stats.errors += 1;
                    continue;
                }
            };
            if is_staging_parent(name_bytes, &st) {
                // The runtime's own staging copies of git directories (crate::workspace): not
                // what the sandbox left, and gone once the exit concludes.
                continue;
            }
            self.named += 1;
            let kind = EntryKind::from_mode(st.mode);
            let mut entry = Entry::new(RawPath(rel), kind, &st);
            let mut child = None;
            match kind {
                EntryKind::File => self.hash_at(&mut entry, dirfd, &name, &st),
                EntryKind::Symlink => {
                    entry.target = readlinkat(dirfd, &name).ok().map(RawPath);
                }
                EntryKind::Dir if depth + 1 >= MAX_DEPTH => entry.skipped = Some(Skipped::Depth),
                EntryKind::Dir if st.dev != root_dev => {
                    entry.skipped = Some(Skipped::OtherFilesystem)
                }
                EntryKind::Dir => match open_dir_at(dirfd, &name) {
                    Ok(d) => child = Some(d),
                    Err(_) => entry.skipped = Some(Skipped::Unreadable),
                },
                // FIFOs, sockets and devices: lstat is all they get.
                _ => {}
            }
            if let Some(dir) = child {
                frames.push(Frame {
                    dir,
                    rel: entry.path.0.clone(),
                    depth: depth + 1,
                });
            }
            count(&mut out.stats, &entry);
            out.entries.push(entry);
            if self.stopped.is_some() {
                return;
            }
        }
    }

    /// Hashes the regular file `name` in `dirfd`, which `lstat` described as `st`.
    pub(super) fn hash_at(
        &mut self,
        entry: &mut Entry,
        dirfd: BorrowedFd<'_>,
        name: &CStr,
        st: &Meta,
    ) {
        if st.size == 0 {
            // Nothing to read, so nothing can block or change under the read.
            entry.sha256 = Some(hex(&Sha256::digest(b"")));
            return;
        }
        if self.over_budget(st) {
            entry.not_hashed = Some(NotHashed::MaxHashedBytes);
            return;
        }
        match open_path(dirfd, name, OFlags::NOFOLLOW) {
            Ok(fd) => self.hash_opened(entry, fd, st),
            Err(_) => entry.not_hashed = Some(NotHashed::Unreadable),
        }
    }

    fn over_budget(&self, st: &Meta) -> bool {
        self.hashed.saturating_add(st.size) > self.bounds.max_hashed_bytes
    }

    /// Hashes the file behind an `O_PATH` descriptor, if it is still the regular file `st`
    /// describes. Reads at most `st_size` bytes, so a growing file cannot stretch the read.
    fn hash_opened(&mut self, entry: &mut Entry, path_fd: OwnedFd, st: &Meta) {
        if self.over_budget(st) {
            entry.not_hashed = Some(NotHashed::MaxHashedBytes);
            return;
        }
        let same = fstat(path_fd.as_fd()).is_ok_and(|now| {
            FileType::from_raw_mode(now.mode) == FileType::RegularFile
                && now.ino == st.ino
                && now.dev == st.dev
        });
        if !same {
            entry.not_hashed = Some(NotHashed::ChangedWhileHashed);
            return;
        }
        // Reopening through /proc opens exactly the inode just checked; O_NONBLOCK and
        // O_NOCTTY are belt and braces, since it is a regular file.
        let proc_path = CString::new(format!("/proc/self/fd/{}", path_fd.as_raw_fd()))
            .expect("no NUL in a number");
        let mut file = match open_at(
            CWD,
            &proc_path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY,
        ) {
            Ok(fd) => std::fs::File::from(fd),
            Err(_) => {
                entry.not_hashed = Some(NotHashed::Unreadable);
                return;
            }
        };
        let mut hasher = Sha256::new();
        let mut remaining = st.size;
        while remaining > 0 {
            if self.out_of_time() {
                entry.not_hashed = Some(NotHashed::Deadline);
                return;
            }
            let want = remaining.min(self.buf.len() as u64) as usize;
            let n = match file.read(&mut self.buf[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => {
                    entry.not_hashed = Some(NotHashed::Unreadable);
                    return;
                }
            };
            if n == 0 {
                // Shorter than lstat said: truncated while we read.
                entry.not_hashed = Some(NotHashed::ChangedWhileHashed);
                return;
            }
            hasher.update(&self.buf[..n]);
            self.hashed += n as u64;
            remaining -= n as u64;
        }
        let unchanged =
            fstat(file.as_fd()).is_ok_and(|now| now.size == st.size && now.mtime == st.mtime);
        if unchanged {
            entry.sha256 = Some(hex(&hasher.finalize()));
        } else {
            entry.not_hashed = Some(NotHashed::ChangedWhileHashed);
        }
    }
}

fn count(stats: &mut RootStats, e: &Entry) {
    stats.entries += 1;
    match e.kind {
        EntryKind::File => {
            stats.files += 1;
            stats.bytes += e.size;
            if e.not_hashed.is_some() {
                stats.not_hashed += 1;
            }
        }
        EntryKind::Dir => stats.dirs += 1,
        EntryKind::Symlink => stats.symlinks += 1,
        _ => stats.special += 1,
    }
    if e.skipped.is_some() {
        stats.skipped_dirs += 1;
    }
}

// ---- thin syscall wrappers (rustix) ------------------------------------------------------

/// `openat` of an existing file, close-on-exec.
fn open_at(dirfd: BorrowedFd<'_>, name: &CStr, flags: OFlags) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        dirfd,
        name,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// An `O_PATH` descriptor: opening it has no side effect on any kind of file.
fn open_path(dirfd: BorrowedFd<'_>, name: &CStr, extra: OFlags) -> io::Result<OwnedFd> {
    open_at(dirfd, name, OFlags::PATH | extra)
}

fn open_dir_at(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<DirStream> {
    let fd = open_at(
        dirfd,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
    )?;
    Ok(DirStream(Dir::new(fd)?))
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<Meta> {
    Ok(Meta::from(&rustix::fs::fstat(fd)?))
}

pub(super) fn fstatat_nofollow(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<Meta> {
    Ok(Meta::from(&rustix::fs::statat(
        dirfd,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
    )?))
}

fn readlinkat(dirfd: BorrowedFd<'_>, name: &CStr) -> io::Result<Vec<u8>> {
    Ok(rustix::fs::readlinkat(dirfd, name, Vec::new())?.into_bytes())
}

/// A directory stream over a descriptor, read in large batches, so a directory of a million
/// entries is streamed, never held.
struct DirStream(Dir);

impl DirStream {
    fn fd(&self) -> BorrowedFd<'_> {
        // rustix keeps the descriptor it was given: always there while the stream lives.
        self.0
            .fd()
            .expect("a directory stream keeps its descriptor")
    }

    fn next_name(&mut self) -> io::Result<Option<CString>> {
        match self.0.read() {
            None => Ok(None),
            Some(Ok(entry)) => Ok(Some(entry.file_name().to_owned())),
            Some(Err(e)) => Err(e.into()),
        }
    }
}
