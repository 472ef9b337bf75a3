//! runsc-hardened's errors. The message is what the engine shows (`docker run` prints
//! "OCI runtime create failed: <message>"), so each names its cause once: the policy rule, the
//! file, runsc's own words.

use std::path::PathBuf;

use gvisor_hardened_core::audit::AuditError;
use gvisor_hardened_core::cgroup::CgroupError;
use gvisor_hardened_core::reaper::ReaperError;
use gvisor_hardened_core::runsc::error::RunscError;
use gvisor_hardened_core::runtime::RunscConfigError;

use super::cli::CliError;

#[derive(Debug, thiserror::Error)]
pub enum OciError {
    #[error(transparent)]
    Cli(#[from] CliError),
    #[error("--systemd-cgroup: {}", if *.systemd_running {
        "systemd-managed cgroups are not supported by runsc-hardened; use the cgroupfs driver (Docker: native.cgroupdriver=cgroupfs, Podman: --cgroup-manager cgroupfs)"
    } else {
        "this host does not run systemd, and runsc would then run the container with no cgroup at all (no memory, CPU or process limit); use the cgroupfs driver (Docker: native.cgroupdriver=cgroupfs, Podman: --cgroup-manager cgroupfs)"
    })]
    SystemdCgroup { systemd_running: bool },
    #[error(
        "--preserve-fds {0}: passing host file descriptors into a gVisor sandbox is not supported"
    )]
    PreserveFds(u32),
    #[error(transparent)]
    BadId(#[from] gvisor_hardened_core::container_id::InvalidId),
    /// runc's words ("does not exist"), which containerd's runc shim matches.
    #[error("container {0} does not exist")]
    NotFound(String),
    #[error("container {0} already exists")]
    AlreadyExists(String),
    #[error("cannot delete container {0} that is not stopped: use --force")]
    NotStopped(String),
    /// runc's words: containerd's runc shim matches "container not running" to report an
    /// already finished process rather than a failure.
    #[error("container not running: {0}")]
    NotRunning(String),
    /// The hardening pipeline (`prepare`): a rejection reads "rejected by policy: RULE: ...".
    #[error(transparent)]
    Prepare(#[from] gvisor_hardened_core::prepare::PrepareError),
    #[error(transparent)]
    Rejected(#[from] policy_injector::HardenError),
    /// The artifact manifest the policy asks for could not be recorded.
    #[error(transparent)]
    Artifacts(#[from] gvisor_hardened_core::artifacts::ArtifactsError),
    #[error(transparent)]
    Runsc(#[from] RunscError),
    #[error(transparent)]
    RunscConfig(#[from] RunscConfigError),
    #[error("the policy kept for container {id}: {source}")]
    Policy {
        id: String,
        #[source]
        source: policy_injector::PolicyError,
    },
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    #[error(transparent)]
    Reaper(#[from] ReaperError),
    /// The sandbox's egress CA or credential bundle could not be made (never carries a key).
    #[error(transparent)]
    Credential(#[from] gvisor_hardened_core::egress::credentials::CredentialError),
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Guard(String),
    #[error("{what}: {reason}")]
    Invalid { what: &'static str, reason: String },
}

impl OciError {
    pub fn io(
        what: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> OciError {
        let path = path.into();
        move |source| OciError::Io { what, path, source }
    }
}

/// The launch sequence's refusals, as runsc-hardened's own.
impl From<gvisor_hardened_core::sandbox::launch::LaunchError> for OciError {
    fn from(e: gvisor_hardened_core::sandbox::launch::LaunchError) -> OciError {
        use gvisor_hardened_core::sandbox::launch::LaunchError as L;
        match e {
            L::Cgroup(e) => OciError::Cgroup(e),
            L::Credentials(e) => OciError::Credential(e),
            L::IdleSampling(reason) => OciError::Invalid {
                what: "the idle timeout",
                reason,
            },
        }
    }
}

/// The start sequence's refusals, as runsc-hardened's own.
impl From<gvisor_hardened_core::sandbox::start::StartError> for OciError {
    fn from(e: gvisor_hardened_core::sandbox::start::StartError) -> OciError {
        use gvisor_hardened_core::sandbox::start::StartError as S;
        match e {
            S::Artifacts(e) => OciError::Artifacts(e),
            S::Walk(reason) => OciError::Invalid {
                what: "the start manifest",
                reason,
            },
        }
    }
}

pub type Result<T, E = OciError> = std::result::Result<T, E>;
