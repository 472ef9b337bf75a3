//! Egress for a sandbox whose policy has an allowlist: one forwarder inside and one proxy on the
//! host per sandbox (per pod: the pod's later containers share the sandbox container's).
//!
//! The forwarder is started with `runsc exec` once the sandbox container runs (runsc refuses an
//! exec before) and Start waits for it to listen, so a pod's containers, started after the
//! sandbox container, find the port open. If it cannot be started, egress stays closed:
//! nothing listens inside, connections are refused, and the supervisor audits why and keeps
//! trying. It is stopped before the sandbox container's final audit record, so every egress
//! record falls inside the sandbox's signed trail.
//!
//! The set-up (node addresses, state directory, confinement, fail closed with a record) is
//! the core's, shared with runsc-hardened (`gvisor_hardened_core::sandbox::egress_start`).

use std::sync::Arc;
use std::time::Duration;

use super::Container;
use gvisor_hardened_core::audit::Trail;
use gvisor_hardened_core::egress::audit::AuditLine;
use gvisor_hardened_core::egress::{self, EgressAudit, EgressAuditSink, SandboxRef};
use gvisor_hardened_core::sandbox::egress_start::{self, EgressStart};

/// How long Start waits for the forwarder to listen.
const FORWARDER_READY: Duration = Duration::from_secs(10);

/// Egress records go into the sandbox container's trail, so the final record's signature
/// covers them too; from a writer thread (`egress::audit::QueuedSink`), never on the shim's
/// async thread, and all written before the supervisor's stop returns.
#[derive(Clone)]
struct TrailSink(Arc<Trail>);

impl EgressAuditSink for TrailSink {
    fn record(&self, record: EgressAudit) {
        let line = AuditLine::now(self.0.owner().0, &record);
        if let Err(e) = self.0.append_value(&line) {
            log::error!("egress audit of {}: {e}", record.sandbox.container_id);
        }
    }
}

impl Container {
    /// After the sandbox container started: the forwarder inside, the proxy on the host.
    pub(super) async fn start_egress(self: &Arc<Self>) {
        let Some(plan) = self.egress_plan.clone() else {
            return;
        };
        if self.is_member() {
            return;
        }
        let sandbox_pid = self.sandbox_process.get().map(|p| p.pid());
        let running = {
            let sandbox = egress::running_while(self.sandbox_process.get().cloned());
            let me = Arc::downgrade(self);
            // The init's end is known to the shim before its sandbox process is reaped.
            Arc::new(move || {
                me.upgrade()
                    .is_some_and(|c| !c.init_ended.is_cancelled() && sandbox())
            })
        };
        let started = egress_start::start(
            EgressStart {
                plan,
                sandbox: SandboxRef {
                    sandbox_id: self.id.clone(),
                    container_id: self.id.clone(),
                    // As an agent sees it in a refusal: the policy file's name (the installer
                    // names them after their RuntimeClass), or `default`.
                    policy: self.policy.source.name(),
                },
                runtime: self.runtime.as_ref(),
                runsc_id: self.runsc_id(),
                state_dir: self.bundle.join("egress"),
                sandbox_pid,
                netns: self.network_namespace.clone(),
                running,
            },
            TrailSink(self.audit.clone()),
            &|line| log::error!("{line}"),
        );
        let Some(supervisor) = started else {
            return;
        };
        // Held while waiting: a delete meanwhile stops what this started, after it.
        let mut slot = self.egress.lock().await;
        let supervisor = slot.insert(supervisor);
        let ready = tokio::select! {
            ready = supervisor.wait_ready(FORWARDER_READY) => Some(ready),
            // A sandbox that is already gone needs no forwarder (its exit stops it).
            _ = self.init_ended.cancelled() => None,
        };
        match ready {
            Some(Ok(listen)) => log::info!("container {}: egress forwarder on {listen}", self.id),
            Some(Err(state)) => log::warn!(
                "container {}: egress forwarder not listening after {FORWARDER_READY:?} \
                 ({state:?}); connections are refused until it is",
                self.id
            ),
            None => {}
        }
    }

    /// Stops the forwarder and the proxy (open connections are reset).
    pub(super) async fn stop_egress(&self) {
        if let Some(supervisor) = self.egress.lock().await.take() {
            supervisor.stop().await;
        }
        if !self.is_member() {
            // The sandbox's CA goes with its proxy; its bundle file with it.
            egress::credentials::forget_sandbox(&self.env.namespace, &self.id);
        }
    }
}
