//! [`ShimEnv`]: what every container of one shim shares, and nothing else.
//!
//! The shim's seams to the outside world live here as trait objects: where events go, how a
//! container's sandbox runtime is made, and the host kernel. `server.rs` builds the real ones;
//! unit tests build fakes (`ShimEnv::for_tests`).

use std::path::PathBuf;
use std::sync::Arc;

use crate::events::EventSink;
use gvisor_hardened_core::host::Host;
use gvisor_hardened_core::runtime::RuntimeFactory;

pub struct ShimEnv {
    /// containerd's namespace of every container this shim serves.
    pub namespace: String,
    pub events: Arc<dyn EventSink>,
    pub runtimes: Arc<dyn RuntimeFactory>,
    pub host: Arc<dyn Host>,
    /// The node policy, `/etc/gvisor-hardened/policy.toml` (see `policy_source`).
    pub node_policy: PathBuf,
    /// Where the console sockets runsc sends terminal masters to are made. Socket paths are
    /// limited to 108 bytes, so they live in a short directory rather than in the bundle.
    pub console_dir: PathBuf,
    /// containerd's record of each container, where its clients' inspect commands look.
    pub records: Arc<dyn crate::record::ContainerRecords>,
}

pub const CONSOLE_DIR: &str = "/run/gvisor-hardened/console";
