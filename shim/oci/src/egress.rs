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

use std::sync::Arc;

use super::log::EngineLog;
use super::state::{Record, StateDir};
use super::trail::StateTrail;
use gvisor_hardened_core::egress::audit::AuditLine;
use gvisor_hardened_core::egress::{
    self, EgressAudit, EgressAuditSink, EgressSupervisor, SandboxRef,
};
use gvisor_hardened_core::runtime::SandboxRuntime;
use gvisor_hardened_core::sandbox::egress_start::{self, EgressStart};

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
    let sink = LogSink {
        audit: audit.clone(),
        namespace: record.namespace.clone(),
        log: record.log.clone(),
    };
    egress_start::start(
        EgressStart {
            plan,
            sandbox: SandboxRef {
                sandbox_id: record.id.clone(),
                container_id: record.id.clone(),
                policy: record.policy_name.clone(),
            },
            runtime,
            runsc_id: &record.id,
            state_dir: state.path().join("egress"),
            sandbox_pid: sandbox_process.as_ref().map(|p| p.pid()),
            netns: record.network_namespace.clone(),
            running: egress::running_while(sandbox_process),
        },
        sink,
        &|line| record.log.warn(line),
    )
}
