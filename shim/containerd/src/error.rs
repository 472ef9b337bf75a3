//! The shim's error type and its one mapping onto ttrpc status codes.
//!
//! Errors keep their source (runsc's [`RunscError`] with subcommand, id, status and stderr; the
//! cgroup, rootfs, reaper, audit and stdio errors with their paths) until they leave the shim;
//! only [`ShimError::code`] decides what containerd sees. containerd turns the code back into its
//! own error kinds (errdefs), as it does for its own shims: NOT_FOUND for an unknown container or
//! exec (and a kill of a finished process), ALREADY_EXISTS for a duplicate id,
//! FAILED_PRECONDITION for a call in the wrong state or a spec the policy rejects,
//! INVALID_ARGUMENT for a malformed request, UNIMPLEMENTED for what runsc cannot do. The message
//! is what `ctr` and `kubectl describe` show: it names the cause once (the policy rule, the file,
//! runsc's own words), without repeating the operation at every layer.

use containerd_shim_protos::ttrpc::{self, Code};

use crate::options::OptionsError;
use crate::process::state::StateError;
use crate::stdio::StdioError;
use gvisor_hardened_core::artifacts::ArtifactsError;
use gvisor_hardened_core::audit::AuditError;
use gvisor_hardened_core::bundle::BundleError;
use gvisor_hardened_core::cgroup::CgroupError;
use gvisor_hardened_core::policy_source::PolicyLoadError;
use gvisor_hardened_core::reaper::ReaperError;
use gvisor_hardened_core::rootfs::RootfsError;
use gvisor_hardened_core::runsc::error::RunscError;
use gvisor_hardened_core::runtime::RunscConfigError;

#[derive(Debug, thiserror::Error)]
pub enum ShimError {
    #[error("container {0} not found")]
    NotFound(String),
    #[error("exec {exec_id} of container {id} not found")]
    ExecNotFound { id: String, exec_id: String },
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// `process` names it: "container c1", "exec e1 of container c1".
    #[error("{process}: {source}")]
    State {
        process: String,
        #[source]
        source: StateError,
    },
    #[error("{0} is not supported by gvisor-hardened (runsc)")]
    Unsupported(&'static str),
    #[error(transparent)]
    Policy(#[from] PolicyLoadError),
    #[error(transparent)]
    Options(#[from] OptionsError),
    /// The policy refuses the spec, the exec or the update; the message names the rule.
    #[error(transparent)]
    Rejected(#[from] policy_injector::HardenError),
    #[error(transparent)]
    Audit(#[from] AuditError),
    /// The artifact manifest the policy asks for could not be recorded.
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    #[error(transparent)]
    Stdio(#[from] StdioError),
    #[error(transparent)]
    Bundle(#[from] BundleError),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error(transparent)]
    Rootfs(#[from] RootfsError),
    #[error(transparent)]
    Runsc(#[from] RunscError),
    #[error(transparent)]
    RunscConfig(#[from] RunscConfigError),
    #[error("watching {what}: {source}")]
    Reaper {
        what: String,
        #[source]
        source: ReaperError,
    },
    /// `[mounts.workspace]` could not protect a writable bind's repositories as it must.
    #[error(transparent)]
    Workspace(#[from] gvisor_hardened_core::workspace::WorkspaceError),
    #[error(transparent)]
    Forwarder(#[from] gvisor_hardened_core::egress::install::ForwarderUnusable),
    #[error("{0}")]
    Internal(String),
}

/// An update's errors keep the codes and messages they had as the shim's own.
impl From<gvisor_hardened_core::sandbox::update::UpdateError> for ShimError {
    fn from(e: gvisor_hardened_core::sandbox::update::UpdateError) -> ShimError {
        use gvisor_hardened_core::sandbox::update::UpdateError as U;
        match e {
            U::Rejected(e) => ShimError::Rejected(e),
            U::Limits(e) => ShimError::InvalidArgument(e.to_string()),
            U::Cgroup(e) => ShimError::Cgroup(e),
            U::Runsc(e) => ShimError::Runsc(e),
        }
    }
}

/// The launch's refusals keep the codes and messages they had as the shim's own.
impl From<gvisor_hardened_core::sandbox::launch::LaunchError> for ShimError {
    fn from(e: gvisor_hardened_core::sandbox::launch::LaunchError) -> ShimError {
        use gvisor_hardened_core::sandbox::launch::LaunchError as L;
        match e {
            L::Cgroup(e) => ShimError::Cgroup(e),
            L::Credentials(e) => ShimError::Internal(format!("egress credentials: {e}")),
            L::IdleSampling(why) => ShimError::Internal(why),
        }
    }
}

impl From<gvisor_hardened_core::sandbox::start::StartError> for ShimError {
    fn from(e: gvisor_hardened_core::sandbox::start::StartError) -> ShimError {
        use gvisor_hardened_core::sandbox::start::StartError as S;
        match e {
            S::Artifacts(e) => ShimError::Artifacts(e),
            S::Walk(_) => ShimError::Internal(e.to_string()),
        }
    }
}

/// A release's first problem keeps the code it had as the shim's own.
impl From<gvisor_hardened_core::sandbox::release::ReleaseProblem> for ShimError {
    fn from(e: gvisor_hardened_core::sandbox::release::ReleaseProblem) -> ShimError {
        use gvisor_hardened_core::sandbox::release::ReleaseProblem as R;
        match e {
            R::Runsc(e) => ShimError::Runsc(e),
            R::Cgroup(e) => ShimError::Cgroup(e),
            R::NoRuntime(why) | R::Step(why) => ShimError::Internal(why),
        }
    }
}

/// The hardening's errors keep the codes and messages they had as the shim's own.
impl From<gvisor_hardened_core::prepare::PrepareError> for ShimError {
    fn from(e: gvisor_hardened_core::prepare::PrepareError) -> ShimError {
        use gvisor_hardened_core::prepare::PrepareError as P;
        match e {
            P::Policy(e) => ShimError::Policy(e),
            P::Bundle(e) => ShimError::Bundle(e),
            P::Audit(e) => ShimError::Audit(e),
            P::HostTree(msg) => ShimError::InvalidArgument(msg),
            P::RunscConfig(e) => ShimError::RunscConfig(e),
            P::Workspace(e) => ShimError::Workspace(e),
            P::Rejected(e) => ShimError::Rejected(e),
            e @ P::Serialise(_) => ShimError::Internal(e.to_string()),
            P::Forwarder(e) => ShimError::Forwarder(e),
        }
    }
}

impl ShimError {
    pub fn state(process: impl Into<String>, source: StateError) -> Self {
        ShimError::State {
            process: process.into(),
            source,
        }
    }

    pub fn code(&self) -> Code {
        use policy_injector::HardenError;
        match self {
            ShimError::NotFound(_) | ShimError::ExecNotFound { .. } => Code::NOT_FOUND,
            ShimError::AlreadyExists(_) => Code::ALREADY_EXISTS,
            ShimError::InvalidArgument(_) | ShimError::Options(_) | ShimError::Bundle(_) => {
                Code::INVALID_ARGUMENT
            }
            ShimError::State { source, .. } => match source {
                StateError::Finished => Code::NOT_FOUND,
                StateError::Invalid { .. } => Code::FAILED_PRECONDITION,
            },
            ShimError::Unsupported(_) => Code::UNIMPLEMENTED,
            ShimError::Rejected(HardenError::Rejected(_)) => Code::FAILED_PRECONDITION,
            ShimError::Rejected(HardenError::Malformed { .. }) => Code::INVALID_ARGUMENT,
            // The node's policy, or runsc as installed, cannot serve the request as configured.
            ShimError::Policy(_) | ShimError::RunscConfig(_) | ShimError::Forwarder(_) => {
                Code::FAILED_PRECONDITION
            }
            ShimError::Workspace(gvisor_hardened_core::workspace::WorkspaceError::Io {
                ..
            }) => Code::INTERNAL,
            ShimError::Workspace(_) => Code::FAILED_PRECONDITION,
            ShimError::Stdio(e) if e.is_bad_request() => Code::INVALID_ARGUMENT,
            ShimError::Cgroup(CgroupError::Exists { .. }) => Code::FAILED_PRECONDITION,
            // The policy names a signing key the node cannot use: fix the node, not the request.
            ShimError::Audit(AuditError::SigningKey { .. }) => Code::FAILED_PRECONDITION,
            ShimError::Runsc(e) => runsc_code(e),
            ShimError::Audit(_)
            | ShimError::Artifacts(_)
            | ShimError::Stdio(_)
            | ShimError::Cgroup(_)
            | ShimError::Rootfs(_)
            | ShimError::Reaper { .. }
            | ShimError::Internal(_) => Code::INTERNAL,
        }
    }
}

fn runsc_code(e: &RunscError) -> Code {
    match e {
        RunscError::NotFound { .. } | RunscError::AlreadyGone { .. } => Code::NOT_FOUND,
        RunscError::Timeout { .. } => Code::DEADLINE_EXCEEDED,
        RunscError::Unsupported(_) => Code::UNIMPLEMENTED,
        // runsc is missing or cannot run, or lacks what the policy needs: the node is not ready.
        RunscError::Spawn { .. } | RunscError::Feature(_) => Code::FAILED_PRECONDITION,
        // runsc ran and refused: its own words are the message, its verdict unknown to us.
        RunscError::Failed { .. } => Code::UNKNOWN,
        RunscError::Parse { .. } | RunscError::Io { .. } | RunscError::PidFile { .. } => {
            Code::INTERNAL
        }
    }
}

impl From<ShimError> for ttrpc::Error {
    fn from(e: ShimError) -> Self {
        ttrpc::Error::RpcStatus(ttrpc::get_status(e.code(), e.to_string()))
    }
}

pub type Result<T> = std::result::Result<T, ShimError>;

#[cfg(test)]
mod tests {
    use super::*;
    use gvisor_hardened_core::reaper::ExitStatus;
    use policy_injector::{HardenError, Rejection, Rule};
    use std::path::PathBuf;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "boom")
    }

    fn rejected() -> HardenError {
        HardenError::Rejected(vec![Rejection {
            rule: Rule::Mounts,
            field: "mounts[0].source".into(),
            reason: "/var/run/docker.sock is denied by [mounts] deny".into(),
        }])
    }

    /// The whole mapping and the message shape, pinned: one row per kind of failure.
    #[test]
    fn every_error_kind_maps_to_containerds_code_with_a_message_that_names_the_cause_once() {
        let rows: Vec<(ShimError, Code, &str)> = vec![
            (
                ShimError::NotFound("c1".into()),
                Code::NOT_FOUND,
                "container c1 not found",
            ),
            (
                ShimError::ExecNotFound {
                    id: "c1".into(),
                    exec_id: "e1".into(),
                },
                Code::NOT_FOUND,
                "exec e1 of container c1 not found",
            ),
            (
                ShimError::AlreadyExists("container c1".into()),
                Code::ALREADY_EXISTS,
                "container c1 already exists",
            ),
            (
                ShimError::state(
                    "container c1",
                    StateError::Invalid {
                        op: "start",
                        current: "running",
                    },
                ),
                Code::FAILED_PRECONDITION,
                "container c1: cannot start a running process",
            ),
            (
                ShimError::state("exec e1 of container c1", StateError::Finished),
                Code::NOT_FOUND,
                "exec e1 of container c1: process already finished",
            ),
            (
                ShimError::Rejected(rejected()),
                Code::FAILED_PRECONDITION,
                "rejected by policy: mounts: mounts[0].source: /var/run/docker.sock is denied by [mounts] deny",
            ),
            (
                ShimError::Rejected(HardenError::Malformed {
                    field: "process.args".into(),
                    reason: "expected an array".into(),
                }),
                Code::INVALID_ARGUMENT,
                "malformed spec: process.args: expected an array",
            ),
            (
                ShimError::InvalidArgument("bundle path \"b\" is not absolute".into()),
                Code::INVALID_ARGUMENT,
                "invalid request: bundle path \"b\" is not absolute",
            ),
            (
                ShimError::Bundle(BundleError::NotAnObject {
                    bundle: "/b".into(),
                    file: "config.json",
                }),
                Code::INVALID_ARGUMENT,
                "bundle /b: config.json is not a JSON object",
            ),
            (
                ShimError::Unsupported("checkpoint"),
                Code::UNIMPLEMENTED,
                "checkpoint is not supported by gvisor-hardened (runsc)",
            ),
            (
                ShimError::Runsc(RunscError::from_failure(
                    "start",
                    Some("c1"),
                    ExitStatus::Exited(128),
                    "starting container: sandbox is gone\n",
                )),
                Code::UNKNOWN,
                "runsc start c1 failed (exit code 128): starting container: sandbox is gone",
            ),
            (
                ShimError::Runsc(RunscError::from_failure(
                    "delete",
                    Some("c1"),
                    ExitStatus::Exited(128),
                    "loading container: file does not exist",
                )),
                Code::NOT_FOUND,
                "runsc delete c1: no such container: loading container: file does not exist",
            ),
            (
                ShimError::Runsc(RunscError::Timeout {
                    subcommand: "create",
                    id: Some("c1".into()),
                    timeout: std::time::Duration::from_secs(60),
                }),
                Code::DEADLINE_EXCEEDED,
                "runsc create c1 did not finish within 60s and was killed",
            ),
            (
                ShimError::Runsc(RunscError::Unsupported("update")),
                Code::UNIMPLEMENTED,
                "the installed runsc has no `update` subcommand",
            ),
            (
                ShimError::Cgroup(CgroupError::Exists {
                    path: "/sys/fs/cgroup/memory/default/c1".into(),
                }),
                Code::FAILED_PRECONDITION,
                "cgroup /sys/fs/cgroup/memory/default/c1 already exists: runsc would join it without enforcing the policy's limits; refusing to start the sandbox there",
            ),
            (
                ShimError::Stdio(StdioError::NotAFifo {
                    what: "stdout",
                    path: "/tmp/x".into(),
                }),
                Code::INVALID_ARGUMENT,
                "stdout \"/tmp/x\" is not a fifo",
            ),
            (
                ShimError::Stdio(StdioError::Fifo {
                    what: "stderr",
                    path: "/nonexistent".into(),
                    source: io(std::io::ErrorKind::NotFound),
                }),
                Code::INVALID_ARGUMENT,
                "opening stderr fifo /nonexistent: boom",
            ),
            (
                ShimError::Audit(AuditError::Io {
                    path: PathBuf::from("/var/log/gvisor-hardened/audit.jsonl"),
                    source: io(std::io::ErrorKind::PermissionDenied),
                }),
                Code::INTERNAL,
                "audit log /var/log/gvisor-hardened/audit.jsonl: boom",
            ),
            (
                ShimError::Audit(AuditError::SigningKey {
                    path: "/etc/gvisor-hardened/audit.key".into(),
                    reason: "readable by group or others (mode 0644)".into(),
                }),
                Code::FAILED_PRECONDITION,
                "audit signing key /etc/gvisor-hardened/audit.key: readable by group or others (mode 0644)",
            ),
            (
                ShimError::Policy(PolicyLoadError::TooLarge {
                    path: "/etc/gvisor-hardened/policy.toml".into(),
                }),
                Code::FAILED_PRECONDITION,
                "policy /etc/gvisor-hardened/policy.toml: larger than 1048576 bytes",
            ),
            (
                ShimError::RunscConfig(RunscConfigError::Platform("vmware".into())),
                Code::FAILED_PRECONDITION,
                "policy runsc.platform \"vmware\" is not a platform this shim knows (ptrace, kvm, systrap)",
            ),
        ];
        for (err, code, message) in rows {
            assert_eq!((err.code(), err.to_string().as_str()), (code, message));
            match ttrpc::Error::from(err) {
                ttrpc::Error::RpcStatus(s) => {
                    assert_eq!((s.code(), s.message()), (code, message))
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
