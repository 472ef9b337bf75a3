//! Delete of a container, and the release of everything it held. Also the teardown of a
//! container when the shim itself is told to go (SIGTERM).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use containerd_shim_protos::api::DeleteResponse;

use super::Container;
use crate::error::{Result, ShimError};
use crate::process::state::Op;
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::bundle;
use gvisor_hardened_core::exit::Exit;
use gvisor_hardened_core::host::Host;
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runtime::KillTarget;
use gvisor_hardened_core::runtime::SandboxRuntime;
use gvisor_hardened_core::sandbox::release::{
    self, ReleasePlan, ReleaseProblem, ReleaseSteps, Released,
};

/// How long Delete waits for a created-but-never-started sandbox to die after a forced delete.
const REAP_AFTER_DELETE: Duration = Duration::from_secs(10);

impl Container {
    pub async fn delete(self: &Arc<Self>) -> Result<DeleteResponse> {
        if self.init.check(Op::Discard).is_ok() {
            self.discard().await?;
        }
        // A running or paused init is refused here, before anything is released.
        self.init
            .check(Op::Delete)
            .map_err(|e| self.state_error(&self.init, e))?;
        // The exit (if any) is published and audited before TaskDelete goes out.
        if self.init.state().exit().is_some() {
            self.init.wait().await;
        }
        let state = self
            .init
            .apply(Op::Delete)
            .map_err(|e| self.state_error(&self.init, e))?;
        let exit = state
            .exit()
            .unwrap_or_else(|| Exit::killed(SystemTime::now()));
        let released = self.release().await;
        let pid = self.init.pid();
        self.events()
            .delete(&self.id, pid, exit.status, exit.at)
            .await;
        let mut rec = self.record(AuditEvent::Delete);
        rec.pid = Some(pid);
        rec.exit_status = Some(exit.status);
        rec.workspace = released.workspace.as_ref();
        rec.error = released.summary();
        self.seal_best_effort(&rec).await;
        if let Some(first) = released.problems.into_iter().next() {
            return Err(first.into());
        }
        let mut resp = DeleteResponse::new();
        resp.pid = pid;
        resp.exit_status = exit.status;
        resp.exited_at = Some(crate::events::timestamp(exit.at)).into();
        log::info!("container {} deleted", self.id);
        Ok(resp)
    }

    /// A created container that never started (a failed Start, `ctr task delete` before start):
    /// runsc's forced delete kills it, and its exit goes the usual way.
    async fn discard(self: &Arc<Self>) -> Result<()> {
        match self.runtime.delete(self.runsc_id()).await {
            Err(e) if !e.is_gone() => return Err(e.into()),
            _ => {}
        }
        if self.is_member() {
            // No process of its own ever ran: nothing will report its end but us.
            self.on_exit(&self.init, ExitStatus::killed()).await;
        } else if tokio::time::timeout(REAP_AFTER_DELETE, self.init.wait())
            .await
            .is_err()
        {
            return Err(ShimError::Internal(format!(
                "the sandbox of {} did not exit within {REAP_AFTER_DELETE:?} of runsc delete",
                self.id
            )));
        }
        Ok(())
    }

    /// The core's release sequence (`gvisor_hardened_core::sandbox::release`) with the
    /// shim's steps: everything runs even if an earlier step failed.
    pub(super) async fn release(&self) -> Released {
        let plan = ReleasePlan {
            id: &self.id,
            runsc_id: self.runsc_id(),
            cgroups_path: &self.cgroups_path,
            bundle: self.bundle.clone(),
            files: bundle::Files::Shim,
        };
        release::release(&Release(self), plan).await
    }

    /// Shim shutdown on SIGTERM: kill and clean up whatever state the container is in.
    pub async fn teardown(self: &Arc<Self>) {
        if self.init.state().is_alive() {
            self.killed_all.store(true, Ordering::SeqCst);
            let _ = self
                .runtime
                .kill(&self.id, libc::SIGKILL as u32, KillTarget::All)
                .await;
            if self.is_member() {
                self.on_exit(&self.init, ExitStatus::killed()).await;
            }
            let _ = tokio::time::timeout(REAP_AFTER_DELETE, self.init.wait()).await;
        }
        let released = self.release().await;
        if let Some(problems) = released.summary() {
            log::error!("container {}: teardown: {problems}", self.id);
        }
        let mut rec = self.record(AuditEvent::Delete);
        rec.workspace = released.workspace.as_ref();
        rec.error = Some("shim terminated".to_string());
        self.seal_best_effort(&rec).await;
    }
}

/// The shim's steps of the core's release sequence.
struct Release<'a>(&'a Container);

#[async_trait]
impl ReleaseSteps for Release<'_> {
    fn runtime(&self) -> std::result::Result<&dyn SandboxRuntime, String> {
        Ok(self.0.runtime.as_ref())
    }

    fn host(&self) -> &dyn Host {
        self.0.env.host.as_ref()
    }

    /// Before the sandbox goes and before its final audit record: its egress records stay
    /// inside its trail.
    async fn before_runsc(&self) {
        self.0.stop_lifetime();
        self.0.stop_egress().await;
    }

    /// A claimed warm sandbox is gone with its pod: its entry goes too. Then the streams and
    /// the rootfs.
    async fn let_go(&self, problems: &mut Vec<ReleaseProblem>) {
        let c = self.0;
        if let Some(claim) = &c.pool_claim {
            claim.key.forget(&claim.entry.id);
        }
        c.init.io.close();
        for p in c.execs.lock().await.values() {
            p.io.close();
        }
        if c.rootfs_mounted.swap(false, Ordering::SeqCst) {
            if let Err(e) = c.env.host.unmount_rootfs(&c.bundle.join("rootfs")) {
                problems.push(ReleaseProblem::Step(e.to_string()));
            }
        }
    }
}
