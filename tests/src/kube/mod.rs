//! A real one-node Kubernetes cluster: `hack/kube-node.sh up|down` (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kubelet and a private containerd 2.x), driven with
//! `kubectl` through the real API server and kubelet.
//!
//! ```no_run
//! use gvisor_hardened_tests::kube::KubeNode;
//!
//! let node = KubeNode::up()?;
//! node.kubectl().args(["get", "nodes"]).checked()?;
//! node.down()?;
//! # Ok::<(), gvisor_hardened_tests::HarnessError>(())
//! ```
//!
//! The node uses the interface `up` prints (`CONTAINERD_CONFIG`, `CONTAINERD_ADDRESS`,
//! `KUBECONFIG`) and nothing else of the script's insides, except the restart script that
//! `up` writes next to the containerd config's directory (`<dir>/restart-containerd.sh`).

pub mod cases;
mod install;
mod overlay;
mod pods;

pub use install::{
    install_shim_directly, uninstall_directly, NodePolicies, PolicyOverride, SHIPPED_AGENT_POLICY,
};
pub use overlay::InstallerOverlay;
pub use pods::{PodSpec, PodWatch};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::image::TestImage;
use crate::process::{BoundedCommand, CommandOutput};
use crate::stack::Stack;

/// The script, from this crate's directory.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/kube-node.sh")
}

/// The node's name (kube-node.sh's `--hostname-override`).
pub const NODE_NAME: &str = "localhost";

/// A running node, as `hack/kube-node.sh up` described it.
#[derive(Debug)]
pub struct KubeNode {
    pub containerd_config: PathBuf,
    pub containerd_address: PathBuf,
    pub kubeconfig: PathBuf,
    kubectl: PathBuf,
    ctr: PathBuf,
}

/// The `NAME=value` lines among the last three of `up`'s output.
fn parse_up(stdout: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    let lines: Vec<&str> = stdout.lines().collect();
    let last = lines.get(lines.len().checked_sub(3)?..)?;
    let get = |i: usize, name: &str| {
        last[i]
            .strip_prefix(name)
            .and_then(|v| v.strip_prefix('='))
            .map(PathBuf::from)
    };
    Some((
        get(0, "CONTAINERD_CONFIG")?,
        get(1, "CONTAINERD_ADDRESS")?,
        get(2, "KUBECONFIG")?,
    ))
}

impl KubeNode {
    /// `hack/kube-node.sh up`: returns once the node is Ready.
    pub fn up() -> Result<KubeNode> {
        let out = crate::process::output_with_deadline(
            Command::new(script()).arg("up"),
            None,
            Duration::from_secs(1800),
        )?
        .checked()?;
        let (containerd_config, containerd_address, kubeconfig) = parse_up(&out.stdout)
            .ok_or_else(|| {
                HarnessError::Config(format!(
                    "kube-node.sh up did not end with the three paths:\n{}",
                    out.stdout
                ))
            })?;
        Ok(KubeNode {
            containerd_config,
            containerd_address,
            kubeconfig,
            kubectl: Stack::Current.binary("kubectl")?,
            ctr: Stack::Current.binary("ctr")?,
        })
    }

    /// `hack/kube-node.sh down`, which fails if it left anything behind.
    pub fn down(self) -> Result<CommandOutput> {
        crate::process::output_with_deadline(
            Command::new(script()).arg("down"),
            None,
            Duration::from_secs(600),
        )?
        .checked()
    }

    /// The node's state directory (the containerd config sits in `<dir>/containerd/`).
    pub fn dir(&self) -> PathBuf {
        self.containerd_config
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }

    /// The command that restarts the node's containerd (what the installer is pointed at).
    pub fn restart_script(&self) -> PathBuf {
        self.dir().join("restart-containerd.sh")
    }

    /// The kubelet's pid (`<dir>/pids/kubelet`, where kube-node.sh keeps each daemon's).
    pub fn kubelet_pid(&self) -> Result<u32> {
        let path = self.dir().join("pids/kubelet");
        let text =
            std::fs::read_to_string(&path).map_err(|e| HarnessError::io("reading", &path, e))?;
        text.trim()
            .parse()
            .map_err(|_| HarnessError::Config(format!("{}: not a pid: {text}", path.display())))
    }

    /// `kubectl --kubeconfig <admin>`, with a 120 s deadline.
    pub fn kubectl(&self) -> BoundedCommand {
        BoundedCommand::new(self.kubectl_command(), Duration::from_secs(120))
    }

    /// The `kubectl` binary and the admin kubeconfig, for commands the caller drives itself
    /// (`exec -it` in a pty, `logs -f`, `attach`).
    pub fn kubectl_command(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        // Its caches in the node's directory (removed by `down`), never in ~/.kube.
        cmd.env("KUBECACHEDIR", self.dir().join("kubectl-cache"));
        cmd
    }

    /// `kubectl apply -f -` of `yaml`.
    pub fn apply(&self, yaml: &str) -> Result<CommandOutput> {
        self.kubectl()
            .args(["apply", "-f", "-"])
            .stdin(yaml.as_bytes().to_vec())
            .checked()
    }

    /// `kubectl create -f -` of `yaml`, whatever its outcome (admission refusals are answers).
    pub fn create(&self, yaml: &str) -> Result<CommandOutput> {
        self.kubectl()
            .args(["create", "-f", "-"])
            .stdin(yaml.as_bytes().to_vec())
            .output()
    }

    /// `ctr --address <node's> --namespace k8s.io`, the CRI plugin's namespace.
    pub fn ctr(&self) -> BoundedCommand {
        let mut cmd = Command::new(&self.ctr);
        cmd.arg("--address")
            .arg(&self.containerd_address)
            .args(["--namespace", "k8s.io"]);
        BoundedCommand::new(cmd, Duration::from_secs(120))
    }

    /// Imports a locally built image into the node (pods use it with `imagePullPolicy: Never`).
    pub fn import(&self, image: &TestImage) -> Result<()> {
        self.ctr()
            .args(["images", "import"])
            .arg(image.path())
            .checked()?;
        let listed = self.ctr().args(["images", "ls", "-q"]).checked()?;
        if listed.stdout.lines().any(|l| l.trim() == image.reference()) {
            Ok(())
        } else {
            Err(HarnessError::Config(format!(
                "{} not in the node's images after import:\n{}",
                image.reference(),
                listed.stdout
            )))
        }
    }

    /// Runs the node's containerd restart script.
    pub fn restart_containerd(&self) -> Result<CommandOutput> {
        crate::process::output_with_deadline(
            &mut Command::new(self.restart_script()),
            None,
            Duration::from_secs(120),
        )?
        .checked()
    }

    /// `kubectl get <what> -o jsonpath=<path>`, trimmed; empty when the object is missing.
    pub fn jsonpath(&self, ns: &str, what: &str, path: &str) -> String {
        self.kubectl()
            .args(["-n", ns, "get", what, "--ignore-not-found", "-o"])
            .arg(format!("jsonpath={path}"))
            .output()
            .map(|o| o.stdout.trim().to_string())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_output_ends_with_the_three_paths() {
        let out = "==> noise\nCONTAINERD_CONFIG=/r/c/config.toml\nCONTAINERD_ADDRESS=/r/c/containerd.sock\nKUBECONFIG=/r/admin.kubeconfig\n";
        let (c, a, k) = parse_up(out).unwrap();
        assert_eq!(c, Path::new("/r/c/config.toml"));
        assert_eq!(a, Path::new("/r/c/containerd.sock"));
        assert_eq!(k, Path::new("/r/admin.kubeconfig"));
        assert!(parse_up("KUBECONFIG=/x\n").is_none());
        assert!(parse_up("a\nb\nKUBECONFIG=/x\n").is_none());
    }
}
