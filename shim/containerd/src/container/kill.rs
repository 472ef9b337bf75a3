//! Kill: a signal to the init, to every process of the container, or to one exec.

use super::Container;
use crate::error::{Result, ShimError};
use crate::process::state::Op;
use gvisor_hardened_core::runtime::KillTarget;

impl Container {
    pub async fn kill(&self, exec_id: &str, signal: u32, all: bool) -> Result<()> {
        let p = self.process(exec_id).await?;
        p.check(Op::Signal).map_err(|e| self.state_error(&p, e))?;
        let target = if !p.is_init() {
            // A running exec always has its guest pid: the start recorded it before the state.
            KillTarget::Guest(p.guest_pid().ok_or_else(|| {
                ShimError::Internal(format!("{} has no pid in the sandbox", self.name_of(&p)))
            })?)
        } else if all {
            self.killed_all
                .store(true, std::sync::atomic::Ordering::SeqCst);
            KillTarget::All
        } else {
            KillTarget::Init
        };
        match self.runtime.kill(self.runsc_id(), signal, target).await {
            // It died between our check and runsc's: the exit is on its way.
            Err(e) if e.is_gone() => {
                log::debug!("container {}: kill: {e}", self.id);
                Ok(())
            }
            other => Ok(other?),
        }
    }
}
