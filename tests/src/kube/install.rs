//! Installing the shim on the node the way the installer would, but from the test: the shim
//! copied into the node's directory, the shipped policies (audit log and runsc root pointed into
//! that directory), the handlers registered in the node's containerd config by the installer's own
//! config code, containerd restarted through the node's restart script, the node labelled.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gvisor_hardened_installer::config::{self as installer_config, register};
use gvisor_hardened_installer::handlers::{
    Handler, AGENT_HANDLER, NODE_LABEL, NODE_LABEL_VALUE, TOOL_HANDLER,
};

use super::{KubeNode, NODE_NAME};
use crate::cri::{test_policy, CriLayout, SHIPPED_DEFAULT_POLICY, SHIPPED_TOOL_POLICY};
use crate::error::{HarnessError, Result};
use crate::poll::poll_until;

/// The `gvisor-hardened-agent` policy as shipped.
pub const SHIPPED_AGENT_POLICY: &str =
    include_str!("../../../deploy/kustomize/runtimeclasses/policies/gvisor-hardened-agent.toml");

/// Where the directly installed shim keeps its files on the node.
#[derive(Debug, Clone)]
pub struct NodePolicies {
    pub layout: CriLayout,
    pub handlers: Vec<Handler>,
    /// The containerd config as it was before the install, byte for byte.
    pub original_config: Vec<u8>,
}

impl NodePolicies {
    pub fn audit_log(&self) -> String {
        fs::read_to_string(self.layout.audit_log()).unwrap_or_default()
    }
    pub fn policy_path(&self, handler: &str) -> Option<PathBuf> {
        self.handlers
            .iter()
            .find(|h| h.name == handler)
            .map(|h| h.config_path.clone())
    }
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| HarnessError::io("creating", parent, e))?;
    }
    fs::write(path, data).map_err(|e| HarnessError::io("writing", path, e))
}

/// Installs `shim` for the three classes and waits until CRI reports the handlers.
pub fn install_shim_directly(node: &KubeNode, shim: &Path) -> Result<NodePolicies> {
    let layout = CriLayout {
        dir: node.dir().join("gvh"),
    };
    for d in [layout.runsc_root_base(), layout.dir.join("bin")] {
        fs::create_dir_all(&d).map_err(|e| HarnessError::io("creating", &d, e))?;
    }
    let dest = layout.shim_path();
    let tmp = dest.with_extension("tmp");
    fs::copy(shim, &tmp).map_err(|e| HarnessError::io("copying the shim to", &tmp, e))?;
    fs::rename(&tmp, &dest).map_err(|e| HarnessError::io("renaming", &tmp, e))?;

    let classes = vec![TOOL_HANDLER.to_string(), AGENT_HANDLER.to_string()];
    let handlers = Handler::standard_set(&layout.policy_dir(), &dest, &classes);
    for (handler, shipped) in handlers.iter().zip([
        SHIPPED_DEFAULT_POLICY,
        SHIPPED_TOOL_POLICY,
        SHIPPED_AGENT_POLICY,
    ]) {
        let text = node_policy(node, shipped, &layout)?;
        write(&handler.config_path, text.as_bytes())?;
    }

    let original_config = fs::read(&node.containerd_config)
        .map_err(|e| HarnessError::io("reading", &node.containerd_config, e))?;
    let mut doc = installer_config::parse(&String::from_utf8_lossy(&original_config))
        .map_err(|e| HarnessError::Config(e.to_string()))?;
    let version =
        installer_config::detect_version(&doc).map_err(|e| HarnessError::Config(e.to_string()))?;
    register::register(&mut doc, version, &handlers)
        .map_err(|e| HarnessError::Config(e.to_string()))?;
    write(&node.containerd_config, doc.to_string().as_bytes())?;
    node.restart_containerd()?;
    wait_for_handlers(node, &handlers, true)?;
    node.kubectl()
        .args(["label", "node", NODE_NAME, "--overwrite"])
        .arg(format!("{NODE_LABEL}={NODE_LABEL_VALUE}"))
        .checked()?;
    Ok(NodePolicies {
        layout,
        handlers,
        original_config,
    })
}

/// A shipped policy as the harness installs it: the audit log and runsc root in the node's
/// directory, the node kubelet's root.
fn node_policy(node: &KubeNode, shipped: &str, layout: &CriLayout) -> Result<String> {
    let text = test_policy(shipped, layout).map_err(HarnessError::Config)?;
    with_kubelet_root(&text, &node.dir().join("kubelet"))
}

/// A handler's policy file replaced for a while (the shim reads it at every Create); the
/// installed one is put back on drop, also when the case panics.
#[derive(Debug)]
pub struct PolicyOverride {
    path: PathBuf,
    original: Vec<u8>,
}

impl PolicyOverride {
    /// `handler`'s file becomes `shipped` as installed with `edit` applied to it.
    pub fn write(
        node: &KubeNode,
        installed: &NodePolicies,
        handler: &str,
        shipped: &str,
        edit: impl FnOnce(&str) -> Result<String>,
    ) -> Result<PolicyOverride> {
        let path = installed
            .policy_path(handler)
            .ok_or_else(|| HarnessError::Config(format!("no handler {handler} installed")))?;
        let original = fs::read(&path).map_err(|e| HarnessError::io("reading", &path, e))?;
        let text = edit(&node_policy(node, shipped, &installed.layout)?)?;
        write(&path, text.as_bytes())?;
        Ok(PolicyOverride { path, original })
    }
}

impl Drop for PolicyOverride {
    fn drop(&mut self) {
        if let Err(e) = write(&self.path, &self.original) {
            eprintln!("restoring {}: {e}", self.path.display());
        }
    }
}

/// The node's kubelet keeps its pods under its own root (not /var/lib/kubelet): the policy's
/// token-volume rule finds projected service-account tokens by that root, and the default
/// `writable_sources` (emptyDir volumes under /var/lib/kubelet) becomes the same glob under it;
/// otherwise every emptyDir on this node would be mounted read-only.
pub(crate) fn with_kubelet_root(policy: &str, root: &Path) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = policy
        .parse()
        .map_err(|e| HarnessError::Config(format!("policy is not TOML: {e}")))?;
    let mounts = doc.entry("mounts").or_insert_with(toml_edit::table);
    mounts["kubelet_root"] = toml_edit::value(root.display().to_string());
    let empty_dirs = format!(
        "{}/pods/*/volumes/kubernetes.io~empty-dir/**",
        root.display()
    );
    mounts["writable_sources"] = toml_edit::value(toml_edit::Array::from_iter([empty_dirs]));
    Ok(doc.to_string())
}

/// Restores the containerd config, restarts containerd, removes the label.
pub fn uninstall_directly(node: &KubeNode, installed: &NodePolicies) -> Result<()> {
    write(&node.containerd_config, &installed.original_config)?;
    node.restart_containerd()?;
    wait_for_handlers(node, &installed.handlers, false)?;
    node.kubectl()
        .args(["label", "node", NODE_NAME])
        .arg(format!("{NODE_LABEL}-"))
        .checked()?;
    Ok(())
}

/// Polls the CRI's runtime handlers (crictl info) until ours are there (or gone).
fn wait_for_handlers(node: &KubeNode, handlers: &[Handler], present: bool) -> Result<()> {
    let crictl = crate::stack::Stack::Current.binary("crictl")?;
    let endpoint = format!("unix://{}", node.containerd_address.display());
    poll_until(
        "the node's CRI to report our handlers",
        Duration::from_secs(60),
        || {
            let out = std::process::Command::new(&crictl)
                .args(["--runtime-endpoint", &endpoint, "info"])
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            let info = String::from_utf8_lossy(&out.stdout);
            let all = handlers
                .iter()
                .all(|h| info.contains(&format!("\"{}\"", h.name)) == present);
            all.then_some(())
        },
    )
}
