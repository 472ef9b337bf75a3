//! Artifact manifests: what a sandbox left in its writable host volumes.
//!
//! For each writable bind mount of the hardened spec ([`writable_binds`]: Kubernetes emptyDir
//! volumes, a workspace bind) the shim records a manifest at start and at exit
//! ([`build_manifest`]): every entry's path, type, size, mode and mtime, the sha256 of each
//! regular file, the target of each symlink. It writes each manifest next to the audit log
//! ([`write_manifest`]), and at exit the diff against the start manifest ([`diff`]) and the
//! sha256 of the written file go into the exit record.
//!
//! The trees are written by untrusted code, so the walk assumes the worst: symlinks are read,
//! never followed; FIFOs, sockets and devices are recorded from `lstat` and never opened; a
//! regular file is opened only through an `O_PATH` descriptor whose inode was checked, so a file
//! swapped for a FIFO between the look and the open cannot block the shim; other filesystems
//! and directories deeper than [`MAX_DEPTH`] are named, not entered. Three bounds cap the cost
//! ([`Bounds`]): entries named, bytes hashed, and a deadline; the manifest says which bound
//! stopped it or left a file unhashed. Names are bytes: one that is not UTF-8 is kept exactly
//! (as hex in `path_hex`) beside a readable lossy form. (Under runsc a FIFO or socket made
//! inside the sandbox stays in the sentry and never reaches the host volume, measured in
//! `tests/tests/integration/artifact_manifests.rs`; the volume can still hold them from the
//! host or another runtime, so the walk is ready for them.)
//!
//! Measured (`cargo run --release -p gvisor-hardened-core --example artifact-walk`,
//! ext4, page cache warm, load 6-7 on 2 shared cores): 1,000,000 empty files in one directory
//! with the default bounds stop at max_files = 50,000 in 0.36-0.47 s (21 MB peak RSS, 8.1 MB of
//! JSON); with 100,000 it was 0.73-1.8 s (4.1 s with a cold cache), 40 MB RSS, 16 MB of JSON,
//! hence the default of 50,000. With no file bound, the 5 s deadline stopped the walk at
//! 228,001 entries after 5.39 s (sorting and building the manifest after the deadline took the
//! rest). A 1 GiB file with max_hashed_bytes below its size: named, not read, < 1 ms; hashed
//! (max_hashed_bytes 2 GiB): 1.85 s, 0.7 s of CPU.
//!
//! The lifecycle calls [`record_start`] (before the sandbox runs) and [`record_exit`] (after it
//! ended, before the exit is announced). At exit: build the exit manifest, read the start
//! manifest back with [`read_manifest`] (its sha256 must match the one recorded at start),
//! diff, write the exit manifest with the diff, and hand back what the exit record carries:
//! [`WrittenManifest::sha256`] and [`ManifestDiff::summary`].

mod diff;
mod entry;
mod mounts;
mod record;
mod store;
mod walk;

#[cfg(test)]
mod walk_tests;

use std::path::PathBuf;
use std::time::{Duration, Instant};

pub use diff::{diff, Change, DiffSummary, ManifestDiff};
pub use entry::{Entry, EntryKind, NotHashed, RawPath, Skipped};
pub use mounts::{writable_binds, WritableMount};
pub use record::{
    record_exit, record_exit_bounded, record_start, record_start_of, ExitRecord, StartRecord,
    WALK_GRACE,
};
pub use store::{artifacts_dir, read_manifest, write_manifest, Phase, WrittenManifest};
pub use walk::{build_manifest, Manifest, RootManifest, RootStats, StopReason};

/// Directories nested deeper than this below a mount are named but not entered: each open
/// level holds a descriptor.
pub const MAX_DEPTH: usize = 128;

/// Paths of each kind of change the exit audit record lists; the full diff is in the exit
/// manifest file, which the record's digest covers.
pub const DIFF_PATHS_IN_RECORD: usize = 100;

/// What one manifest may cost.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Entries named, over all mounts; the walk stops at this many.
    pub max_files: u64,
    /// Bytes read for hashing, over all mounts; a file that would cross it is not hashed.
    pub max_hashed_bytes: u64,
    /// The walk stops when this passes (checked before each entry and each 64 KiB read).
    pub deadline: Instant,
}

impl Bounds {
    /// The policy's bounds for a walk that starts now.
    pub fn from_policy(policy: &policy_injector::policy::ArtifactsPolicy) -> Bounds {
        Bounds::new(
            policy.max_files,
            policy.max_hashed_bytes.0,
            policy.max_walk_time.0,
        )
    }

    pub fn new(max_files: u64, max_hashed_bytes: u64, max_time: Duration) -> Bounds {
        Bounds {
            max_files,
            max_hashed_bytes,
            deadline: Instant::now() + max_time,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArtifactsError {
    #[error("artifact manifest {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("artifact manifest {path}: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("artifact manifest {path}: sha256 is {actual}, the start record says {expected}")]
    DigestMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("container id {0:?} cannot name a manifest file")]
    BadContainerId(String),
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
