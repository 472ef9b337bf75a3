//! The lifecycle of one process (a container's init or an exec), as a type.
//!
//! [`State::next`] is the one definition of what each operation does in each state: every task
//! call that depends on a process's state goes through it, first to check (before runsc is asked)
//! and then to apply (after runsc agreed), so a call that makes no sense in the current state
//! (start twice, delete while running, resume what is not paused, kill what has finished) gets
//! the same error whichever handler it arrives through. The pid is not part of the state: it is
//! the process's identity, recorded once when runsc reports it.

use gvisor_hardened_core::exit::Exit;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Registered, nothing spawned yet (an exec before its Start; an init during Create).
    Pending,
    /// runsc created it; it has not started running the workload.
    Created,
    Running,
    Paused,
    Stopped(Exit),
    /// Deleted by containerd; the exit, if it ever ran.
    Deleted(Option<Exit>),
}

/// What a task call asks of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// runsc created the init (Create).
    Create,
    /// Start of a created init.
    Start,
    /// `runsc exec` creates and starts an exec at once.
    StartExec,
    Pause,
    Resume,
    /// The process ended.
    Exit(Exit),
    /// Delete once nothing runs.
    Delete,
    /// Delete of a created init that never started: runsc's forced delete kills it first.
    Discard,
    /// Kill: the process must still be there; its state does not change.
    Signal,
    /// A new exec in this (init) process's container; its state does not change.
    AddExec,
}

impl Op {
    pub fn name(&self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Start | Op::StartExec => "start",
            Op::Pause => "pause",
            Op::Resume => "resume",
            Op::Exit(_) => "record the exit of",
            Op::Delete | Op::Discard => "delete",
            Op::Signal => "kill",
            Op::AddExec => "exec in",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("cannot {op} a {current} process")]
    Invalid {
        op: &'static str,
        current: &'static str,
    },
    /// containerd expects "not found" for a signal to a process that has finished.
    #[error("process already finished")]
    Finished,
}

impl State {
    pub fn name(&self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Created => "created",
            State::Running => "running",
            State::Paused => "paused",
            State::Stopped(_) => "stopped",
            State::Deleted(_) => "deleted",
        }
    }

    pub fn exit(&self) -> Option<Exit> {
        match *self {
            State::Stopped(exit) => Some(exit),
            State::Deleted(exit) => exit,
            _ => None,
        }
    }

    pub fn is_alive(&self) -> bool {
        matches!(self, State::Created | State::Running | State::Paused)
    }

    /// The state `op` leads to, or why it is refused. The lifecycle's only definition.
    pub fn next(&self, op: Op) -> Result<State, StateError> {
        use State::*;
        match (*self, op) {
            (Pending, Op::Create) => Ok(Created),
            (Created, Op::Start) => Ok(Running),
            (Pending, Op::StartExec) => Ok(Running),
            (Running, Op::Pause) => Ok(Paused),
            (Paused, Op::Resume) => Ok(Running),
            // An exec that never started, or an init whose Create failed half way, can still be
            // reported stopped: everything that lived goes through one exit.
            (Pending | Created | Running | Paused, Op::Exit(exit)) => Ok(Stopped(exit)),
            (Stopped(exit), Op::Delete) => Ok(Deleted(Some(exit))),
            (Pending, Op::Delete) => Ok(Deleted(None)),
            (Created, Op::Discard) => Ok(Created),
            (Created | Running | Paused, Op::Signal | Op::AddExec) => Ok(*self),
            (Stopped(_) | Deleted(_), Op::Signal) => Err(StateError::Finished),
            (current, op) => Err(StateError::Invalid {
                op: op.name(),
                current: current.name(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gvisor_hardened_core::exit::ExitCause;
    use std::time::SystemTime;

    fn exit(status: u32) -> Exit {
        Exit {
            status,
            at: SystemTime::UNIX_EPOCH,
            cause: ExitCause::Exited,
        }
    }

    fn run(mut s: State, ops: &[Op]) -> Result<State, StateError> {
        for op in ops {
            s = s.next(*op)?;
        }
        Ok(s)
    }

    #[test]
    fn init_lifecycle_created_running_stopped_deleted() {
        let s = run(
            State::Pending,
            &[Op::Create, Op::Start, Op::Exit(exit(3)), Op::Delete],
        );
        assert_eq!(s, Ok(State::Deleted(Some(exit(3)))));
    }

    #[test]
    fn starting_twice_is_refused() {
        assert_eq!(
            run(State::Created, &[Op::Start, Op::Start]),
            Err(StateError::Invalid {
                op: "start",
                current: "running"
            })
        );
    }

    #[test]
    fn deleting_a_running_or_paused_process_is_refused() {
        for s in [State::Running, State::Paused] {
            assert!(s.next(Op::Delete).is_err(), "{s:?}");
            assert!(s.next(Op::Discard).is_err(), "{s:?}");
        }
    }

    #[test]
    fn a_created_init_is_deleted_only_by_discarding_it_first() {
        assert!(State::Created.next(Op::Delete).is_err());
        assert_eq!(State::Created.next(Op::Discard), Ok(State::Created));
    }

    #[test]
    fn a_second_exit_report_is_refused_and_the_first_kept() {
        let s = State::Running.next(Op::Exit(exit(0))).unwrap();
        assert!(s.next(Op::Exit(exit(137))).is_err());
        assert_eq!(s.exit(), Some(exit(0)));
    }

    #[test]
    fn pause_and_resume_only_from_the_right_states() {
        assert!(State::Running.next(Op::Resume).is_err());
        assert!(State::Paused.next(Op::Pause).is_err());
        assert_eq!(
            run(State::Running, &[Op::Pause, Op::Resume]),
            Ok(State::Running)
        );
    }

    #[test]
    fn a_pending_exec_can_be_deleted_without_running() {
        assert_eq!(State::Pending.next(Op::Delete), Ok(State::Deleted(None)));
    }

    #[test]
    fn an_exec_starts_directly_into_running_once() {
        assert_eq!(
            run(State::Pending, &[Op::StartExec, Op::StartExec]),
            Err(StateError::Invalid {
                op: "start",
                current: "running"
            })
        );
    }

    #[test]
    fn a_signal_to_a_finished_process_is_finished_and_to_a_pending_one_invalid() {
        assert_eq!(
            State::Stopped(exit(0)).next(Op::Signal),
            Err(StateError::Finished)
        );
        assert_eq!(
            State::Deleted(None).next(Op::Signal),
            Err(StateError::Finished)
        );
        assert_eq!(
            State::Pending.next(Op::Signal),
            Err(StateError::Invalid {
                op: "kill",
                current: "pending"
            })
        );
    }

    #[test]
    fn signals_and_new_execs_leave_a_live_state_unchanged() {
        for s in [State::Created, State::Running, State::Paused] {
            assert_eq!(s.next(Op::Signal), Ok(s));
            assert_eq!(s.next(Op::AddExec), Ok(s));
        }
        assert!(State::Stopped(exit(0)).next(Op::AddExec).is_err());
    }

    #[test]
    fn nothing_follows_delete() {
        let deleted = State::Deleted(Some(exit(0)));
        for op in [
            Op::Create,
            Op::Start,
            Op::StartExec,
            Op::Pause,
            Op::Resume,
            Op::Exit(exit(1)),
            Op::Delete,
            Op::Discard,
            Op::AddExec,
        ] {
            assert!(deleted.next(op).is_err(), "{op:?}");
        }
    }
}
