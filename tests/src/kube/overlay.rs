//! A kustomize overlay of `deploy/kustomize/default` for this node: the installer DaemonSet as
//! shipped (same image reference, RBAC, RuntimeClasses), with its host paths pointed into the
//! node's directory through the installer's `GVH_*` variables, and the policies ConfigMap
//! replaced by the shipped policies with their audit log and runsc root in that directory, and
//! the metrics DaemonSet's hostPath pointed at that directory (where the log is). The
//! defaults would edit this machine's own /etc/containerd/config.toml and restart it with
//! systemctl; this node's containerd lives elsewhere and restarts through its own script.

use std::fs;
use std::path::{Component, Path, PathBuf};

use super::install::{with_kubelet_root, SHIPPED_AGENT_POLICY};
use super::KubeNode;
use crate::cri::{test_policy, CriLayout, SHIPPED_DEFAULT_POLICY, SHIPPED_TOOL_POLICY};
use crate::error::{HarnessError, Result};
use crate::stack::Stack;

/// Where the DaemonSet installs on this node, all under `<node dir>/installed`.
#[derive(Debug, Clone)]
pub struct InstallerOverlay {
    /// The overlay's directory (`kubectl apply -k` it).
    pub dir: PathBuf,
    pub layout: CriLayout,
    /// The exporter's bearer token (the `gvisor-hardened-metrics-token` Secret the operator
    /// creates; the overlay generates it).
    pub metrics_token: String,
}

impl InstallerOverlay {
    pub fn shim_dest(&self) -> PathBuf {
        self.layout
            .dir
            .join("bin/containerd-shim-gvisor-hardened-v1")
    }
    pub fn forwarder_dest(&self) -> PathBuf {
        self.layout.dir.join("lib/gvisor-hardened-forwarder")
    }
    pub fn state_dir(&self) -> PathBuf {
        self.layout.dir.join("state")
    }
    pub fn audit_log(&self) -> String {
        fs::read_to_string(self.layout.audit_log()).unwrap_or_default()
    }
    /// The directory the audit log is in: the metrics DaemonSet's hostPath on this node.
    pub fn audit_dir(&self) -> PathBuf {
        self.layout
            .audit_log()
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
    }
    /// The default handler's policy as the installer installs it: the `policy` label of the
    /// exporter's lifecycle metrics for pods of the `gvisor-hardened` class.
    pub fn default_policy(&self) -> PathBuf {
        self.layout.policy_dir().join("policy.toml")
    }

    /// Writes the overlay into `<node dir>/overlay`.
    pub fn write(node: &KubeNode) -> Result<InstallerOverlay> {
        let layout = CriLayout {
            dir: node.dir().join("installed"),
        };
        let dir = node.dir().join("overlay");
        fs::create_dir_all(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
        let overlay = InstallerOverlay {
            dir,
            layout,
            metrics_token: random_hex(16)?,
        };
        let kubelet_root = node.dir().join("kubelet");
        for (file, shipped) in [
            ("policy.toml", SHIPPED_DEFAULT_POLICY),
            ("gvisor-hardened-tool.toml", SHIPPED_TOOL_POLICY),
            ("gvisor-hardened-agent.toml", SHIPPED_AGENT_POLICY),
        ] {
            let text = test_policy(shipped, &overlay.layout).map_err(HarnessError::Config)?;
            let text = with_kubelet_root(&text, &kubelet_root)?;
            let path = overlay.dir.join(file);
            fs::write(&path, text).map_err(|e| HarnessError::io("writing", &path, e))?;
        }
        let repo = fs::canonicalize(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
            .map_err(|e| HarnessError::io("resolving", env!("CARGO_MANIFEST_DIR"), e))?;
        let default = relative_to(&overlay.dir, &repo.join("deploy/kustomize/default"));
        let containerd = Stack::Current.binary("containerd")?;
        let env = [
            ("GVH_CONTAINERD_CONFIG", node.containerd_config.clone()),
            ("GVH_CRI_SOCKET", node.containerd_address.clone()),
            ("GVH_SHIM_DEST", overlay.shim_dest()),
            ("GVH_FORWARDER_DEST", overlay.forwarder_dest()),
            ("GVH_POLICY_DEST_DIR", overlay.layout.policy_dir()),
            ("GVH_STATE_DIR", overlay.state_dir()),
            ("GVH_CONTAINERD_BIN", containerd),
        ];
        let mut patch = String::new();
        let mut add = |name: &str, value: &str| {
            patch.push_str(&format!(
                "      - op: add\n        path: /spec/template/spec/containers/0/env/-\n        value: {{name: {name}, value: {value:?}}}\n"
            ));
        };
        for (name, path) in &env {
            add(name, &path.display().to_string());
        }
        // The installer runs host commands in PID 1's mount namespace by default; root may not
        // open /proc/1/ns/mnt on these machines (EACCES), so the node's kubelet stands in for
        // PID 1: it runs in the host's mount namespace, as any process of the node does.
        // The restart also joins its network, IPC and UTS namespaces (the installer's pod has
        // its own network: a containerd started there would serve exec and attach on the
        // pod's loopback, out of the kubelet's reach).
        let pid = node.kubelet_pid()?;
        add("GVH_HOST_EXEC", &format!("nsenter -t {pid} -m --"));
        add(
            "GVH_RESTART_COMMAND",
            &format!(
                "nsenter -t {pid} -m -n -i -u -- {}",
                node.restart_script().display()
            ),
        );
        // The metrics DaemonSet reads the log's directory (mounted where the shipped policies
        // log, so its --log stays as shipped): here that is the node's directory. The test op
        // makes the patch fail, not silently retarget another volume, if the order changes.
        let metrics_patch = format!(
            "      - op: test\n        path: /spec/template/spec/volumes/{AUDIT_VOLUME_INDEX}/name\n        value: audit-log\n\
             \x20     - op: replace\n        path: /spec/template/spec/volumes/{AUDIT_VOLUME_INDEX}/hostPath/path\n        value: {:?}\n",
            overlay.audit_dir().display().to_string()
        );
        let kustomization = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\n\
             kind: Kustomization\n\
             resources:\n  - {}\n\
             configMapGenerator:\n\
             \x20 - name: gvisor-hardened-policies\n\
             \x20   namespace: gvisor-hardened-system\n\
             \x20   behavior: replace\n\
             \x20   files: [policy.toml, gvisor-hardened-tool.toml, gvisor-hardened-agent.toml]\n\
             secretGenerator:\n\
             \x20 - name: gvisor-hardened-metrics-token\n\
             \x20   namespace: gvisor-hardened-system\n\
             \x20   literals: [token={token}]\n\
             \x20   options: {{disableNameSuffixHash: true}}\n\
             patches:\n\
             \x20 - target: {{kind: DaemonSet, name: gvisor-hardened-installer}}\n\
             \x20   patch: |-\n{patch}\
             \x20 - target: {{kind: DaemonSet, name: {METRICS_DAEMONSET}}}\n\
             \x20   patch: |-\n{metrics_patch}",
            default.display(),
            token = overlay.metrics_token,
        );
        let path = overlay.dir.join("kustomization.yaml");
        fs::write(&path, kustomization).map_err(|e| HarnessError::io("writing", &path, e))?;
        Ok(overlay)
    }
}

/// `n` random bytes as hex.
fn random_hex(n: usize) -> Result<String> {
    use std::io::Read;
    let mut bytes = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| HarnessError::io("reading", "/dev/urandom", e))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The exporter's DaemonSet (deploy/kustomize/base/metrics.yaml).
const METRICS_DAEMONSET: &str = "gvisor-hardened-metrics";

/// The `audit-log` volume's place in deploy/kustomize/base/metrics.yaml's volumes.
const AUDIT_VOLUME_INDEX: usize = 0;

/// `to` relative to the directory `from` (kustomize refuses absolute resource paths); both
/// absolute.
fn relative_to(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c.as_os_str());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_to_the_common_prefix() {
        assert_eq!(
            relative_to(Path::new("/run/k/overlay"), Path::new("/work/r/deploy")),
            Path::new("../../../work/r/deploy")
        );
        assert_eq!(
            relative_to(Path::new("/work/r/o"), Path::new("/work/r/deploy")),
            Path::new("../deploy")
        );
    }
}
