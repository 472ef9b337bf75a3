//! The lifecycle of one process (a container's init or an exec), as a type.
//!
//! Every transition is checked here and nowhere else, so a task call that makes no sense in the
//! current state (start twice, delete while running, resume what is not paused) gets the same
//! clear error whichever handler it arrives through.

use std::time::SystemTime;

/// Why a process stopped, beyond its exit code: the runtime's enforcement shows up here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExitCause {
    #[default]
    Normal,
    /// The memory cgroup killed the sandbox.
    Oom,
    /// The sandbox crossed its pids ceiling; runsc fails the whole sandbox there.
    ProcessLimit,
    /// The policy's wall-clock limit ended it.
    Timeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub status: u32,
    pub at: SystemTime,
    pub cause: ExitCause,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Exec registered, nothing spawned yet.
    Pending,
    Created {
        pid: u32,
    },
    Running {
        pid: u32,
    },
    Paused {
        pid: u32,
    },
    Stopped {
        pid: u32,
        exit: Exit,
    },
    Deleted {
        pid: u32,
        exit: Option<Exit>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("process is {current}, cannot {op}")]
    Invalid {
        op: &'static str,
        current: &'static str,
    },
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Created { .. } => "created",
            State::Running { .. } => "running",
            State::Paused { .. } => "paused",
            State::Stopped { .. } => "stopped",
            State::Deleted { .. } => "deleted",
        }
    }

    pub fn pid(&self) -> u32 {
        match *self {
            State::Pending => 0,
            State::Created { pid }
            | State::Running { pid }
            | State::Paused { pid }
            | State::Stopped { pid, .. }
            | State::Deleted { pid, .. } => pid,
        }
    }

    pub fn exit(&self) -> Option<Exit> {
        match *self {
            State::Stopped { exit, .. } => Some(exit),
            State::Deleted { exit, .. } => exit,
            _ => None,
        }
    }

    pub fn is_alive(&self) -> bool {
        matches!(
            self,
            State::Created { .. } | State::Running { .. } | State::Paused { .. }
        )
    }

    fn invalid(&self, op: &'static str) -> StateError {
        StateError::Invalid {
            op,
            current: self.name(),
        }
    }

    /// The process exists (runsc created it / the exec was spawned).
    pub fn created(&mut self, pid: u32) -> Result<(), StateError> {
        match *self {
            State::Pending => {
                *self = State::Created { pid };
                Ok(())
            }
            _ => Err(self.invalid("create")),
        }
    }

    /// An exec goes straight from pending to running: `runsc exec` creates and starts at once.
    pub fn started_exec(&mut self, pid: u32) -> Result<(), StateError> {
        match *self {
            State::Pending => {
                *self = State::Running { pid };
                Ok(())
            }
            _ => Err(self.invalid("start")),
        }
    }

    pub fn start(&mut self) -> Result<u32, StateError> {
        match *self {
            State::Created { pid } => {
                *self = State::Running { pid };
                Ok(pid)
            }
            _ => Err(self.invalid("start")),
        }
    }

    pub fn pause(&mut self) -> Result<(), StateError> {
        match *self {
            State::Running { pid } => {
                *self = State::Paused { pid };
                Ok(())
            }
            _ => Err(self.invalid("pause")),
        }
    }

    pub fn resume(&mut self) -> Result<(), StateError> {
        match *self {
            State::Paused { pid } => {
                *self = State::Running { pid };
                Ok(())
            }
            _ => Err(self.invalid("resume")),
        }
    }

    /// Records the exit. Returns false when the exit was already recorded (a second report of
    /// the same death, e.g. from the reaper and from a failed kill, is harmless).
    pub fn exited(&mut self, exit: Exit) -> bool {
        match *self {
            State::Created { pid } | State::Running { pid } | State::Paused { pid } => {
                *self = State::Stopped { pid, exit };
                true
            }
            State::Pending => {
                *self = State::Stopped { pid: 0, exit };
                true
            }
            State::Stopped { .. } | State::Deleted { .. } => false,
        }
    }

    /// Delete is legal once nothing runs: after the exit, or before a created init ever started
    /// (containerd deletes a task whose Start failed). A running process must be killed first.
    pub fn delete(&mut self) -> Result<Option<Exit>, StateError> {
        match *self {
            State::Stopped { pid, exit } => {
                *self = State::Deleted {
                    pid,
                    exit: Some(exit),
                };
                Ok(Some(exit))
            }
            State::Pending => {
                *self = State::Deleted { pid: 0, exit: None };
                Ok(None)
            }
            State::Created { .. } | State::Running { .. } | State::Paused { .. } => {
                Err(self.invalid("delete"))
            }
            State::Deleted { .. } => Err(self.invalid("delete")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(status: u32) -> Exit {
        Exit {
            status,
            at: SystemTime::UNIX_EPOCH,
            cause: ExitCause::Normal,
        }
    }

    #[test]
    fn init_lifecycle_created_running_stopped_deleted() {
        let mut s = State::Pending;
        s.created(42).unwrap();
        assert_eq!(s.start().unwrap(), 42);
        assert!(s.exited(exit(3)));
        assert_eq!(s.delete().unwrap(), Some(exit(3)));
        assert_eq!(s.pid(), 42);
    }

    #[test]
    fn starting_twice_is_refused() {
        let mut s = State::Created { pid: 1 };
        s.start().unwrap();
        assert_eq!(
            s.start(),
            Err(StateError::Invalid {
                op: "start",
                current: "running"
            })
        );
    }

    #[test]
    fn deleting_a_running_process_is_refused() {
        let mut s = State::Running { pid: 1 };
        assert!(s.delete().is_err());
        assert_eq!(s, State::Running { pid: 1 });
    }

    #[test]
    fn deleting_a_created_init_needs_a_kill_first() {
        let mut s = State::Created { pid: 7 };
        assert!(s.delete().is_err());
    }

    #[test]
    fn second_exit_report_is_ignored() {
        let mut s = State::Running { pid: 1 };
        assert!(s.exited(exit(0)));
        assert!(!s.exited(exit(137)));
        assert_eq!(s.exit(), Some(exit(0)));
    }

    #[test]
    fn pause_and_resume_only_from_the_right_states() {
        let mut s = State::Running { pid: 1 };
        assert!(s.resume().is_err());
        s.pause().unwrap();
        assert!(s.pause().is_err());
        s.resume().unwrap();
        assert_eq!(s, State::Running { pid: 1 });
    }

    #[test]
    fn pending_exec_can_be_deleted_without_running() {
        let mut s = State::Pending;
        assert_eq!(s.delete().unwrap(), None);
    }

    #[test]
    fn exec_starts_directly_into_running() {
        let mut s = State::Pending;
        s.started_exec(9).unwrap();
        assert_eq!(s, State::Running { pid: 9 });
        assert!(s.started_exec(9).is_err());
    }
}
