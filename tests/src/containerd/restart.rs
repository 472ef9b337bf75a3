//! Restarting a private containerd while its shims keep running (fault tests).
//!
//! containerd does not own its shims: each runs in its own session and survives containerd.
//! On start, containerd finds the bundles of running tasks in its state directory, reads the
//! `address` file each shim's `start` action left there, and reconnects. A restart here keeps
//! everything containerd relies on for that: directory, config, sockets, namespace.

use std::time::Duration;

use super::Containerd;
use crate::error::{HarnessError, Result};
use crate::poll::poll_until;

/// How long a stopping containerd may take to exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// How containerd goes down before it is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: containerd closes its listeners and exits (an upgrade, a service restart).
    Graceful,
    /// SIGKILL: containerd dies on the spot (a crash, an OOM kill).
    Crash,
}

impl Containerd {
    /// Stops containerd as `how` says, waits for it to exit, and starts it again on the same
    /// directory and config. Returns once the new process serves its grpc socket. The log keeps
    /// the first run's lines; the new process's pid is [`Containerd::pid`].
    pub fn restart(&mut self, how: Stop) -> Result<()> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| HarnessError::ContainerdNotReady {
                reason: "restart of a containerd that is not running".into(),
                log: self.log(),
            })?;
        let signal = match how {
            Stop::Graceful => libc::SIGTERM,
            Stop::Crash => libc::SIGKILL,
        };
        // SAFETY: kill(2) on our own child, which has not been reaped yet.
        unsafe { libc::kill(child.id() as i32, signal) };
        poll_until(
            "containerd to exit before its restart",
            STOP_TIMEOUT,
            || child.try_wait().ok().flatten(),
        )?;
        self.spawn(true)?;
        let opts = self.opts.clone();
        self.wait_ready(&opts)
    }
}
