//! Errors of runsc invocations, with the subcommand, container id, exit status and runsc's own
//! message so a failure names its cause.

use std::time::Duration;

use crate::reaper::{ExitStatus, ReaperError};

use super::features::FeatureError;

#[derive(Debug, thiserror::Error)]
pub enum RunscError {
    #[error("cannot run runsc {subcommand}: {source}")]
    Spawn {
        subcommand: &'static str,
        #[source]
        source: ReaperError,
    },
    /// runsc ran and failed. `stderr` is runsc's message, trimmed.
    #[error("runsc {subcommand}{} failed ({status}): {stderr}", for_id(.id))]
    Failed {
        subcommand: &'static str,
        id: Option<String>,
        status: ExitStatus,
        stderr: String,
    },
    /// The container or process is not running any more (or never started): signalling it is
    /// moot. Callers treat this as success for kill, e.g. so StopPodSandbox does not hang.
    #[error("runsc {subcommand} {id}: not running any more: {stderr}")]
    AlreadyGone {
        subcommand: &'static str,
        id: String,
        stderr: String,
    },
    /// runsc has no state for this id under its root.
    #[error("runsc {subcommand} {id}: no such container: {stderr}")]
    NotFound {
        subcommand: &'static str,
        id: String,
        stderr: String,
    },
    #[error("runsc {subcommand}{} did not finish within {timeout:?} and was killed", for_id(.id))]
    Timeout {
        subcommand: &'static str,
        id: Option<String>,
        timeout: Duration,
    },
    #[error("runsc {subcommand}: cannot parse its output {output:?}: {source}")]
    Parse {
        subcommand: &'static str,
        output: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("runsc {subcommand}: {context}: {source}")]
    Io {
        subcommand: &'static str,
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("pid file {path}: {reason}")]
    PidFile {
        path: std::path::PathBuf,
        reason: String,
    },
    /// The installed runsc lacks a subcommand (e.g. `update` in 20221219).
    #[error("the installed runsc has no `{0}` subcommand")]
    Unsupported(&'static str),
    #[error(transparent)]
    Feature(#[from] FeatureError),
}

fn for_id(id: &Option<String>) -> String {
    match id {
        Some(id) => format!(" {id}"),
        None => String::new(),
    }
}

impl RunscError {
    /// Turns a failed invocation into the most specific variant, from runsc's message.
    ///
    /// runsc exits 128 for every failure, so only the text tells them apart. Messages seen from
    /// 20221219 (see the client tests) and in the project notes:
    /// - `loading container: file does not exist`: no state under `--root` (any subcommand);
    ///   `FetchSpec failed: loading container: open ROOT/ID_sandbox:SB.state: no such file or
    ///   directory` when the state went while runsc loaded it.
    /// - kill of an exited sandbox: `connecting to control server at PID N: connection refused`.
    /// - kill of a subcontainer: `sandbox is not running`, `cannot signal container ... in state
    ///   created|stopped`.
    pub fn from_failure(
        subcommand: &'static str,
        id: Option<&str>,
        status: ExitStatus,
        stderr: &str,
    ) -> RunscError {
        let stderr = stderr.trim().to_string();
        if let Some(id) = id {
            if is_not_found(&stderr) {
                return RunscError::NotFound {
                    subcommand,
                    id: id.to_string(),
                    stderr,
                };
            }
            if (subcommand == "kill" && is_not_running(&stderr))
                || (subcommand == "delete" && is_sandbox_dead(&stderr))
            {
                return RunscError::AlreadyGone {
                    subcommand,
                    id: id.to_string(),
                    stderr,
                };
            }
        }
        RunscError::Failed {
            subcommand,
            id: id.map(str::to_string),
            status,
            stderr,
        }
    }

    /// Kill found nothing to signal, or there is no such container: the target is gone either way.
    pub fn is_gone(&self) -> bool {
        matches!(
            self,
            RunscError::AlreadyGone { .. } | RunscError::NotFound { .. }
        )
    }
}

fn is_not_found(stderr: &str) -> bool {
    stderr.contains("loading container: file does not exist")
        || stderr.contains("container does not exist")
        // The container's state file went between runsc listing it and opening it (a delete of
        // it or of its sandbox finished meanwhile; seen from a CRI StopContainer's kill).
        || (stderr.contains("loading container: open ")
            && stderr.contains(".state: no such file or directory"))
}

/// `runsc delete` of a pod's container after the pod's sandbox died (an OOM kill, say): runsc
/// cannot reach the sandbox to stop the container, says so, and removes the container's state
/// all the same (it does every cleanup step and reports the ones that failed). Nothing is left
/// to delete.
fn is_sandbox_dead(stderr: &str) -> bool {
    stderr.contains("connecting to control server at PID") && stderr.contains("connection refused")
}

fn is_not_running(stderr: &str) -> bool {
    const PATTERNS: &[&str] = &[
        "sandbox is not running",
        "is not running",
        "in state created",
        "in state stopped",
        "no such process",
        "connecting to control server at PID",
    ];
    PATTERNS.iter().any(|p| stderr.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAILED: ExitStatus = ExitStatus::Exited(128);

    #[test]
    fn delete_of_a_pod_container_whose_sandbox_died_is_already_gone() {
        // Captured from the current runsc on the Kubernetes node, after the pod's sandbox was
        // OOM-killed: the container's state was removed, the stop could not be delivered.
        let e = RunscError::from_failure(
            "delete",
            Some("app"),
            FAILED,
            "destroying container: stopping container: destroying container \"app\": destroying container \"app\": connecting to control server at PID 30916: connection refused\n",
        );
        assert!(e.is_gone(), "{e}");
        // Any other failure of delete stays a failure.
        let e = RunscError::from_failure("delete", Some("app"), FAILED, "permission denied\n");
        assert!(!e.is_gone(), "{e}");
    }

    #[test]
    fn kill_of_an_exited_sandbox_is_already_gone() {
        // Captured from runsc 20221219 after the sandbox exited.
        let e = RunscError::from_failure(
            "kill",
            Some("k1"),
            FAILED,
            "connecting to control server at PID 1545: connection refused\n",
        );
        assert!(matches!(e, RunscError::AlreadyGone { .. }));
        assert!(e.is_gone());
    }

    #[test]
    fn kill_of_a_stopped_or_created_subcontainer_is_already_gone() {
        for msg in [
            "sandbox is not running",
            "cannot signal container \"c2\" in state created",
            "cannot signal container \"c2\" in state stopped",
        ] {
            let e = RunscError::from_failure("kill", Some("c2"), FAILED, msg);
            assert!(matches!(e, RunscError::AlreadyGone { .. }), "{msg}");
        }
    }

    #[test]
    fn unknown_container_is_not_found_for_any_subcommand() {
        for sub in ["state", "kill", "delete"] {
            let e = RunscError::from_failure(
                sub,
                Some("x"),
                FAILED,
                "loading container: file does not exist",
            );
            assert!(matches!(e, RunscError::NotFound { .. }), "{sub}");
        }
    }

    #[test]
    fn a_state_file_gone_while_runsc_loads_it_is_not_found() {
        let msg = "FetchSpec failed: loading container: open /run/runsc/k8s.io/c2_sandbox:sb.state: no such file or directory";
        let e = RunscError::from_failure("kill", Some("c2"), FAILED, msg);
        assert!(e.is_gone(), "{e:?}");
        // Another file than the container's state is no such thing.
        let other = "reading spec: open /b/config.json: no such file or directory";
        let e = RunscError::from_failure("kill", Some("c2"), FAILED, other);
        assert!(!e.is_gone(), "{e:?}");
    }

    #[test]
    fn other_failures_keep_status_and_trimmed_stderr() {
        let e = RunscError::from_failure(
            "create",
            Some("c"),
            FAILED,
            "  reading spec: SELinux is not supported: x\n",
        );
        match &e {
            RunscError::Failed { stderr, status, .. } => {
                assert_eq!(stderr, "reading spec: SELinux is not supported: x");
                assert_eq!(*status, FAILED);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "runsc create c failed (exit code 128): reading spec: SELinux is not supported: x"
        );
        assert!(!e.is_gone());
    }

    #[test]
    fn not_running_text_outside_kill_is_a_plain_failure() {
        let e = RunscError::from_failure("start", Some("c"), FAILED, "sandbox is not running");
        assert!(matches!(e, RunscError::Failed { .. }));
    }
}
