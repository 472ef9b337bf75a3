//! `kill ID SIGNAL [--all]`: through runsc to the container's init (or every process). A
//! SIGKILL runsc cannot deliver (a wedged sandbox) goes to the sandbox process from the host,
//! through a pidfd opened only while the recorded pid still names the recorded sandbox.

use super::error::Result;
use crate::opened::{not_running, Opened};
use gvisor_hardened_core::runtime::KillTarget;

pub async fn run(c: &Opened, signal: i32, all: bool) -> Result<()> {
    let id = &c.record.id;
    let target = if all {
        KillTarget::All
    } else {
        KillTarget::Init
    };
    match c.runtime.kill(id, signal as u32, target).await {
        Ok(()) => Ok(()),
        Err(e) if signal == libc::SIGKILL && !e.is_gone() => match c.state.sandbox_process() {
            Some(sandbox) => {
                log::warn!("container {id}: {e}; killing sandbox pid {}", sandbox.pid());
                sandbox
                    .signal(libc::SIGKILL)
                    .map_err(|_| not_running(e, id))
            }
            None => Err(not_running(e, id)),
        },
        Err(e) => Err(not_running(e, id)),
    }
}
