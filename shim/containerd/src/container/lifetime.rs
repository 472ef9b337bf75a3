//! The policy's time limits: the wall-clock limit (`max_runtime`) and the idle timeout
//! (`idle_timeout`). Either stops the container the same way: SIGTERM to every process of it, a
//! grace period, then SIGKILL; the exit that follows is classified as what stopped it (see
//! `exit.rs`), and the moment it fired has an audit record of its own (`timeout`,
//! `idle-timeout`).
//!
//! Idleness is judged by `gvisor_hardened_core::idle` from samples taken every [`SAMPLE_INTERVAL`]: the
//! sandbox cgroup's CPU time (the whole sandbox: in a pod, every container's) and the bytes the
//! shim's output copy has seen (a pod's containers count into one counter, `evidence.rs`).
//! Anything that cannot be read counts as activity: a wrong "busy" only delays a stop, a wrong
//! "idle" would kill work. A paused container uses no CPU and counts as idle.

use std::sync::Arc;

use super::Container;
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::exit::ExitCause;
use gvisor_hardened_core::sandbox::lifetime::{self, Target};

impl Container {
    /// Armed at Start; disarmed by the init's exit and by delete. The limits themselves are
    /// the sandbox core's (`gvisor_hardened_core::sandbox::lifetime`); the shim supplies the idle detector,
    /// records the cause and audits the moment.
    pub(super) fn arm_lifetime(self: &Arc<Self>) {
        let me = self.clone();
        // Taken here, not in the task: the limit counts from Start even if the task first runs
        // later.
        let armed_at = tokio::time::Instant::now();
        let task = tokio::spawn(async move {
            let target = Target {
                runtime: me.runtime.clone(),
                id: me.id.clone(),
                sandbox: me.sandbox_process.get().cloned(),
            };
            let lifetime = me.lifetime;
            let fired = |cause| {
                let _ = me.stopped_for.set(cause);
                // Queued now, so it lands before the exit record the stop brings; not waited
                // for here, since the stop must not wait on the log.
                let written = me.audit.append_queued(&me.record(match cause {
                    ExitCause::IdleTimeout => AuditEvent::IdleTimeout,
                    _ => AuditEvent::Timeout,
                }));
                let id = me.id.clone();
                tokio::spawn(async move {
                    if let Err(e) = written.await {
                        log::error!("container {id}: {e}");
                    }
                });
            };
            let limits = lifetime::enforce(
                &target,
                armed_at,
                lifetime.max_runtime,
                lifetime.grace_period,
                lifetime::idle(
                    format!("container {}", me.id),
                    lifetime.idle_timeout,
                    me.evidence.idle_threshold,
                    me.cgroups.get().cloned(),
                    me.evidence.output.clone(),
                ),
                fired,
            );
            tokio::select! {
                _ = limits => {}
                _ = me.init.wait() => {}
            }
        });
        *self.lifetime_task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    pub(super) fn stop_lifetime(&self) {
        if let Some(t) = self
            .lifetime_task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            t.abort();
        }
    }
}
