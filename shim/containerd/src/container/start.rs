//! Start of a container's init: the sandbox's first container, or a pod's later one.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Container;
use crate::error::Result;
use crate::process::state::Op;
use gvisor_hardened_core::audit::{ArtifactsAudit, AuditEvent};
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runtime::KillTarget;

impl Container {
    pub async fn start(self: &Arc<Self>) -> Result<u32> {
        let pid = self.start_init().await?;
        // After TaskStart (the start lock released: an exit meanwhile is reported as usual) and
        // before Start answers: a pod's later containers, started after this one, find the
        // forwarder listening.
        self.start_egress().await;
        Ok(pid)
    }

    async fn start_init(self: &Arc<Self>) -> Result<u32> {
        let _starting = self.start_lock.lock().await;
        self.init
            .check(Op::Start)
            .map_err(|e| self.state_error(&self.init, e))?;
        let manifest = self.record_artifacts_start().await?;
        // runsc hands `runsc start`'s own stdio to a pod's later container (and create's to the
        // sandbox's first one).
        let stdio = if self.is_member() && !self.init.stdio.terminal {
            Some(self.init.io.open_pipes(&self.init.stdio)?)
        } else {
            None
        };
        // A claimed warm sandbox was started by the filler: its root process already runs.
        if self.pool_claim.is_none() {
            if let Err(e) = self.runtime.start(&self.id, stdio).await {
                self.init.io.close();
                return Err(e.into());
            }
        }
        // The exit path waits for the start lock, so the init cannot have stopped meanwhile.
        self.init
            .apply(Op::Start)
            .map_err(|e| self.state_error(&self.init, e))?;
        let pid = self.init.pid();
        if self.is_member() {
            self.watch_member_exit();
        }
        self.arm_lifetime();
        self.events().start(&self.id, pid).await;
        let mut rec = self.record(AuditEvent::Start);
        rec.pid = Some(pid);
        rec.artifacts = manifest.as_ref().map(ArtifactsAudit::Start);
        self.audit_best_effort(&rec).await;
        log::info!("container {} started", self.id);
        Ok(pid)
    }

    /// A pod's later container: its exit comes from `runsc wait`, which the sandbox answers as
    /// long as it lives. When the whole sandbox goes (pod stopped, sandbox killed), the wait
    /// fails and the container is reported killed.
    fn watch_member_exit(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            let status = match me.runtime.wait(&me.id).await {
                Ok(status) => {
                    me.kill_what_the_init_left().await;
                    status
                }
                Err(e) => {
                    log::warn!("container {}: {e}; reporting it killed", me.id);
                    ExitStatus::killed()
                }
            };
            me.on_exit(&me.init, status).await;
        });
    }

    /// A pod's later container whose init ended while the sandbox lives: what it left running
    /// goes too, unless the whole container was killed already. In the pod's shared PID
    /// namespace (`shareProcessNamespace`) the init's children outlive it, holding its stdout
    /// and stderr, whose end containerd waits for before it deletes the container:
    /// StopContainer and StopPodSandbox hung until their deadlines. runc's and gVisor's own
    /// shims kill the rest of a container on its init's exit too. In a PID namespace of its
    /// own the sentry has done it already, and this finds nothing to signal.
    async fn kill_what_the_init_left(&self) {
        if self.killed_all.swap(true, Ordering::SeqCst) {
            return;
        }
        let signal = libc::SIGKILL as u32;
        match self
            .runtime
            .kill(self.runsc_id(), signal, KillTarget::All)
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_gone() => {}
            Err(e) => log::warn!("container {}: killing what its init left: {e}", self.id),
        }
    }
}
