//! The shim's error type and its mapping onto ttrpc status codes.
//!
//! containerd turns the status code back into its own error kinds (errdefs): NOT_FOUND for an
//! unknown container or exec, ALREADY_EXISTS for a duplicate id, FAILED_PRECONDITION for a call
//! in the wrong state, UNIMPLEMENTED for what runsc cannot do. The message is what `ctr` and
//! `kubectl describe` show, so it names the cause (the policy rule, the file, runsc's stderr).

use containerd_shim_protos::ttrpc::{self, Code};

use crate::audit::AuditError;
use crate::policy_source::PolicyLoadError;
use crate::process::state::StateError;
use crate::stdio::StdioError;

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
    #[error("{0}")]
    State(#[from] StateError),
    #[error("{0} is not supported by gvisor-hardened (runsc)")]
    Unsupported(&'static str),
    #[error("{0}")]
    Policy(#[from] PolicyLoadError),
    #[error("{0}")]
    Options(#[from] crate::options::OptionsError),
    #[error("{0}")]
    Rejected(policy_injector::HardenError),
    #[error("{0}")]
    Audit(#[from] AuditError),
    #[error("{0}")]
    Stdio(#[from] StdioError),
    #[error("bundle {path}: {reason}")]
    Bundle { path: String, reason: String },
    #[error("cgroup {0} already exists: runsc would join it without enforcing the policy's limits; refusing to start the sandbox there")]
    CgroupExists(String),
    #[error("rootfs: {0}")]
    Rootfs(String),
    #[error("{0}")]
    Runsc(String),
    #[error("{0}")]
    Internal(String),
}

impl ShimError {
    pub fn code(&self) -> Code {
        match self {
            ShimError::NotFound(_) | ShimError::ExecNotFound { .. } => Code::NOT_FOUND,
            ShimError::AlreadyExists(_) => Code::ALREADY_EXISTS,
            ShimError::InvalidArgument(_)
            | ShimError::Bundle { .. }
            | ShimError::Options(_)
            | ShimError::Policy(_)
            | ShimError::Rejected(_) => Code::INVALID_ARGUMENT,
            ShimError::State(_) | ShimError::CgroupExists(_) => Code::FAILED_PRECONDITION,
            ShimError::Unsupported(_) => Code::UNIMPLEMENTED,
            ShimError::Audit(_)
            | ShimError::Stdio(_)
            | ShimError::Rootfs(_)
            | ShimError::Runsc(_)
            | ShimError::Internal(_) => Code::INTERNAL,
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

    #[test]
    fn unknown_container_maps_to_not_found() {
        let e: ttrpc::Error = ShimError::NotFound("c1".into()).into();
        match e {
            ttrpc::Error::RpcStatus(s) => {
                assert_eq!(s.code(), Code::NOT_FOUND);
                assert_eq!(s.message(), "container c1 not found");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn checkpoint_maps_to_unimplemented_with_a_clear_message() {
        let e = ShimError::Unsupported("checkpoint");
        assert_eq!(e.code(), Code::UNIMPLEMENTED);
        assert_eq!(
            e.to_string(),
            "checkpoint is not supported by gvisor-hardened (runsc)"
        );
    }
}
