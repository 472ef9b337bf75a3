//! Start, kill, exit, the wall-clock limit, delete.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use containerd_shim_protos::api::DeleteResponse;

use super::create::{BUNDLE_STATE, INIT_PID_FILE};
use super::runtime::{KillTarget, RuntimeError};
use super::Container;
use crate::audit::AuditEvent;
use crate::cgroup::exit_cause::ExitCause as CgroupCause;
use crate::error::{Result, ShimError};
use crate::process::state::{Exit, ExitCause, State, StateError};
use crate::reaper::ExitStatus;
use crate::rootfs;

/// How long Delete waits for a created-but-never-started sandbox to die after a forced delete.
const REAP_AFTER_DELETE: Duration = Duration::from_secs(10);

fn runtime_err(op: &str, id: &str, e: RuntimeError) -> ShimError {
    ShimError::Runsc(format!("runsc {op} {id}: {e}"))
}

impl Container {
    pub async fn start(self: &Arc<Self>) -> Result<u32> {
        let _starting = self.start_lock.lock().await;
        // Validate the transition before touching runsc, apply it after runsc agreed.
        let state = self.init.state();
        if !matches!(state, State::Created { .. }) {
            return Err(StateError::Invalid {
                op: "start",
                current: state.name(),
            }
            .into());
        }
        let sub = self.pod_sandbox.is_some();
        let stdio = if sub && !self.init.stdio.terminal {
            Some(self.init.io.open_pipes(&self.init.stdio)?)
        } else {
            None
        };
        if let Err(e) = self.runtime.start(&self.id, stdio).await {
            self.init.io.close();
            return Err(runtime_err("start", &self.id, e));
        }
        let pid = self.init.transition(|s| s.start())?;
        if sub {
            self.watch_subcontainer();
        }
        self.arm_lifetime();
        self.events().start(&self.id, pid).await;
        let mut rec = self.record(AuditEvent::Start);
        rec.pid = Some(pid);
        self.audit_best_effort(&rec);
        log::info!("container {} started", self.id);
        Ok(pid)
    }

    /// A pod's later container: its exit comes from `runsc wait`, which the sandbox answers as
    /// long as it lives. When the whole sandbox goes (pod stopped, sandbox killed), the wait
    /// fails and the container is reported killed.
    fn watch_subcontainer(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move {
            let code = match me.runtime.wait(&me.id).await {
                Ok(code) => code,
                Err(e) => {
                    log::warn!("container {}: runsc wait: {e}; reporting it killed", me.id);
                    128 + libc::SIGKILL as u32
                }
            };
            let status = if code > 128 {
                ExitStatus::Signaled {
                    signal: (code - 128) as i32,
                    core_dumped: false,
                }
            } else {
                ExitStatus::Exited(code as i32)
            };
            me.on_init_exit(status).await;
        });
    }

    /// The policy's wall-clock limit: SIGTERM to every process, a grace period, then SIGKILL.
    fn arm_lifetime(self: &Arc<Self>) {
        let me = self.clone();
        let task = tokio::spawn(async move {
            let lifetime = me.lifetime;
            tokio::select! {
                _ = tokio::time::sleep(lifetime.max_runtime) => {}
                _ = me.init.wait() => return,
            }
            me.timed_out.store(true, Ordering::SeqCst);
            log::warn!(
                "container {}: maximum runtime {:?} reached, sending SIGTERM",
                me.id,
                lifetime.max_runtime
            );
            me.audit_best_effort(&me.record(AuditEvent::Timeout));
            if let Err(e) = me
                .runtime
                .kill(&me.id, libc::SIGTERM as u32, KillTarget::All)
                .await
            {
                log::warn!("container {}: SIGTERM on timeout: {e}", me.id);
            }
            tokio::select! {
                _ = tokio::time::sleep(lifetime.grace_period) => {}
                _ = me.init.wait() => return,
            }
            log::warn!("container {}: grace period over, sending SIGKILL", me.id);
            if let Err(e) = me
                .runtime
                .kill(&me.id, libc::SIGKILL as u32, KillTarget::All)
                .await
            {
                log::warn!("container {}: SIGKILL on timeout: {e}", me.id);
            }
        });
        *self.lifetime_task.lock().unwrap() = Some(task);
    }

    /// The sandbox process ended: classify why, announce it, audit it.
    pub(super) async fn on_init_exit(self: &Arc<Self>, status: ExitStatus) {
        let cause = if self.timed_out.load(Ordering::SeqCst) {
            ExitCause::Timeout
        } else {
            match self.cgroup.get().map(|p| p.classify(status)) {
                Some(Ok(CgroupCause::Oom)) => ExitCause::Oom,
                Some(Ok(CgroupCause::ProcessLimit)) => ExitCause::ProcessLimit,
                Some(Ok(CgroupCause::Normal)) | None => ExitCause::Normal,
                Some(Err(e)) => {
                    log::warn!(
                        "container {}: reading the sandbox's cgroup counters: {e}",
                        self.id
                    );
                    ExitCause::Normal
                }
            }
        };
        // An exit during Start waits until Start has recorded the start and sent TaskStart.
        drop(self.start_lock.lock().await);
        // Terminal output still in flight must reach the client before the exit does.
        let init = self.init.clone();
        let _ = tokio::task::spawn_blocking(move || init.io.wait_output()).await;
        let exit = Exit {
            status: status.containerd_code(),
            at: SystemTime::now(),
            cause,
        };
        let pid = self.init.pid();
        if !self.init.record_exit(exit) {
            return;
        }
        match cause {
            ExitCause::Oom => self.report_oom().await,
            ExitCause::ProcessLimit => log::error!(
                "container {}: process limit exceeded: the sandbox crossed its pids ceiling and runsc stopped it",
                self.id
            ),
            ExitCause::Timeout | ExitCause::Normal => {}
        }
        self.events()
            .exit(&self.id, "", pid, exit.status, exit.at)
            .await;
        let mut rec = self.record(AuditEvent::Exit);
        rec.pid = Some(pid);
        rec.exit_status = Some(exit.status);
        rec.oom = cause == ExitCause::Oom;
        rec.timed_out = cause == ExitCause::Timeout;
        rec.process_limit_exceeded = cause == ExitCause::ProcessLimit;
        if cause == ExitCause::ProcessLimit {
            rec.error = Some("process limit exceeded".to_string());
        }
        self.audit_best_effort(&rec);
        log::info!(
            "container {} {}: {status}",
            self.id,
            match cause {
                ExitCause::Normal => "exited",
                ExitCause::Oom => CgroupCause::Oom.describe(),
                ExitCause::ProcessLimit => CgroupCause::ProcessLimit.describe(),
                ExitCause::Timeout => "was stopped at its maximum runtime",
            }
        );
        if let Some(t) = self.lifetime_task.lock().unwrap().take() {
            t.abort();
        }
    }

    pub async fn kill(&self, exec_id: &str, signal: u32, all: bool) -> Result<()> {
        let p = self.process(exec_id).await?;
        if !p.state().is_alive() {
            return Err(ShimError::NotFound(format!(
                "process {} of container {}: already finished",
                if exec_id.is_empty() { "init" } else { exec_id },
                self.id
            )));
        }
        let target = if !exec_id.is_empty() {
            match p.guest_pid() {
                Some(pid) => KillTarget::Guest(pid),
                None => {
                    return Err(StateError::Invalid {
                        op: "kill",
                        current: "pending",
                    }
                    .into())
                }
            }
        } else if all {
            KillTarget::All
        } else {
            KillTarget::Init
        };
        match self.runtime.kill(&self.id, signal, target).await {
            Ok(()) => Ok(()),
            // It died between our check and runsc's: the exit is on its way through the reaper.
            Err(RuntimeError::Gone(msg)) => {
                log::debug!("container {}: kill: {msg}", self.id);
                Ok(())
            }
            Err(e) => Err(runtime_err("kill", &self.id, e)),
        }
    }

    pub async fn delete(self: &Arc<Self>) -> Result<DeleteResponse> {
        match self.init.state() {
            State::Running { .. } | State::Paused { .. } => {
                return Err(self.init.transition(|s| s.delete()).unwrap_err().into())
            }
            // Created but never started (a failed Start, `ctr task delete` before start):
            // runsc's forced delete kills the sandbox; wait for the reaper to see it go.
            State::Created { .. } => {
                self.runtime
                    .delete(&self.id)
                    .await
                    .or_else(ignore_gone)
                    .map_err(|e| runtime_err("delete", &self.id, e))?;
                if self.pod_sandbox.is_some() {
                    // Never started: no process of its own ever ran, nothing to wait for.
                    self.init.record_exit(Exit {
                        status: 128 + libc::SIGKILL as u32,
                        at: SystemTime::now(),
                        cause: ExitCause::Normal,
                    });
                } else if tokio::time::timeout(REAP_AFTER_DELETE, self.init.wait())
                    .await
                    .is_err()
                {
                    return Err(ShimError::Runsc(format!(
                        "sandbox of {} did not exit within {REAP_AFTER_DELETE:?} of runsc delete",
                        self.id
                    )));
                }
            }
            State::Pending | State::Stopped { .. } | State::Deleted { .. } => {}
        }
        let exit = self.init.transition(|s| s.delete())?;
        let cleanup = self.release().await;
        let pid = self.init.pid();
        let exit = exit.unwrap_or(Exit {
            status: 128 + libc::SIGKILL as u32,
            at: SystemTime::now(),
            cause: ExitCause::Normal,
        });
        self.events()
            .delete(&self.id, pid, exit.status, exit.at)
            .await;
        let mut rec = self.record(AuditEvent::Delete);
        rec.pid = Some(pid);
        rec.exit_status = Some(exit.status);
        if let Err(e) = &cleanup {
            rec.error = Some(e.to_string());
        }
        self.audit_best_effort(&rec);
        cleanup?;
        let mut resp = DeleteResponse::new();
        resp.pid = pid;
        resp.exit_status = exit.status;
        resp.exited_at = Some(crate::events::timestamp(exit.at)).into();
        log::info!("container {} deleted", self.id);
        Ok(resp)
    }

    /// Removes runsc state, the rootfs mount and our files. Every step runs even if an earlier
    /// one failed; the first error is returned.
    async fn release(&self) -> Result<()> {
        if let Some(t) = self.lifetime_task.lock().unwrap().take() {
            t.abort();
        }
        let mut first: Option<ShimError> = None;
        if let Err(e) = self.runtime.delete(&self.id).await.or_else(ignore_gone) {
            first.get_or_insert(runtime_err("delete", &self.id, e));
        }
        self.init.io.close();
        for p in self.execs.lock().await.values() {
            p.io.close();
        }
        if self.rootfs_mounted {
            if let Err(e) = rootfs::unmount_all(&self.bundle.join("rootfs")) {
                first.get_or_insert(ShimError::Rootfs(e.to_string()));
            }
        }
        if let Err(e) = self.remove_leftover_cgroups() {
            first.get_or_insert(e);
        }
        for name in [INIT_PID_FILE, BUNDLE_STATE] {
            let _ = std::fs::remove_file(self.bundle.join(name));
        }
        match first {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Shim shutdown on SIGTERM: kill and clean up whatever state the container is in.
    pub async fn teardown(self: &Arc<Self>) {
        if self.init.state().is_alive() {
            let _ = self
                .runtime
                .kill(&self.id, libc::SIGKILL as u32, KillTarget::All)
                .await;
            let _ = tokio::time::timeout(REAP_AFTER_DELETE, self.init.wait()).await;
        }
        if let Err(e) = self.release().await {
            log::error!("container {}: teardown: {e}", self.id);
        }
        let mut rec = self.record(AuditEvent::Delete);
        rec.error = Some("shim terminated".to_string());
        self.audit_best_effort(&rec);
    }
}

fn ignore_gone(e: RuntimeError) -> std::result::Result<(), RuntimeError> {
    match e {
        RuntimeError::Gone(_) => Ok(()),
        other => Err(other),
    }
}
