//! The hardening policy: its model, the embedded default, strict TOML loading and validation.

mod egress;
mod evidence;
mod issue;
mod locate;
mod pool;
pub mod runsc_flags;
mod sections;
mod validate;
mod workspace;

pub use runsc_flags::{FlagDecision, ALLOWED_EXTRA_FLAGS};

use serde::{Deserialize, Serialize};

pub use egress::{
    CredentialPolicy, EgressPolicy, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTION_RATE,
    MAX_MAX_CONNECTIONS,
};
pub use evidence::{ArtifactsPolicy, OutputPolicy, MIN_IDLE_TIMEOUT};
pub use pool::{
    PoolPolicy, DEFAULT_POOL_MEMORY_LIMIT, DEFAULT_POOL_REFILL_PER_MINUTE,
    MAX_POOL_REFILL_PER_MINUTE, MAX_POOL_SIZE, MIN_POOL_MEMORY_LIMIT,
};
pub use sections::*;
pub use workspace::{WorkspaceExitAction, WorkspacePolicy};

use crate::error::PolicyError;

/// The default policy as commented TOML. `Policy::default()` is exactly what this text loads to.
pub const DEFAULT_POLICY_TOML: &str = include_str!("default-policy.toml");

/// Shipped presets, name and commented TOML: policies for one kind of workload, printed by
/// `policy-injector default-policy --preset NAME` for an operator to adapt.
pub const PRESETS: &[(&str, &str)] = &[("coding-agent", include_str!("presets/coding-agent.toml"))];

/// The text of a shipped preset.
pub fn preset(name: &str) -> Option<&'static str> {
    PRESETS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// `enforce` rewrites and rejects; `audit` only records what enforce would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enforce,
    Audit,
}

/// runsc's `--network` mode. Ordered from tightest to loosest, so an annotation can only pick a
/// mode that is `<=` the policy's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// Loopback only.
    #[default]
    None,
    /// gVisor's netstack inside the pod's network namespace.
    Sandbox,
    /// The host kernel's network stack of the namespace runsc runs in.
    Host,
}

impl NetworkMode {
    /// The value runsc expects after `--network=`.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::Sandbox => "sandbox",
            NetworkMode::Host => "host",
        }
    }
}

impl std::str::FromStr for NetworkMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(NetworkMode::None),
            "sandbox" => Ok(NetworkMode::Sandbox),
            "host" => Ok(NetworkMode::Host),
            other => Err(format!(
                "unknown network mode {other:?} (use none, sandbox or host)"
            )),
        }
    }
}

/// What the environment rule does with a secret-looking variable name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretEnvAction {
    /// Record it in the audit log (by name) and leave it.
    #[default]
    Report,
    /// Remove it from the process environment.
    Strip,
}

/// What the mounts rule does with a bind whose source holds a Kubernetes service-account token
/// (a kubelet projected `serviceAccountToken` or token Secret volume, at any destination).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenVolumeAction {
    /// Drop the mount; the container starts without it.
    #[default]
    Remove,
    /// Refuse the container, naming the mount.
    Reject,
}

/// The whole policy. Every section has a default equal to the embedded default policy, so a file
/// only needs the keys it changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub version: u32,
    pub mode: Mode,
    pub root: RootPolicy,
    pub capabilities: CapabilitiesPolicy,
    pub privileges: PrivilegesPolicy,
    pub user: UserPolicy,
    pub scratch: ScratchPolicy,
    pub mounts: MountsPolicy,
    pub resources: ResourcesPolicy,
    pub rlimits: RlimitsPolicy,
    pub namespaces: NamespacesPolicy,
    pub devices: DevicesPolicy,
    pub seccomp: SeccompPolicy,
    pub annotations: AnnotationsPolicy,
    pub sysctls: SysctlsPolicy,
    pub network: NetworkPolicy,
    pub lifetime: LifetimePolicy,
    pub environment: EnvironmentPolicy,
    pub selinux: SelinuxPolicy,
    pub hooks: HooksPolicy,
    pub runsc: RunscPolicy,
    pub audit: AuditPolicy,
    pub output: OutputPolicy,
    /// Warm sandboxes for CRI pods (`[pool]`); off by default, and no annotation reaches it.
    pub pool: PoolPolicy,
    pub log: LogPolicy,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            version: 1,
            mode: Mode::Enforce,
            root: RootPolicy::default(),
            capabilities: CapabilitiesPolicy::default(),
            privileges: PrivilegesPolicy::default(),
            user: UserPolicy::default(),
            scratch: ScratchPolicy::default(),
            mounts: MountsPolicy::default(),
            resources: ResourcesPolicy::default(),
            rlimits: RlimitsPolicy::default(),
            namespaces: NamespacesPolicy::default(),
            devices: DevicesPolicy::default(),
            seccomp: SeccompPolicy::default(),
            annotations: AnnotationsPolicy::default(),
            sysctls: SysctlsPolicy::default(),
            network: NetworkPolicy::default(),
            lifetime: LifetimePolicy::default(),
            environment: EnvironmentPolicy::default(),
            selinux: SelinuxPolicy::default(),
            hooks: HooksPolicy::default(),
            runsc: RunscPolicy::default(),
            audit: AuditPolicy::default(),
            output: OutputPolicy::default(),
            pool: PoolPolicy::default(),
            log: LogPolicy::default(),
        }
    }
}

impl Policy {
    /// Parses and validates a policy file. Unknown keys, wrong types, bad units and
    /// contradictions are errors naming the key and, where it is in the text, its line.
    pub fn from_toml_str(src: &str) -> Result<Policy, PolicyError> {
        let de = toml::Deserializer::parse(src).map_err(|e| parse_error(src, &e, None))?;
        let mut policy: Policy = serde_path_to_error::deserialize(de).map_err(|e| {
            let path = e.path().to_string();
            let key = (!path.is_empty() && path != ".").then_some(path);
            parse_error(src, e.inner(), key)
        })?;
        policy.mounts.follow_kubelet_root();
        policy.validate_in(Some(src))?;
        Ok(policy)
    }

    /// The policy as TOML that `from_toml_str` loads back to an equal policy (no comments).
    pub fn to_toml_string(&self) -> String {
        // Serialising plain structs, strings, integers and string maps cannot fail.
        toml::to_string(self).expect("a policy always serialises to TOML")
    }

    /// Checks the semantic rules `from_toml_str` enforces, for a policy built in code.
    pub fn validate(&self) -> Result<(), PolicyError> {
        self.validate_in(None)
    }

    fn validate_in(&self, src: Option<&str>) -> Result<(), PolicyError> {
        validate::validate(self).map_err(|issue| issue.into_error(src))
    }
}

fn parse_error(src: &str, e: &toml::de::Error, key: Option<String>) -> PolicyError {
    let (line, column) = match e.span() {
        Some(span) => {
            let (l, c) = locate::line_col(src, span.start);
            (Some(l), Some(c))
        }
        None => (None, None),
    };
    PolicyError::Parse {
        line,
        column,
        key,
        message: e.message().to_string(),
    }
}

#[cfg(test)]
mod tests;
