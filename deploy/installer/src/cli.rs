//! Command-line shape only: no logic here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "gvisor-hardened-installer",
    version,
    about = "Installs gvisor-hardened on a Kubernetes node: shim, policies, containerd handlers, node label"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub opts: Opts,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Install (idempotent: a second run changes nothing and does not restart containerd).
    Install,
    /// Reverse every install step; restores the original containerd config byte for byte.
    Uninstall,
    /// Install, wait for SIGTERM or SIGINT, then uninstall (the DaemonSet mode).
    Run,
    /// Print what install would change (config diff, files), changing nothing.
    Plan,
}

// Every host path and the containerd binary also come from `GVH_*` environment variables, so a
// kustomize overlay can point the DaemonSet at a node whose containerd is not laid out as usual
// by patching `env` (the args stay `run`).
#[derive(Debug, Args)]
pub struct Opts {
    /// Where the host's / is mounted. Every host path below is reached under it.
    #[arg(long, env = "GVH_HOST_ROOT", default_value = "/host", global = true)]
    pub host_root: PathBuf,
    /// containerd config file (host path).
    #[arg(
        long,
        env = "GVH_CONTAINERD_CONFIG",
        default_value = "/etc/containerd/config.toml",
        global = true
    )]
    pub containerd_config: PathBuf,
    /// Where the shim binary goes (host path).
    #[arg(
        long,
        env = "GVH_SHIM_DEST",
        default_value = "/usr/local/bin/containerd-shim-gvisor-hardened-v1",
        global = true
    )]
    pub shim_dest: PathBuf,
    /// Where the egress forwarder goes (host path): where policies' `[network.egress]
    /// forwarder` points by default.
    #[arg(
        long,
        env = "GVH_FORWARDER_DEST",
        default_value = "/usr/local/lib/gvisor-hardened/gvisor-hardened-forwarder",
        global = true
    )]
    pub forwarder_dest: PathBuf,
    /// Where the policies go (host path): policy.toml and policies/<class>.toml.
    #[arg(
        long,
        env = "GVH_POLICY_DEST_DIR",
        default_value = "/etc/gvisor-hardened",
        global = true
    )]
    pub policy_dest_dir: PathBuf,
    /// Install state directory (host path).
    #[arg(
        long,
        env = "GVH_STATE_DIR",
        default_value = "/var/lib/gvisor-hardened",
        global = true
    )]
    pub state_dir: PathBuf,
    /// containerd's CRI socket (host path).
    #[arg(
        long,
        env = "GVH_CRI_SOCKET",
        default_value = "/run/containerd/containerd.sock",
        global = true
    )]
    pub cri_socket: PathBuf,
    /// Shim binary to install (installer image path).
    #[arg(
        long,
        env = "GVH_SHIM_SOURCE",
        default_value = "/opt/gvisor-hardened/bin/containerd-shim-gvisor-hardened-v1",
        global = true
    )]
    pub shim_source: PathBuf,
    /// Static egress forwarder to install (installer image path).
    #[arg(
        long,
        env = "GVH_FORWARDER_SOURCE",
        default_value = "/opt/gvisor-hardened/bin/gvisor-hardened-forwarder",
        global = true
    )]
    pub forwarder_source: PathBuf,
    /// Directory with policy.toml and <class>.toml files (the image's, or the mounted ConfigMap).
    #[arg(
        long,
        env = "GVH_POLICY_SOURCE",
        default_value = "/opt/gvisor-hardened/policies",
        global = true
    )]
    pub policy_source: PathBuf,
    /// Also install policies with `mode = "audit"`. Audit mode turns every hardening rule off
    /// (specs run as written, decisions are only logged): without this flag such a policy
    /// stops the install.
    #[arg(long, global = true)]
    pub allow_audit_mode: bool,
    /// Prefix that runs a command in the host's mount namespace (empty: run directly).
    #[arg(
        long,
        env = "GVH_HOST_EXEC",
        default_value = "nsenter -t 1 -m --",
        global = true
    )]
    pub host_exec: String,
    /// containerd binary (as the host-exec prefix finds it).
    #[arg(
        long,
        env = "GVH_CONTAINERD_BIN",
        default_value = "containerd",
        global = true
    )]
    pub containerd_bin: String,
    /// Command that restarts containerd (split on whitespace, no shell).
    #[arg(
        long,
        env = "GVH_RESTART_COMMAND",
        default_value = "nsenter -t 1 -m -- systemctl restart containerd",
        global = true
    )]
    pub restart_command: String,
    /// Seconds CRI may take to show the expected runtimes after a restart.
    #[arg(
        long,
        env = "GVH_CRI_TIMEOUT_SECS",
        default_value_t = 60,
        global = true
    )]
    pub cri_timeout_secs: u64,
    /// This node's name (from the downward API).
    #[arg(long, env = "NODE_NAME", global = true)]
    pub node_name: Option<String>,
    /// Kubernetes API URL; default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
    #[arg(long, env = "GVH_KUBE_API_URL", global = true)]
    pub kube_api_url: Option<String>,
    /// Service account directory (token, ca.crt).
    #[arg(
        long,
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount",
        global = true
    )]
    pub service_account_dir: PathBuf,
    /// Do not touch the node's labels (running outside Kubernetes).
    #[arg(long, global = true)]
    pub no_label: bool,
}
