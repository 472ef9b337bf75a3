//! Egress under runsc-hardened: the guard does for its container what the shim's Start and
//! exit do for a sandbox (`crate::container::egress`), with the same pieces: the plan the
//! hardening made (kept in the state at `create`), `egress::start_for_sandbox`, the runtime's
//! forwarder spawner (`runsc exec`), and the audit log the guard writes its `exit` record to.
//!
//! - When: on the STARTED notification (runsc refuses an exec before `runsc start`). `start`
//!   does not wait for the forwarder: a Docker or Podman container is its own sandbox, so the
//!   hardening put its command behind the forwarder's `--await-listener`, and it waits for the
//!   port itself; waiting in `start` too would only add the forwarder's start-up to every run.
//!   A `docker exec` in that window gets "connection refused" (closed, never wider).
//! - Where the proxy dials from: the network namespace the spec names by path, else the
//!   guard's own, the host's (`--network none`: the container has no network of its own).
//! - Fail closed: if egress cannot be set up, nothing listens inside (the workload's
//!   `--await-listener` gives up and it never runs), and the reason is audited as an
//!   `egress-forwarder-died` record. The supervisor restarts a forwarder that dies.
//! - Until: the sandbox's exit. The guard stops it before its `exit` record, so the egress
//!   records precede it in the same chained log.

use std::os::unix::fs::DirBuilderExt;
use std::sync::Arc;

use super::log::EngineLog;
use super::state::{Record, StateDir};
use super::trail::StateTrail;
use gvisor_hardened_core::egress::audit::AuditLine;
use gvisor_hardened_core::egress::{
    self, EgressAudit, EgressAuditSink, EgressEvent, EgressSupervisor, SandboxEgress, SandboxRef,
};
use gvisor_hardened_core::runtime::SandboxRuntime;

/// Egress records go to the log the guard's lifecycle records go to, chained with them (from
/// a writer thread: `egress::audit::QueuedSink`).
#[derive(Clone)]
struct LogSink {
    audit: StateTrail,
    namespace: String,
    log: EngineLog,
}

impl EgressAuditSink for LogSink {
    fn record(&self, record: EgressAudit) {
        if let Err(e) = self
            .audit
            .append_value(&AuditLine::now(&self.namespace, &record))
        {
            self.log.warn(&format!(
                "egress audit of container {}: {e}",
                record.sandbox.container_id
            ));
        }
    }
}

/// Starts the proxy and the forwarder's supervisor for a started container whose policy
/// allows egress; `None` when it does not, or when egress could not be set up (audited).
pub(super) fn start(
    record: &Record,
    state: &StateDir,
    runtime: &dyn SandboxRuntime,
    audit: &StateTrail,
    sandbox_process: Option<Arc<gvisor_hardened_core::sandbox::host_process::HostProcess>>,
) -> Option<EgressSupervisor> {
    let plan = record.egress.clone()?;
    let sandbox = SandboxRef {
        sandbox_id: record.id.clone(),
        container_id: record.id.clone(),
        policy: record.policy_name.clone(),
    };
    let sink = LogSink {
        audit: audit.clone(),
        namespace: record.namespace.clone(),
        log: record.log.clone(),
    };
    let dir = state.path().join("egress");
    let setup = egress::guard::node_addresses()
        .map_err(|e| format!("the node's addresses: {e}"))
        .and_then(|addresses| {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| format!("{}: {e}", dir.display()))
                .map(|()| addresses)
        })
        .and_then(|addresses| {
            runtime
                .egress_confinement(sandbox_process.as_ref().map(|p| p.pid()))
                .map(|confine| (addresses, confine))
        });
    let (node_addresses, confine) = match setup {
        Ok(a) => a,
        Err(reason) => {
            // Without the node's addresses the proxy could not refuse the node itself, and
            // without its confinement it does not run: no proxy at all, nothing listens inside.
            record.log.warn(&format!(
                "container {}: egress not set up ({reason}); connections are refused",
                record.id
            ));
            sink.record(EgressAudit {
                sandbox,
                event: EgressEvent::ForwarderDied {
                    reason: format!("egress not set up: {reason}"),
                    attempt: 1,
                },
            });
            return None;
        }
    };
    let spawner = runtime.forwarder(&record.id, &dir, plan.forwarder_process());
    Some(egress::start_for_sandbox(
        SandboxEgress {
            plan,
            sandbox,
            netns: record.network_namespace.clone(),
            node_addresses,
            running: egress::running_while(sandbox_process),
            confine,
        },
        spawner,
        // Written before `start` returns when egress is not set up (above); from here on by a
        // thread of their own, flushed when the supervisor stops.
        egress::audit::queued(sink),
    ))
}
