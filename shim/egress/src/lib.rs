//! Egress: a sandbox with an allowlist reaches the hosts its policy names through a proxy the
//! shim runs for it, and nothing else.
//!
//! The sandbox keeps `--network=none`. Inside, the forwarder (crate `gvisor-hardened-forwarder`,
//! started with `runsc exec` under its own uid and empty capability sets) listens on the
//! policy's `listen` address and carries every connection over its stdio. Here:
//!
//! - [`mux`]: the host end of the framing protocol (streams, flow control);
//! - [`http`], [`sni`]: bounded parsers of the request head and the TLS ClientHello;
//! - [`guard`]: the resolved-address guard;
//! - [`caps`]: connections open at once and started per second, per sandbox;
//! - [`proxy`]: allowlist → resolve → guard → (SNI) → dial the checked address → carry bytes
//!   within the byte cap, one audit record per connection;
//! - [`net`]: the resolver and the dialer (from the pod's network namespace);
//! - [`ingress`]: published ports, each connection carried into the sandbox (CONNECT);
//! - [`audit`]: the records and the sink the shim connects to its audit log;
//! - [`supervisor`]: keeps one forwarder alive per sandbox and stops it at the end;
//! - [`spawn`]: the `runsc exec` spawner;
//! - [`install`]: the forwarder binary the policy names, checked before create.
//!
//! Wiring, per pod (see `start_for_sandbox`): after the sandbox container *started* (runsc
//! refuses exec before), build a [`proxy::Proxy`] from the `Hardened::egress` plan and start an
//! [`supervisor::EgressSupervisor`] with a [`spawn::RunscExec`]; `wait_ready` before reporting
//! the start if the workload must find the port open; `stop` at delete.

pub mod audit;
pub mod caps;
pub mod confined;
pub mod credentials;
pub mod guard;
pub mod http;
pub mod ingress;
pub mod install;
pub mod mux;
pub mod net;
pub mod proxy;
pub mod sni;
pub mod spawn;
pub mod supervisor;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use policy_injector::EgressPlan;

pub use audit::{EgressAudit, EgressAuditSink, EgressEvent, SandboxRef};
pub use proxy::Proxy;
pub use supervisor::{
    EgressSupervisor, ForwarderSpawner, ForwarderState, SandboxRunning, SupervisorOptions,
};

/// Everything the wiring knows about one sandbox.
pub struct SandboxEgress {
    pub plan: EgressPlan,
    pub sandbox: SandboxRef,
    /// The pod's network namespace path from the sandbox spec (CRI), or `None` to dial from the
    /// shim's own namespace (`ctr` containers without one).
    pub netns: Option<PathBuf>,
    /// The node's addresses (`guard::node_addresses()`), refused as destinations.
    pub node_addresses: Vec<std::net::IpAddr>,
    /// Whether the sandbox still runs: a forwarder that ends with it is not a death.
    pub running: SandboxRunning,
    /// How to confine the proxy process; `None`: the proxy runs in this process (tools and
    /// tests; both front ends confine it).
    pub confine: Option<confined::Confinement>,
}

/// A sandbox that runs while its host process does (a pidfd, so a recycled pid is never
/// mistaken for it); without one, while nothing says otherwise.
pub fn running_while(
    process: Option<Arc<gvisor_hardened_proc::host_process::HostProcess>>,
) -> SandboxRunning {
    Arc::new(move || process.as_ref().is_none_or(|p| p.is_running()))
}

/// Builds the proxy with the real resolver and the netns dialer, and starts supervising the
/// forwarder. Call on the shim's runtime after the sandbox container started.
pub fn start_for_sandbox(
    s: SandboxEgress,
    spawner: Arc<dyn ForwarderSpawner>,
    audit: Arc<dyn EgressAuditSink>,
) -> EgressSupervisor {
    let guard = guard::Guard::new(s.plan.allow_cidrs.clone(), s.node_addresses.clone());
    let ca = credentials::sandbox_ca(&s.sandbox.sandbox_id);
    let confined = s.confine.map(|how| {
        Arc::new(confined::parent::Confined {
            how,
            netns: s.netns.clone(),
            node_addresses: s.node_addresses,
            ca: ca.clone(),
        })
    });
    let mut proxy = Proxy::new(
        s.plan,
        guard,
        s.sandbox,
        Arc::new(net::SystemResolver),
        Arc::new(net::NetnsDialer::new(s.netns, Duration::from_secs(10))),
        audit,
    );
    if confined.is_none() {
        proxy = proxy.with_credentials(ca);
    }
    EgressSupervisor::start_with(
        Arc::new(proxy),
        confined,
        spawner,
        SupervisorOptions::default(),
        s.running,
    )
}

#[cfg(test)]
mod tests;
