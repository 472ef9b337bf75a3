//! The sandbox's host cgroups: where they are, what they count, how the sandbox died, and limit
//! updates when runsc cannot apply them itself. Measured behaviour is in `NOTES.md` beside this
//! file: runsc keeps the cgroups until `runsc delete`, so every counter can be read after the
//! sandbox exit — read them *before* deleting.

pub mod adopt;
pub mod exit_cause;
pub mod files;
pub mod oom;
pub mod paths;
pub mod update;

use std::path::PathBuf;

pub use paths::SandboxCgroup;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup file {path}: unexpected content {content:?}")]
    Parse { path: PathBuf, content: String },
    #[error("pid {pid}: no cgroup found for the sandbox ({reason})")]
    NotFound { pid: i32, reason: String },
    #[error("cgroup {version} has no {controller} controller for this sandbox")]
    NoController {
        version: &'static str,
        controller: &'static str,
    },
    #[error("cannot encode metrics: {0}")]
    Encode(String),
    #[error("invalid limit: {0}")]
    InvalidLimit(String),
    #[error("cgroup {} already exists: runsc would join it without enforcing the policy's limits; refusing to start the sandbox there", path.display())]
    Exists { path: PathBuf },
    #[error("cgroups left behind: {}", .0.join("; "))]
    LeftBehind(Vec<String>),
}

#[cfg(all(test, feature = "host-tests"))]
mod real_tests;
