//! One process the shim supervises: a container's init (the sandbox's root process) or an exec.

pub mod state;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use tokio::sync::watch;

use crate::stdio::{StdioPaths, Streams};
use state::{Exit, State, StateError};

pub struct Process {
    /// Empty for the init process, as containerd addresses it.
    pub exec_id: String,
    pub stdio: StdioPaths,
    pub io: Streams,
    state: Mutex<State>,
    exited: watch::Sender<Option<Exit>>,
    /// The process's pid inside the sandbox (execs), for `runsc kill --pid`.
    guest_pid: AtomicI32,
    /// The hardened OCI process of an exec, written for `runsc exec --process` at start.
    pub spec: Option<serde_json::Value>,
}

impl Process {
    pub fn new(exec_id: &str, stdio: StdioPaths, spec: Option<serde_json::Value>) -> Self {
        Process {
            exec_id: exec_id.to_string(),
            stdio,
            io: Streams::default(),
            state: Mutex::new(State::Pending),
            exited: watch::channel(None).0,
            guest_pid: AtomicI32::new(0),
            spec,
        }
    }

    pub fn state(&self) -> State {
        *self.state.lock().unwrap()
    }

    /// Applies a checked transition.
    pub fn transition<R>(
        &self,
        f: impl FnOnce(&mut State) -> Result<R, StateError>,
    ) -> Result<R, StateError> {
        f(&mut self.state.lock().unwrap())
    }

    pub fn pid(&self) -> u32 {
        self.state().pid()
    }

    pub fn set_guest_pid(&self, pid: i32) {
        self.guest_pid.store(pid, Ordering::Relaxed);
    }

    pub fn guest_pid(&self) -> Option<i32> {
        match self.guest_pid.load(Ordering::Relaxed) {
            0 => None,
            p => Some(p),
        }
    }

    /// Records the exit and wakes every Wait. Returns false if it was already recorded.
    pub fn record_exit(&self, exit: Exit) -> bool {
        let first = self.state.lock().unwrap().exited(exit);
        if first {
            self.exited.send_replace(Some(exit));
        }
        first
    }

    /// Resolves when the process has exited (at once if it already has).
    pub async fn wait(&self) -> Exit {
        let mut rx = self.exited.subscribe();
        loop {
            if let Some(exit) = *rx.borrow_and_update() {
                return exit;
            }
            if rx.changed().await.is_err() {
                // The sender lives as long as `self`; unreachable while we borrow it.
                unreachable!("exit channel closed while the process exists");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use state::ExitCause;
    use std::time::SystemTime;

    #[tokio::test]
    async fn wait_returns_the_recorded_exit_even_when_registered_late() {
        let p = Process::new("", StdioPaths::default(), None);
        p.transition(|s| s.created(10)).unwrap();
        let exit = Exit {
            status: 3,
            at: SystemTime::UNIX_EPOCH,
            cause: ExitCause::Normal,
        };
        assert!(p.record_exit(exit));
        assert_eq!(p.wait().await, exit);
    }

    #[tokio::test]
    async fn waiters_registered_before_the_exit_are_woken() {
        let p = std::sync::Arc::new(Process::new("e1", StdioPaths::default(), None));
        p.transition(|s| s.started_exec(11)).unwrap();
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.wait().await }
        });
        tokio::task::yield_now().await;
        let exit = Exit {
            status: 137,
            at: SystemTime::UNIX_EPOCH,
            cause: ExitCause::Oom,
        };
        p.record_exit(exit);
        assert_eq!(waiter.await.unwrap(), exit);
    }
}
