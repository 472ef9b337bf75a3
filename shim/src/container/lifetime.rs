//! The policy's wall-clock limit: SIGTERM to every process of the container, a grace period,
//! then SIGKILL. The exit that follows is classified as a timeout (see `exit.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Container;
use crate::audit::AuditEvent;
use crate::runtime::KillTarget;

impl Container {
    /// Armed at Start; disarmed by the init's exit and by delete.
    pub(super) fn arm_lifetime(self: &Arc<Self>) {
        let me = self.clone();
        let task = tokio::spawn(async move {
            let lifetime = me.lifetime;
            tokio::select! {
                _ = tokio::time::sleep(lifetime.max_runtime) => {}
                _ = me.init.wait() => return,
            }
            me.expired.store(true, Ordering::SeqCst);
            log::warn!(
                "container {}: maximum runtime {:?} reached, sending SIGTERM",
                me.id,
                lifetime.max_runtime
            );
            me.audit_best_effort(&me.record(AuditEvent::Timeout));
            me.signal_all(libc::SIGTERM).await;
            tokio::select! {
                _ = tokio::time::sleep(lifetime.grace_period) => {}
                _ = me.init.wait() => return,
            }
            log::warn!("container {}: grace period over, sending SIGKILL", me.id);
            me.signal_all(libc::SIGKILL).await;
        });
        *self.lifetime_task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    async fn signal_all(&self, signal: i32) {
        if let Err(e) = self
            .runtime
            .kill(&self.id, signal as u32, KillTarget::All)
            .await
        {
            log::warn!(
                "container {}: signal {signal} at the time limit: {e}",
                self.id
            );
        }
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
