//! The harness's error type: every variant names what was being done and carries the details a
//! failing test needs (paths, commands, output, containerd's log).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

/// Errors from the harness itself (not from the code under test).
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// A binary the harness needs is not installed.
    #[error("required binary `{0}` not found on PATH")]
    MissingBinary(String),

    /// A child process could not be started.
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },

    /// A command did not finish before its deadline and was killed.
    #[error("`{command}` did not finish within {timeout:?} (killed)\nstdout: {stdout}\nstderr: {stderr}")]
    Timeout {
        command: String,
        timeout: Duration,
        stdout: String,
        stderr: String,
    },

    /// A command exited unsuccessfully where success was required.
    #[error("`{command}` failed ({status})\nstdout: {stdout}\nstderr: {stderr}")]
    CommandFailed {
        command: String,
        status: String,
        stdout: String,
        stderr: String,
    },

    /// containerd exited before it became ready.
    #[error("containerd exited during startup ({status}); its log:\n{log}")]
    ContainerdExited { status: String, log: String },

    /// containerd did not become ready in time, or came up without a plugin we need.
    #[error("containerd not ready: {reason}; its log:\n{log}")]
    ContainerdNotReady { reason: String, log: String },

    /// The test image could not be built.
    #[error("building the test image: {0}")]
    Image(String),

    /// A line printed by the sandbox probe does not follow its output format.
    #[error("unparsable probe output {line:?}: {reason}")]
    ProbeOutput { line: String, reason: &'static str },

    /// The config hook of [`crate::ContainerdOptions`] failed.
    #[error("preparing containerd's config: {0}")]
    Config(String),

    /// A CRI call failed (see [`crate::cri::CriError`]).
    #[error(transparent)]
    Cri(#[from] crate::cri::CriError),

    /// Driving a shim directly (start action, ttrpc) failed in the harness's own steps.
    #[error("shim {what}: {reason}")]
    Shim { what: String, reason: String },

    /// A network target of the test's own (see [`crate::netns`]) could not be set up or was
    /// not reachable from the host.
    #[error("test network: {0}")]
    Network(String),

    /// A polled condition did not become true before its deadline.
    #[error("gave up after {timeout:?} waiting for {what}")]
    Deadline { what: String, timeout: Duration },
}

impl HarnessError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        HarnessError::Io {
            what,
            path: path.into(),
            source,
        }
    }
}

/// Result alias for the harness.
pub type Result<T, E = HarnessError> = std::result::Result<T, E>;
