//! Where the forwarder is and whom it runs as, unless the policy says otherwise.

/// The default host path of the forwarder binary; the installer and `hack/build-forwarder.sh`
/// put it there.
pub const DEFAULT_FORWARDER: &str = "/usr/local/lib/gvisor-hardened/gvisor-hardened-forwarder";
/// The forwarder's default uid and gid: not the workload's (65534), so the workload cannot
/// signal it.
pub const DEFAULT_FORWARDER_ID: u32 = 65532;
