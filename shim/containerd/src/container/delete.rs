//! Delete of a container, and the release of everything it held. Also the teardown of a
//! container when the shim itself is told to go (SIGTERM).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use containerd_shim_protos::api::DeleteResponse;

use super::Container;
use crate::error::{Result, ShimError};
use crate::process::state::Op;
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::bundle;
use gvisor_hardened_core::exit::Exit;
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runtime::KillTarget;
use gvisor_hardened_core::workspace::WorkspaceReport;

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
        let (cleanup, workspace) = self.release().await;
        let pid = self.init.pid();
        self.events()
            .delete(&self.id, pid, exit.status, exit.at)
            .await;
        let mut rec = self.record(AuditEvent::Delete);
        rec.pid = Some(pid);
        rec.exit_status = Some(exit.status);
        rec.workspace = workspace.as_ref();
        if let Err(e) = &cleanup {
            rec.error = Some(e.to_string());
        }
        self.seal_best_effort(&rec).await;
        cleanup?;
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

    /// Removes runsc state, the rootfs mount, leftover cgroups and our files, and concludes the
    /// workspace if the exit did not (a container deleted before it ran, a shim torn down).
    /// Every step runs even if an earlier one failed; the first error is returned, with the
    /// workspace report when this concluded it.
    pub(super) async fn release(&self) -> (Result<()>, Option<WorkspaceReport>) {
        self.stop_lifetime();
        // Before the sandbox goes and before its final audit record: its egress records stay
        // inside its trail.
        self.stop_egress().await;
        let mut first: Option<ShimError> = None;
        match self.runtime.delete(self.runsc_id()).await {
            Err(e) if !e.is_gone() => {
                first.get_or_insert(e.into());
            }
            _ => {}
        }
        // A claimed warm sandbox is gone with its pod: its entry and its bundle go too.
        if let Some(claim) = &self.pool_claim {
            claim.key.forget(&claim.entry.id);
        }
        self.init.io.close();
        for p in self.execs.lock().await.values() {
            p.io.close();
        }
        if self.rootfs_mounted.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.env.host.unmount_rootfs(&self.bundle.join("rootfs")) {
                first.get_or_insert(e.into());
            }
        }
        if let Err(e) = self.env.host.remove_cgroups(&self.cgroups_path, &self.id) {
            first.get_or_insert(e.into());
        }
        let bundle = self.bundle.clone();
        let workspace = tokio::task::spawn_blocking(move || {
            bundle::release_after_delete(&bundle, bundle::Files::Shim)
        })
        .await
        .unwrap_or_default();
        let result = match first {
            Some(e) => Err(e),
            None => Ok(()),
        };
        (result, workspace)
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
        let (cleanup, workspace) = self.release().await;
        if let Err(e) = cleanup {
            log::error!("container {}: teardown: {e}", self.id);
        }
        let mut rec = self.record(AuditEvent::Delete);
        rec.workspace = workspace.as_ref();
        rec.error = Some("shim terminated".to_string());
        self.seal_best_effort(&rec).await;
    }
}
