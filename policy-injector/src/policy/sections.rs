//! The sections of a policy file. Each `Default` is the embedded default policy's value; a test
//! checks the two never drift apart.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::evidence::ArtifactsPolicy;
use super::{NetworkMode, SecretEnvAction, TokenVolumeAction};
use crate::quantity::{ByteSize, HumanDuration, MilliCpu};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RootPolicy {
    pub readonly: bool,
    /// Host directories (path globs) a spec may name as an absolute `root.path`.
    pub allowed_host_paths: Vec<String>,
}

impl Default for RootPolicy {
    fn default() -> Self {
        RootPolicy {
            readonly: true,
            allowed_host_paths: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapabilitiesPolicy {
    /// `CAP_*` names a spec may keep.
    pub allow: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PrivilegesPolicy {
    pub no_new_privileges: bool,
}

impl Default for PrivilegesPolicy {
    fn default() -> Self {
        PrivilegesPolicy {
            no_new_privileges: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UserPolicy {
    pub uid: u32,
    pub gid: u32,
}

impl Default for UserPolicy {
    fn default() -> Self {
        UserPolicy {
            uid: 65534,
            gid: 65534,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScratchTmpfs {
    pub path: String,
    pub size: ByteSize,
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScratchPolicy {
    pub tmpfs: Vec<ScratchTmpfs>,
    /// The most any other writable tmpfs in the spec may hold (`docker run --tmpfs /x:size=100g`,
    /// a size-less tmpfs, a size in percent of RAM): larger ones are clamped to it.
    pub max_tmpfs: ByteSize,
}

impl Default for ScratchPolicy {
    fn default() -> Self {
        let entry = |path: &str, size: u64, options: &[&str]| ScratchTmpfs {
            path: path.to_string(),
            size: ByteSize(size),
            options: strings(options),
        };
        ScratchPolicy {
            tmpfs: vec![
                entry("/tmp", 1 << 30, &["nosuid", "nodev", "mode=1777"]),
                entry(
                    "/var/tmp",
                    100 << 20,
                    &["nosuid", "nodev", "noexec", "mode=1777"],
                ),
                entry(
                    "/run",
                    64 << 20,
                    &["nosuid", "nodev", "noexec", "mode=1777"],
                ),
                entry(
                    "/dev/shm",
                    64 << 20,
                    &["nosuid", "nodev", "noexec", "mode=1777"],
                ),
            ],
            // The /tmp scratch's size: no other tmpfs gets more room than the main scratch.
            max_tmpfs: ByteSize(1 << 30),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MountsPolicy {
    pub writable_sources: Vec<String>,
    pub denied_sources: Vec<String>,
    pub allowed_types: Vec<String>,
    pub remove_service_account_token: bool,
    pub credential_destinations: Vec<String>,
    /// A bind whose source the caller found to hold a service-account token, wherever it is
    /// mounted. Only while `remove_service_account_token` is on.
    pub token_volumes: TokenVolumeAction,
    /// The kubelet's root directory: the caller looks for token volumes below it.
    pub kubelet_root: String,
    /// Paths inside writable binds (relative globs: `.git/hooks`, `**/.envrc`) that stay
    /// read-only: each existing match gets a read-only bind of itself on top.
    pub protect: Vec<String>,
    /// Files inside binds (relative globs: `**/.env`) replaced by an empty read-only file.
    pub mask: Vec<String>,
    /// Git directories in writable binds, and what the exit check does with what the sandbox
    /// left (`[mounts.workspace]`).
    pub workspace: super::WorkspacePolicy,
}

impl MountsPolicy {
    /// Where the default lists expect the kubelet's files.
    pub const DEFAULT_KUBELET_ROOT: &'static str = "/var/lib/kubelet";

    /// The default lists name the kubelet's files under `/var/lib/kubelet`. On a node whose
    /// kubelet keeps them elsewhere (`kubelet_root`), each such entry is added for that root
    /// too: its emptyDirs writable, its pki, plugins and pods directory denied, where otherwise
    /// emptyDirs would be read-only and the real pki not denied. Entries are only added (a
    /// `/var/lib/kubelet` entry stays), never twice, so loading a policy again changes nothing.
    pub(crate) fn follow_kubelet_root(&mut self) {
        let root = self.kubelet_root.trim_end_matches('/');
        if root == Self::DEFAULT_KUBELET_ROOT || !root.starts_with('/') {
            return;
        }
        for list in [&mut self.writable_sources, &mut self.denied_sources] {
            let moved: Vec<String> = list
                .iter()
                .filter_map(|entry| {
                    let rest = entry.strip_prefix(Self::DEFAULT_KUBELET_ROOT)?;
                    (rest.is_empty() || rest.starts_with('/')).then(|| format!("{root}{rest}"))
                })
                .collect();
            for entry in moved {
                if !list.contains(&entry) {
                    list.push(entry);
                }
            }
        }
    }
}

impl Default for MountsPolicy {
    fn default() -> Self {
        MountsPolicy {
            writable_sources: strings(&[
                "/var/lib/kubelet/pods/*/volumes/kubernetes.io~empty-dir/**",
            ]),
            denied_sources: strings(&[
                "/",
                "/proc/**",
                "/sys/**",
                "/dev/**",
                "/etc/**",
                "/root/**",
                "/home/**",
                "/boot/**",
                "/var/lib/kubelet",
                "/var/lib/kubelet/pods",
                "/var/lib/kubelet/pki/**",
                "/var/lib/kubelet/plugins/**",
                "/var/lib/kubelet/device-plugins/**",
                "/var/lib/containerd",
                "/var/lib/containerd/io.containerd.content.v1.content/**",
                "/var/lib/containerd/io.containerd.metadata.v1.bolt/**",
                "/var/lib/containerd/io.containerd.snapshotter.v1.*/**",
                "/run/containerd/**",
                "/var/run/containerd/**",
                "/run/crio/**",
                "/var/run/crio/**",
                "/var/lib/docker/**",
                "/var/lib/etcd/**",
                "/run/docker/**",
                "/var/run/docker/**",
                "/run/dbus/**",
                "/var/run/dbus/**",
                "/run/systemd/**",
                "/run/gvisor-hardened/**",
                "/var/run/gvisor-hardened/**",
                "/var/log/gvisor-hardened/**",
                "**/docker.sock",
                "**/containerd.sock",
                "**/crio.sock",
                "**/cri-dockerd.sock",
                "**/dockershim.sock",
                "**/podman.sock",
            ]),
            allowed_types: strings(&[
                "bind", "tmpfs", "proc", "sysfs", "devpts", "mqueue", "cgroup", "cgroup2",
            ]),
            remove_service_account_token: true,
            credential_destinations: strings(&[
                "/var/run/secrets/kubernetes.io/serviceaccount",
                "/run/secrets/kubernetes.io/serviceaccount",
                "/var/run/secrets/eks.amazonaws.com/serviceaccount",
            ]),
            token_volumes: TokenVolumeAction::Remove,
            kubelet_root: Self::DEFAULT_KUBELET_ROOT.to_string(),
            protect: Vec::new(),
            mask: Vec::new(),
            workspace: super::WorkspacePolicy::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourcesPolicy {
    pub memory: ByteSize,
    pub cpu: MilliCpu,
    /// Guest processes; the host pids limit is `pids_base + pids_per_process * processes`.
    pub processes: u64,
    pub pids_base: u64,
    /// Host tasks per guest process under ptrace (and kvm).
    pub pids_per_process: u64,
    /// Host tasks per guest process under systrap, which needs far fewer.
    pub pids_per_process_systrap: u64,
}

impl Default for ResourcesPolicy {
    fn default() -> Self {
        ResourcesPolicy {
            memory: ByteSize(2 << 30),
            cpu: MilliCpu(2000),
            processes: 512,
            pids_base: 32,
            pids_per_process: 12,
            pids_per_process_systrap: 3,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlimitsPolicy {
    pub nofile: u64,
    pub fsize: ByteSize,
    pub core: ByteSize,
    pub remove_nproc: bool,
}

impl Default for RlimitsPolicy {
    fn default() -> Self {
        RlimitsPolicy {
            nofile: 1024,
            fsize: ByteSize(1 << 30),
            core: ByteSize(0),
            remove_nproc: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NamespacesPolicy {
    /// OCI namespace types ("network", "pid", "ipc", ...) that must not be the host's.
    pub reject_host: Vec<String>,
    /// Globs of namespace paths a container may join besides the pod's own.
    pub allowed_paths: Vec<String>,
}

impl Default for NamespacesPolicy {
    fn default() -> Self {
        NamespacesPolicy {
            reject_host: strings(&["network", "pid", "ipc"]),
            allowed_paths: strings(&["/var/run/netns/*", "/run/netns/*"]),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DevicesPolicy {
    pub reject_extra: bool,
}

impl Default for DevicesPolicy {
    fn default() -> Self {
        DevicesPolicy { reject_extra: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SeccompPolicy {
    pub inject_default: bool,
    pub override_spec: bool,
    /// Syscalls the default profile answers with EPERM.
    pub deny: Vec<String>,
}

impl Default for SeccompPolicy {
    fn default() -> Self {
        SeccompPolicy {
            inject_default: true,
            override_spec: false,
            deny: strings(&[
                "acct",
                "add_key",
                "bpf",
                "delete_module",
                "finit_module",
                "fsconfig",
                "fsmount",
                "fsopen",
                "fspick",
                "init_module",
                "ioperm",
                "iopl",
                "kexec_file_load",
                "kexec_load",
                "keyctl",
                "lookup_dcookie",
                "mount",
                "mount_setattr",
                "move_mount",
                "name_to_handle_at",
                "open_by_handle_at",
                "open_tree",
                "perf_event_open",
                "pivot_root",
                "process_vm_readv",
                "process_vm_writev",
                "ptrace",
                "quotactl",
                "reboot",
                "request_key",
                "setns",
                "swapoff",
                "swapon",
                "umount2",
                "userfaultfd",
            ]),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AnnotationsPolicy {
    pub strip_prefixes: Vec<String>,
}

impl Default for AnnotationsPolicy {
    fn default() -> Self {
        AnnotationsPolicy {
            strip_prefixes: strings(&["dev.gvisor."]),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SysctlsPolicy {
    pub allow: Vec<String>,
}

impl Default for SysctlsPolicy {
    fn default() -> Self {
        SysctlsPolicy {
            allow: strings(&[
                "kernel.shm_rmid_forced",
                "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range",
                "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_keepalive_time",
                "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes",
            ]),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkPolicy {
    pub mode: NetworkMode,
    /// The egress allowlist (`[network.egress]`); on when `mode` is none and `allow` is set.
    pub egress: super::EgressPolicy,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifetimePolicy {
    pub max_runtime: HumanDuration,
    pub grace_period: HumanDuration,
    /// `None` (the key left out): no idle timeout.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<HumanDuration>,
}

impl Default for LifetimePolicy {
    fn default() -> Self {
        LifetimePolicy {
            max_runtime: HumanDuration(Duration::from_secs(3600)),
            grace_period: HumanDuration(Duration::from_secs(10)),
            idle_timeout: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvironmentPolicy {
    pub secret_patterns: Vec<String>,
    pub action: SecretEnvAction,
    /// Variables every process (init and exec) gets when it does not set them itself; `HOME=/`
    /// counts as not set.
    pub defaults: BTreeMap<String, String>,
}

impl Default for EnvironmentPolicy {
    fn default() -> Self {
        EnvironmentPolicy {
            secret_patterns: strings(&[
                "*_TOKEN",
                "*_SECRET*",
                "*_PASSWORD",
                "*_PASSWD",
                "*_API_KEY",
                "*_APIKEY",
                "*_PRIVATE_KEY",
                "*_ACCESS_KEY",
                "*_CREDENTIALS",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
                "DATABASE_URL",
            ]),
            action: SecretEnvAction::Report,
            defaults: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SelinuxPolicy {
    pub strip_label: bool,
}

impl Default for SelinuxPolicy {
    fn default() -> Self {
        SelinuxPolicy { strip_label: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HooksPolicy {
    pub reject: bool,
}

impl Default for HooksPolicy {
    fn default() -> Self {
        HooksPolicy { reject: true }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunscPolicy {
    pub path: String,
    pub root: String,
    pub platform: String,
    pub overlay: String,
    #[serde(deserialize_with = "flag_values")]
    pub extra_flags: BTreeMap<String, String>,
    pub debug: bool,
    pub debug_log_dir: String,
}

impl Default for RunscPolicy {
    fn default() -> Self {
        RunscPolicy {
            path: "runsc".to_string(),
            root: "/run/gvisor-hardened/runsc".to_string(),
            platform: String::new(),
            overlay: "auto".to_string(),
            extra_flags: BTreeMap::new(),
            debug: false,
            debug_log_dir: "/var/log/gvisor-hardened/runsc/".to_string(),
        }
    }
}

/// runsc flag values may be written as TOML strings, booleans or integers; runsc sees text.
fn flag_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum FlagValue {
        Text(String),
        Bool(bool),
        Int(i64),
    }
    let raw = BTreeMap::<String, FlagValue>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                FlagValue::Text(s) => s,
                FlagValue::Bool(b) => b.to_string(),
                FlagValue::Int(i) => i.to_string(),
            };
            (k, v)
        })
        .collect())
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuditPolicy {
    pub path: String,
    /// The live log is rotated before an append would take it past this size.
    pub max_size: ByteSize,
    /// Rotated files kept (`path.1` newest ... `path.<keep>` oldest); older ones are removed.
    pub keep: u32,
    /// An ed25519 private key (PKCS#8 PEM, mode 0600). When set, each sandbox's final record
    /// is signed over the hashes of all its records; "" signs nothing.
    pub signing_key: String,
    pub artifacts: ArtifactsPolicy,
}

impl Default for AuditPolicy {
    fn default() -> Self {
        AuditPolicy {
            path: "/var/log/gvisor-hardened/audit.jsonl".to_string(),
            max_size: ByteSize(100 << 20),
            keep: 10,
            signing_key: String::new(),
            artifacts: ArtifactsPolicy::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogPolicy {
    pub level: String,
}

impl Default for LogPolicy {
    fn default() -> Self {
        LogPolicy {
            level: "info".to_string(),
        }
    }
}
