//! How a process ended, as the shim reports it: containerd's exit code, the time, and why.
//!
//! Every exit the shim sees (a sandbox's init, a pod's later container, an exec) is described by
//! one [`Exit`], whose [`ExitCause`] says what the runtime's enforcement had to do with it. There
//! is one way to build the exit of a process that was killed without its status being known
//! ([`ExitStatus::killed`], [`Exit::killed`]), so every such report says the same thing.

use std::time::SystemTime;

use crate::reaper::ExitStatus;

/// Why a process stopped, beyond its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExitCause {
    /// It called exit (any code).
    Exited,
    /// A signal ended it: a Kill from containerd, or one from inside the sandbox.
    Signaled,
    /// The memory cgroup killed the sandbox at its limit.
    Oom,
    /// The sandbox crossed its pids ceiling; runsc fails the whole sandbox there.
    ProcessLimit,
    /// The policy's wall-clock limit ended it (SIGTERM, grace period, SIGKILL).
    Timeout,
    /// The policy's idle timeout ended it: no CPU to speak of and no output for that long
    /// (`crate::idle`), then SIGTERM, grace period, SIGKILL.
    IdleTimeout,
}

impl ExitCause {
    /// What the status alone says, when nothing the runtime enforces was involved.
    pub fn of_status(status: ExitStatus) -> ExitCause {
        match status {
            ExitStatus::Exited(_) => ExitCause::Exited,
            ExitStatus::Signaled { .. } => ExitCause::Signaled,
        }
    }

    /// For logs: how the process ended, in words.
    pub fn describe(&self) -> &'static str {
        match self {
            ExitCause::Exited => "exited",
            ExitCause::Signaled => "was killed by a signal",
            ExitCause::Oom => "was killed at the memory limit (OOM)",
            ExitCause::ProcessLimit => {
                "crossed the process limit (pids cgroup ceiling reached; runsc stopped the sandbox)"
            }
            ExitCause::Timeout => "was stopped at its maximum runtime",
            ExitCause::IdleTimeout => "was stopped after sitting idle for its idle timeout",
        }
    }

    /// Enforcement ended the process (not its own doing, nor a Kill from containerd).
    pub fn is_enforced(&self) -> bool {
        matches!(
            self,
            ExitCause::Oom | ExitCause::ProcessLimit | ExitCause::Timeout | ExitCause::IdleTimeout
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// containerd's number: the exit code, or 128 + the signal.
    pub status: u32,
    pub at: SystemTime,
    pub cause: ExitCause,
}

impl Exit {
    pub fn new(status: ExitStatus, cause: ExitCause, at: SystemTime) -> Exit {
        Exit {
            status: status.containerd_code(),
            at,
            cause,
        }
    }

    /// A process that was killed or never ran, reported without a status of its own: a pod
    /// container whose sandbox went away, a created container deleted before it started.
    pub fn killed(at: SystemTime) -> Exit {
        Exit::new(ExitStatus::killed(), ExitCause::Signaled, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_exit_is_137_by_a_signal() {
        let e = Exit::killed(SystemTime::UNIX_EPOCH);
        assert_eq!((e.status, e.cause), (137, ExitCause::Signaled));
    }

    #[test]
    fn the_status_alone_tells_an_exit_from_a_signal() {
        assert_eq!(
            ExitCause::of_status(ExitStatus::Exited(3)),
            ExitCause::Exited
        );
        assert_eq!(
            ExitCause::of_status(ExitStatus::killed()),
            ExitCause::Signaled
        );
    }

    #[test]
    fn an_idle_timeout_is_serialised_in_kebab_case() {
        assert_eq!(
            serde_json::to_value(ExitCause::IdleTimeout).unwrap(),
            "idle-timeout"
        );
    }

    #[test]
    fn a_cause_reads_back_as_it_was_written() {
        for cause in [
            ExitCause::Exited,
            ExitCause::Signaled,
            ExitCause::Oom,
            ExitCause::ProcessLimit,
            ExitCause::Timeout,
            ExitCause::IdleTimeout,
        ] {
            let text = serde_json::to_string(&cause).unwrap();
            assert_eq!(serde_json::from_str::<ExitCause>(&text).unwrap(), cause);
        }
    }

    #[test]
    fn only_oom_process_limit_and_the_timeouts_are_enforcement() {
        for (cause, enforced) in [
            (ExitCause::Exited, false),
            (ExitCause::Signaled, false),
            (ExitCause::Oom, true),
            (ExitCause::ProcessLimit, true),
            (ExitCause::Timeout, true),
            (ExitCause::IdleTimeout, true),
        ] {
            assert_eq!(cause.is_enforced(), enforced, "{cause:?}");
        }
    }
}
