//! What hardening takes and gives: the caller's knowledge of the host ([`Context`] and the
//! trees, engine and git state it carries) and the results the shim consumes ([`Hardened`],
//! [`HardenedProcess`], [`ClampedResources`]). A leaf: the rules read and fill these without
//! depending on the entry points that run them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::decision::Decision;
use crate::egress::EgressPlan;
use crate::policy::{Mode, NetworkMode};

/// What the caller knows about the host that the pure core cannot look up itself.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub container_id: String,
    pub namespace: String,
    /// Host namespace paths of the pod sandbox that a container of the same pod may join
    /// (e.g. "/proc/4242/ns/ipc", "/var/run/netns/cni-..."), supplied by the shim.
    pub pod_namespace_paths: Vec<String>,
    /// Bind-mount sources as the caller resolved them on the host (symlinks followed):
    /// source as written in the spec -> canonical path. The mounts rule checks both.
    pub resolved_sources: BTreeMap<String, String>,
    /// Bind sources (as written in the spec) that the caller found to hold a Kubernetes
    /// service-account token: kubelet projected `serviceAccountToken` or token Secret volumes,
    /// whatever their destination. The mounts rule removes or rejects them
    /// (`mounts.token_volumes`).
    pub token_sources: BTreeSet<String>,
    /// The container engine behind the spec, when a runtime front end (runsc-hardened) knows
    /// it, with the engine's own per-container files it checked on the host.
    pub engine: Option<EngineContext>,
    /// What the caller found on the host below the bind sources for `[mounts] protect` and
    /// `mask`. Empty when the policy has neither.
    pub host_tree: HostTree,
    /// The git directories and gitlinks the caller found below the bind sources, for
    /// `[mounts.workspace] git`. Empty when it is off.
    pub git_tree: GitTree,
    /// The platform runsc will run the sandbox on (`systrap`, `ptrace`, `kvm`), as the caller
    /// resolved it; `None`: unknown, sized as ptrace (the larger host-task count per process).
    pub runsc_platform: Option<String>,
}

/// Git directories and `.git` files below bind sources (`[mounts.workspace] git`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitTree {
    /// Bind source as written in the spec -> what was found below it.
    pub found: BTreeMap<String, Vec<GitEntry>>,
    /// Bind source as written -> the owner's hooks in its repositories that run project files.
    pub hooks: BTreeMap<String, Vec<HookNote>>,
}

/// One of the owner's hooks and the project files it runs or reads, as the caller read it:
/// named in the create record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookNote {
    /// The hook file, relative to the bind source (absolute when outside it).
    pub hook: String,
    /// The tool that wrote it (`husky 9`, `pre-commit`, `lefthook`...) or `script`.
    pub tool: String,
    /// Relative to the bind source: protected (read-only inside, quarantined at exit when new
    /// or replaced).
    pub protected: Vec<String>,
    /// Relative to the bind source: left writable (dependencies, manifests), changes reported
    /// at exit.
    pub reported: Vec<String>,
    /// Relative to the bind source: left writable, quarantined at exit when new or replaced
    /// (links on the way, what the hook's `PATH` finds in the project).
    pub watched: Vec<String>,
    /// Why the hook could not be read through, when it could not.
    pub unread: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitEntry {
    /// Relative to the bind source, `/`-separated, without `.` or `..`; empty for the bind's
    /// root itself.
    pub path: String,
    pub kind: GitEntryKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitEntryKind {
    /// A git directory. Inside the sandbox `staging` (an absolute host path the caller will
    /// fill with a copy of its control files) takes its place, and each of `live` (names from
    /// [`crate::workspace::LIVE_DIRS`] that exist in it) is bound from the host on top.
    Dir { staging: String, live: Vec<String> },
    /// A `.git` file (a gitlink to a git directory elsewhere): bound read-only onto itself.
    Link,
}

/// A git directory the hardened spec stages: the caller must fill `staging` before the
/// sandbox starts, and carry back from it at exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedGitDir {
    /// The bind source as written in the spec.
    pub bind_source: String,
    /// Relative to the bind source (empty: the bind's root).
    pub path: String,
    pub staging: String,
    /// Where the sandbox sees it.
    pub destination: String,
    pub live: Vec<String>,
}

/// The engines whose specs runsc-hardened adapts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    Docker,
    Podman,
}

/// What the front end established about the engine's own files for this container. An engine
/// keeps them in its state directory (`/var/lib/docker`, which the default policy denies), so
/// without this the host-path rules would refuse every container the engine makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineContext {
    pub engine: Engine,
    /// `root.path` as written, when the caller checked it is this container's root filesystem
    /// in the engine's storage (a mounted overlay of its image layers).
    pub rootfs: Option<String>,
    /// Bind sources as written that the caller checked are the engine's own files for this
    /// container (Docker's `hosts`, `hostname`, `resolv.conf`). They are bound read-only.
    pub files: BTreeSet<String>,
}

/// The host entries below bind sources that `[mounts] protect` or `mask` patterns name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostTree {
    /// Bind source as written in the spec -> the entries found below it.
    pub found: BTreeMap<String, Vec<TreeEntry>>,
    /// An empty regular file the caller made, bound read-only over masked files.
    pub empty_file: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    /// Relative to the bind source, `/`-separated, without `.` or `..`.
    pub path: String,
    pub kind: EntryKind,
    pub list: TreeList,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    /// Sockets, fifos, devices.
    Other,
}

/// Which list named the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeList {
    Protect,
    Mask,
}

/// The result of `harden`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hardened {
    /// The hardened spec; in audit mode the input unchanged.
    pub spec: Value,
    pub runsc: RunscFlags,
    pub lifetime: Lifetime,
    /// In rule order, then in the order each rule met the fields.
    pub decisions: Vec<Decision>,
    pub mode: Mode,
    /// What the shim must run for egress: `Some` when the allowlist is on for this sandbox
    /// (enforce mode only: audit mode runs the spec as written, without the forwarder).
    pub egress: Option<EgressPlan>,
    /// The git directories whose staging copies the hardened spec binds (enforce mode only).
    pub staged_git: Vec<StagedGitDir>,
}

/// The runsc flags the shim must pass, typed; the shim builds argv from them. Deserialize: a
/// front end that runs one runsc command per process keeps them beside the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunscFlags {
    /// `--network`, after annotation tightening.
    pub network: NetworkMode,
    /// `--oci-seccomp`: true whenever the final spec carries `linux.seccomp`, since runsc
    /// ignores spec seccomp without it.
    pub oci_seccomp: bool,
    /// `--net-raw`: always false.
    pub net_raw: bool,
    /// `--host-uds`: always "none".
    pub host_uds: String,
    /// Root overlay, e.g. `Some("root:memory")` when the root is writable; `None` adds no flag.
    pub overlay: Option<String>,
    /// `--platform`; `None` keeps runsc's default.
    pub platform: Option<String>,
    /// Allowlisted extra flags from the policy, name (without `--`) to value.
    pub extra: BTreeMap<String, String>,
}

/// How long the container may run, for the shim to enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lifetime {
    pub max_runtime: Duration,
    pub grace_period: Duration,
    /// Stop the sandbox after it has been idle (CPU under the shim's threshold, no output) this
    /// long; `None`: never for idleness.
    pub idle_timeout: Option<Duration>,
}

/// The result of `harden_process`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HardenedProcess {
    pub process: Value,
    pub decisions: Vec<Decision>,
    /// The policy's egress plan when on (the exec got its proxy variables); enforce mode only.
    pub egress: Option<EgressPlan>,
}

/// What a running sandbox was created with, which an update is measured against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtCreate {
    /// The platform the create sized the pids limit for (`Context::runsc_platform`).
    pub runsc_platform: Option<String>,
    /// The hardened spec's `linux.resources.memory.limit`: what gVisor sized the guest's
    /// memory by when the sandbox booted. `None`: unknown (no check).
    pub memory_limit: Option<i64>,
}

/// The result of `clamp_resources`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClampedResources {
    pub resources: Value,
    pub decisions: Vec<Decision>,
}
