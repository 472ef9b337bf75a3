//! Egress for a started sandbox, for both front ends: the node's addresses (refused as
//! destinations), the proxy's private state directory, its confinement, then the proxy and
//! the forwarder's supervisor. Fail closed: when a step fails, nothing is started, nothing
//! listens inside the sandbox (its connections are refused), and the reason is recorded as an
//! `egress-forwarder-died` record and said in the front end's log.
//!
//! What stays with each front end: when this runs (the shim's Start, runsc-hardened's guard
//! on STARTED), whether it waits for the forwarder, and where the supervisor is kept until
//! the sandbox's end.

use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use policy_injector::EgressPlan;

use crate::egress::{
    self, EgressAudit, EgressAuditSink, EgressEvent, EgressSupervisor, SandboxEgress, SandboxRef,
    SandboxRunning,
};
use crate::runtime::SandboxRuntime;

/// A started sandbox's egress, as the front end knows it.
pub struct EgressStart<'a> {
    pub plan: EgressPlan,
    pub sandbox: SandboxRef,
    pub runtime: &'a dyn SandboxRuntime,
    /// The id runsc knows the sandbox by (the forwarder is a `runsc exec` into it).
    pub runsc_id: &'a str,
    /// The proxy's state directory (made 0700 here).
    pub state_dir: PathBuf,
    /// runsc's sandbox process: the proxy joins its cgroups.
    pub sandbox_pid: Option<i32>,
    /// The pod's network namespace, where the proxy dials from; `None`: the front end's own.
    pub netns: Option<PathBuf>,
    pub running: SandboxRunning,
}

/// Starts egress for `s`, its records through `sink` (queued on a writer thread once
/// running); `None` when a step failed (recorded, and said through `warn`).
pub fn start<S: EgressAuditSink + Clone>(
    s: EgressStart<'_>,
    sink: S,
    warn: &dyn Fn(&str),
) -> Option<EgressSupervisor> {
    let setup = egress::guard::node_addresses()
        .map_err(|e| format!("the node's addresses: {e}"))
        .and_then(|addresses| {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .recursive(true)
                .create(&s.state_dir)
                .map_err(|e| format!("{}: {e}", s.state_dir.display()))
                .map(|()| addresses)
        })
        .and_then(|addresses| {
            s.runtime
                .egress_confinement(s.sandbox_pid)
                .map(|confine| (addresses, confine))
        });
    let (node_addresses, confine) = match setup {
        Ok(a) => a,
        Err(reason) => {
            // Without the node's addresses the proxy could not refuse the node itself, and
            // without its confinement it does not run: no proxy at all.
            warn(&format!(
                "container {}: egress not set up ({reason}); connections are refused",
                s.sandbox.container_id
            ));
            sink.record(EgressAudit {
                sandbox: s.sandbox,
                event: EgressEvent::ForwarderDied {
                    reason: format!("egress not set up: {reason}"),
                    attempt: 1,
                },
            });
            return None;
        }
    };
    let spawner = s
        .runtime
        .forwarder(s.runsc_id, &s.state_dir, s.plan.forwarder_process());
    Some(egress::start_for_sandbox(
        SandboxEgress {
            plan: s.plan,
            sandbox: s.sandbox,
            netns: s.netns,
            node_addresses,
            running: s.running,
            confine,
        },
        spawner,
        egress::audit::queued(sink),
    ))
}
