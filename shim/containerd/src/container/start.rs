//! Start of a container's init: the sandbox's first container, or a pod's later one.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;

use super::Container;
use crate::error::{Result, ShimError};
use crate::process::state::Op;
use gvisor_hardened_core::artifacts::StartRecord;
use gvisor_hardened_core::audit::AuditRecord;
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runtime::KillTarget;
use gvisor_hardened_core::sandbox::start::{self, StartPlan, StartSteps};

impl Container {
    pub async fn start(self: &Arc<Self>) -> Result<u32> {
        let pid = self.start_init().await?;
        // After TaskStart (the start lock released: an exit meanwhile is reported as usual) and
        // before Start answers: a pod's later containers, started after this one, find the
        // forwarder listening.
        self.start_egress().await;
        Ok(pid)
    }

    /// The core's start sequence (`gvisor_hardened_core::sandbox::start`) with the shim's
    /// steps, under the start lock.
    async fn start_init(self: &Arc<Self>) -> Result<u32> {
        let _starting = self.start_lock.lock().await;
        self.init
            .check(Op::Start)
            .map_err(|e| self.state_error(&self.init, e))?;
        let plan = StartPlan {
            id: &self.id,
            subject: &self.subject,
            mounts: self.evidence.binds.clone(),
            policy: self.policy.policy.audit.artifacts.clone(),
            audit_log: self.audit.log().path().to_path_buf(),
        };
        start::start(&InitStart { c: self }, plan).await?;
        log::info!("container {} started", self.id);
        Ok(self.init.pid())
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

/// The shim's steps of the core's start sequence.
struct InitStart<'a> {
    c: &'a Arc<Container>,
}

#[async_trait]
impl StartSteps for InitStart<'_> {
    type Error = ShimError;

    fn keep_manifest(&self, start: &StartRecord) -> Result<()> {
        *self
            .c
            .evidence
            .start
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(start.clone());
        Ok(())
    }

    async fn run(&self) -> Result<Option<u32>> {
        let c = self.c;
        // runsc hands `runsc start`'s own stdio to a pod's later container (and create's to the
        // sandbox's first one).
        let stdio = if c.is_member() && !c.init.stdio.terminal {
            Some(c.init.io.open_pipes(&c.init.stdio)?)
        } else {
            None
        };
        // A claimed warm sandbox was started by the filler: its root process already runs.
        if c.pool_claim.is_none() {
            if let Err(e) = c.runtime.start(&c.id, stdio).await {
                c.init.io.close();
                return Err(e.into());
            }
        }
        // The exit path waits for the start lock, so the init cannot have stopped meanwhile.
        c.init
            .apply(Op::Start)
            .map_err(|e| c.state_error(&c.init, e))?;
        Ok(Some(c.init.pid()))
    }

    async fn running(&self, pid: Option<u32>) {
        let c = self.c;
        if c.is_member() {
            c.watch_member_exit();
        }
        c.arm_lifetime();
        c.events().start(&c.id, pid.unwrap_or_default()).await;
    }

    async fn append(&self, record: &AuditRecord<'_>) {
        self.c.audit_best_effort(record).await;
    }
}
