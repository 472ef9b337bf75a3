//! One process the shim supervises: a container's init (the sandbox's root process, or a pod's
//! later container) or an exec.

pub mod state;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use policy_injector::HardenedProcess;
use tokio::sync::watch;

use crate::stdio::{StdioPaths, Streams};
use gvisor_hardened_core::exit::Exit;
use state::{Op, State, StateError};

pub struct Process {
    /// Empty for the init process, as containerd addresses it.
    pub exec_id: String,
    pub stdio: StdioPaths,
    pub io: Streams,
    state: Mutex<State>,
    /// The host pid containerd knows it by (the sandbox's, or the `runsc exec` process's).
    pid: AtomicU32,
    /// An exec's pid inside the sandbox, for `runsc kill --pid`.
    guest_pid: OnceLock<i32>,
    exited: watch::Sender<Option<Exit>>,
    /// An exec's hardened OCI process, written for `runsc exec --process` at its start, and
    /// what the policy changed in it (audited at the start).
    pub hardened: Option<HardenedProcess>,
}

impl Process {
    pub fn init(stdio: StdioPaths) -> Self {
        Self::new(String::new(), stdio, None)
    }

    pub fn exec(exec_id: &str, stdio: StdioPaths, hardened: HardenedProcess) -> Self {
        Self::new(exec_id.to_string(), stdio, Some(hardened))
    }

    fn new(exec_id: String, stdio: StdioPaths, hardened: Option<HardenedProcess>) -> Self {
        Process {
            exec_id,
            stdio,
            io: Streams::default(),
            state: Mutex::new(State::Pending),
            pid: AtomicU32::new(0),
            guest_pid: OnceLock::new(),
            exited: watch::channel(None).0,
            hardened,
        }
    }

    pub fn is_init(&self) -> bool {
        self.exec_id.is_empty()
    }

    pub fn state(&self) -> State {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is one assignment: a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `op` is legal now, without applying it (before asking runsc).
    pub fn check(&self, op: Op) -> Result<(), StateError> {
        self.lock().next(op).map(drop)
    }

    /// Applies `op` (after runsc did it); returns the new state.
    pub fn apply(&self, op: Op) -> Result<State, StateError> {
        let mut state = self.lock();
        *state = state.next(op)?;
        Ok(*state)
    }

    pub fn pid(&self) -> u32 {
        self.pid.load(Ordering::SeqCst)
    }

    pub fn set_pid(&self, pid: u32) {
        self.pid.store(pid, Ordering::SeqCst);
    }

    pub fn set_guest_pid(&self, pid: i32) {
        let _ = self.guest_pid.set(pid);
    }

    pub fn guest_pid(&self) -> Option<i32> {
        self.guest_pid.get().copied()
    }

    /// Records the exit in the state. False if an exit was already recorded (a second report of
    /// the same death is harmless and ignored). Waiters are woken by [`Process::announce_exit`]
    /// once the exit is published and audited.
    pub fn record_exit(&self, exit: Exit) -> bool {
        self.apply(Op::Exit(exit)).is_ok()
    }

    /// Wakes every Wait with `exit` (the first announced exit stays).
    pub fn announce_exit(&self, exit: Exit) {
        self.exited.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(exit);
            true
        });
    }

    /// Resolves when the process's exit has been announced (at once if it already has).
    pub async fn wait(&self) -> Exit {
        let mut rx = self.exited.subscribe();
        loop {
            if let Some(exit) = *rx.borrow_and_update() {
                return exit;
            }
            // The sender lives as long as `self`, which the caller borrows: never closed here.
            let _ = rx.changed().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gvisor_hardened_core::exit::ExitCause;
    use std::time::SystemTime;

    fn exit(status: u32, cause: ExitCause) -> Exit {
        Exit {
            status,
            at: SystemTime::UNIX_EPOCH,
            cause,
        }
    }

    #[tokio::test]
    async fn wait_returns_the_recorded_exit_even_when_registered_late() {
        let p = Process::init(StdioPaths::default());
        p.apply(Op::Create).unwrap();
        let e = exit(3, ExitCause::Exited);
        assert!(p.record_exit(e));
        p.announce_exit(e);
        assert_eq!(p.wait().await, e);
    }

    #[tokio::test]
    async fn waiters_registered_before_the_exit_are_woken() {
        let p = std::sync::Arc::new(Process::init(StdioPaths::default()));
        p.apply(Op::Create).unwrap();
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.wait().await }
        });
        tokio::task::yield_now().await;
        let e = exit(137, ExitCause::Oom);
        p.record_exit(e);
        p.announce_exit(e);
        assert_eq!(waiter.await.unwrap(), e);
    }

    #[tokio::test]
    async fn waiters_wake_at_the_announcement_not_at_the_record() {
        let p = std::sync::Arc::new(Process::init(StdioPaths::default()));
        p.apply(Op::Create).unwrap();
        let e = exit(0, ExitCause::Exited);
        p.record_exit(e);
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        p.announce_exit(e);
        p.announce_exit(exit(1, ExitCause::Exited));
        assert_eq!(waiter.await.unwrap(), e);
    }

    #[test]
    fn only_the_first_exit_is_recorded() {
        let p = Process::init(StdioPaths::default());
        p.apply(Op::Create).unwrap();
        assert!(p.record_exit(exit(0, ExitCause::Exited)));
        assert!(!p.record_exit(exit(137, ExitCause::Signaled)));
        assert_eq!(p.state().exit(), Some(exit(0, ExitCause::Exited)));
    }
}
