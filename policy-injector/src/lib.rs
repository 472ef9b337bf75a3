//! The hardening policy and the pure OCI spec rewriter of gvisor-hardened.
//!
//! `harden(spec, &policy, &context)` takes a container's OCI `config.json` as JSON and returns the
//! hardened spec, the runsc flags and lifetime the shim must apply, and the audit record, or a
//! rejection naming the rule and field. It does no I/O and reads no clock, environment or
//! global: the same input gives byte-identical output.

#[cfg(feature = "reports")]
pub mod attestation;
/// The audit log's format, its own pure crate (`audit-chain/`), re-exported under the name
/// its callers use.
pub use gvisor_hardened_audit_chain as audit_chain;
pub mod decision;
pub mod egress;
pub mod error;
#[cfg(feature = "reports")]
pub mod export;
pub mod git_config;
pub mod git_hooks;
mod glob;
pub mod harden;
mod json;
#[cfg(feature = "reports")]
pub mod metrics;
pub mod mount;
pub mod policy;
pub mod quantity;
pub mod redact;
mod rules;
pub mod tree_glob;
pub mod workspace;

pub use decision::{Action, Decision, Rule};
pub use egress::EgressPlan;
pub use error::{HardenError, PolicyError, Rejection};
pub use harden::{
    clamp_resources, harden, harden_owned, harden_process, AtCreate, ClampedResources, Context,
    Engine, EngineContext, EntryKind, GitEntry, GitEntryKind, GitTree, Hardened, HardenedProcess,
    HookNote, HostTree, Lifetime, RunscFlags, StagedGitDir, TreeEntry, TreeList,
};
pub use mount::is_bind_mount;
pub use policy::{
    preset, EgressPolicy, Mode, NetworkMode, Policy, SecretEnvAction, TokenVolumeAction,
    DEFAULT_POLICY_TOML, PRESETS,
};

/// Annotation keys this crate reads and writes (all under `gvisor-hardened.dev/`).
pub mod annotations {
    pub const PREFIX: &str = "gvisor-hardened.dev/";
    pub const MEMORY: &str = "gvisor-hardened.dev/memory";
    pub const CPU: &str = "gvisor-hardened.dev/cpu";
    /// The guest-process budget; `harden` writes it so re-hardening stays idempotent.
    pub const PIDS: &str = "gvisor-hardened.dev/pids";
    pub const MAX_RUNTIME: &str = "gvisor-hardened.dev/max-runtime";
    pub const IDLE_TIMEOUT: &str = "gvisor-hardened.dev/idle-timeout";
    pub const NETWORK: &str = "gvisor-hardened.dev/network";
    /// Narrows the egress allowlist: comma-separated entries, each covered by the policy's.
    pub const EGRESS: &str = "gvisor-hardened.dev/egress";
    /// What the hardening changed, in one line (`decision::summary`): written by `harden` into
    /// the hardened spec, and by the shim into containerd's record of the container, where
    /// `crictl inspect` and `nerdctl inspect` show it. A spec's own value is never trusted:
    /// the annotations rule removes it and `harden` writes its own.
    pub const DECISIONS: &str = "gvisor-hardened.dev/decisions";
}
