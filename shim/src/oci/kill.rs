//! `kill ID SIGNAL [--all]`: through runsc to the container's init (or every process). A
//! SIGKILL runsc cannot deliver (a wedged sandbox) goes to the sandbox process from the host.

use super::error::Result;
use super::state::alive;
use super::{not_running, Opened};

pub async fn run(c: &Opened, signal: i32, all: bool) -> Result<()> {
    let id = &c.record.id;
    match c.runsc.kill(id, signal, all, None).await {
        Ok(()) => Ok(()),
        Err(e) if signal == libc::SIGKILL && !e.is_gone() => {
            match c.state.sandbox_pid().filter(|p| alive(*p)) {
                Some(pid) => {
                    c.record
                        .log
                        .warn(&format!("container {id}: {e}; killing sandbox pid {pid}"));
                    // SAFETY: plain kill(2) of the pid runsc recorded for this sandbox.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    Ok(())
                }
                None => Err(not_running(e, id)),
            }
        }
        Err(e) => Err(not_running(e, id)),
    }
}
