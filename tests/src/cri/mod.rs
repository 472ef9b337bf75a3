//! CRI end to end: a private containerd with the CRI plugin, driven by a real CRI client the
//! way the kubelet drives it.
//!
//! ```no_run
//! use gvisor_hardened_tests::cri::*;
//! use gvisor_hardened_tests::{shim_binary, TEST_IMAGE_REF};
//!
//! let cri = CriContainerd::start(CriOptions::with_shim(shim_binary()?))?;
//! let pod = cri.run_pod("web", HARDENED_HANDLER)?;
//! let id = cri.run_container(&pod, &container_config("app", TEST_IMAGE_REF, &["sleep", "600"]))?;
//! let out = cri.client().exec_sync(&id, &["id", "-u"], 10)?;
//! assert_eq!(out.stdout.trim(), "65534");
//! cri.remove_pod(&pod)?;
//! assert_pod_gone(&cri, &pod, &[id]);
//! assert_clean_cri_shutdown(cri);
//! # Ok::<(), gvisor_hardened_tests::HarnessError>(())
//! ```
//!
//! The CRI plugin always works in the containerd namespace `k8s.io`, so that is the private
//! containerd's namespace here; everything host-global is still unique per instance (bridge,
//! cgroup root, runsc/runc roots inside the directory, container ids chosen by CRI).

mod client;
mod config;
mod leaks;
mod pause;
mod pod;
mod teardown;

pub use client::{CriClient, CriError, ExecOutput, DEFAULT_CALL_TIMEOUT};
pub use config::{
    cni_conflist, cri_tables, test_policy, CriLayout, CriOptions, RUNC_HANDLER,
    SHIPPED_DEFAULT_POLICY, SHIPPED_TOOL_POLICY,
};
pub use leaks::{assert_pod_gone, pod_leaks, runsc_sandbox_processes, shim_processes, PodLeaks};
pub use pause::{pause_image, PAUSE_IMAGE_REF, PAUSE_PATH};
pub use pod::{
    container_config, pod_config, pod_namespaces, ContainerConfigExt, Pod, PodConfigExt,
    POD_NAMESPACE,
};
pub use teardown::{assert_clean_cri_shutdown, CriShutdownReport};

pub use gvisor_hardened_installer::handlers::{
    DEFAULT_HANDLER as HARDENED_HANDLER, TOOL_HANDLER as HARDENED_TOOL_HANDLER,
};

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use k8s_cri::v1::{ContainerConfig, PodSandboxConfig};

use crate::containerd::{ConfigHook, Containerd, ContainerdOptions};
use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::image::TestImage;
use crate::poll::poll_until;

/// The containerd namespace of the CRI plugin (fixed by containerd).
pub const CRI_NAMESPACE: &str = "k8s.io";

/// How long CRI may take to report RuntimeReady and NetworkReady after containerd is up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A private containerd with the CRI plugin, its CRI client, and the pods it started.
pub struct CriContainerd {
    // Field order is drop order: the client goes before containerd stops.
    client: CriClient,
    layout: CriLayout,
    cgroup_root: String,
    handlers: Vec<String>,
    pods: Mutex<Vec<Pod>>,
    containerd: Option<Containerd>,
    torn_down: bool,
}

impl std::fmt::Debug for CriContainerd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CriContainerd")
            .field("dir", &self.layout.dir)
            .field("handlers", &self.handlers)
            .finish()
    }
}

impl CriContainerd {
    /// Starts containerd with the CRI plugin configured by [`config::prepare`], imports the pause
    /// and test images into `k8s.io`, and waits until CRI reports RuntimeReady and NetworkReady
    /// and lists every handler (the installer's post-restart check).
    pub fn start(opts: CriOptions) -> Result<CriContainerd> {
        let pause = pause_image()?;
        let test_image = TestImage::ensure()?;
        let hook_opts = opts.clone();
        let sandbox_image = pause.reference().to_string();
        let containerd = Containerd::start(ContainerdOptions {
            shim_binary: opts.shim_binary.clone(),
            cri: true,
            namespace: Some(CRI_NAMESPACE.to_string()),
            log_level: opts.log_level.clone(),
            config_hook: Some(ConfigHook::new(move |dir, base| {
                config::prepare(dir, base, &hook_opts, &sandbox_image)
            })),
            ..ContainerdOptions::default()
        })?;
        let layout = CriLayout {
            dir: containerd.dir().to_path_buf(),
        };
        let handlers: Vec<String> = if opts.shim_binary.is_some() {
            opts.policies.iter().map(|(n, _)| n.clone()).collect()
        } else {
            Vec::new()
        };
        // From here on, a failure drops `cri`, which tears everything down.
        let client = CriClient::connect(&containerd.address())?;
        let mut cri = CriContainerd {
            client,
            cgroup_root: format!("/gvh-cri-{}", random_hex(6)),
            layout,
            handlers,
            pods: Mutex::new(Vec::new()),
            containerd: Some(containerd),
            torn_down: false,
        };
        cri.containerd().import(&pause)?;
        cri.containerd().import(&test_image)?;
        cri.wait_ready()?;
        cri.check_registered(&[pause.reference(), test_image.reference()])?;
        cri.client.set_timeout(DEFAULT_CALL_TIMEOUT);
        Ok(cri)
    }

    fn wait_ready(&self) -> Result<()> {
        let mut last = String::new();
        let client = &self.client;
        poll_until(
            "CRI RuntimeReady and NetworkReady",
            READY_TIMEOUT,
            || match (
                client.condition("RuntimeReady"),
                client.condition("NetworkReady"),
            ) {
                (Ok(true), Ok(true)) => Some(()),
                (r, n) => {
                    last = format!("RuntimeReady {r:?}, NetworkReady {n:?}");
                    None
                }
            },
        )
        .map_err(|_| HarnessError::ContainerdNotReady {
            reason: format!("CRI not ready: {last}"),
            log: self.containerd().log(),
        })
    }

    /// What the installer verifies after restarting containerd: the effective CRI config lists
    /// every handler with our runtime type and policy path. And CRI sees the imported images.
    fn check_registered(&self, images: &[&str]) -> Result<()> {
        let status = self.client.status(true)?;
        let config = status.info.get("config").cloned().unwrap_or_default();
        let (types, paths) = gvisor_hardened_installer::cri::parse_runtimes(&config)
            .map_err(|e| HarnessError::Config(format!("CRI Status config: {e}")))?;
        for name in &self.handlers {
            if types.get(name).map(String::as_str)
                != Some(gvisor_hardened_installer::handlers::RUNTIME_TYPE)
                || paths.get(name).is_none_or(|p| !Path::new(p).is_file())
            {
                return Err(HarnessError::Config(format!(
                    "CRI does not list handler {name} with its policy: {types:?} {paths:?}"
                )));
            }
        }
        for image in images {
            if self.client.image_status(image)?.is_none() {
                return Err(HarnessError::Config(format!(
                    "CRI does not see the imported image {image}"
                )));
            }
        }
        Ok(())
    }

    pub fn client(&self) -> &CriClient {
        &self.client
    }

    /// Deadline of every later CRI call ([`DEFAULT_CALL_TIMEOUT`] unless changed).
    pub fn set_call_timeout(&mut self, timeout: Duration) {
        self.client.set_timeout(timeout);
    }

    /// The private containerd (its log, state dir, `ctr` bound to `k8s.io`...).
    pub fn containerd(&self) -> &Containerd {
        self.containerd.as_ref().expect("running until shutdown")
    }

    pub fn layout(&self) -> &CriLayout {
        &self.layout
    }

    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    /// The hardened handlers registered (empty for a runc-only instance).
    pub fn handlers(&self) -> &[String] {
        &self.handlers
    }

    /// Parent cgroup of every pod of this instance (`/gvh-cri-<hex>`, in every hierarchy).
    pub fn cgroup_root(&self) -> &str {
        &self.cgroup_root
    }

    /// The shim's audit log (one JSON line per decision, every handler).
    pub fn audit_log(&self) -> String {
        std::fs::read_to_string(self.layout.audit_log()).unwrap_or_default()
    }

    /// Where the policy file of `handler` is.
    pub fn policy_path(&self, handler: &str) -> Option<PathBuf> {
        let pos = self.handlers.iter().position(|h| h == handler)?;
        Some(if pos == 0 {
            self.layout.policy_dir().join("policy.toml")
        } else {
            gvisor_hardened_installer::handlers::class_policy_path(
                &self.layout.policy_dir(),
                handler,
            )
        })
    }

    /// The runsc state root the hardened shim uses for `k8s.io` (per the test policies).
    pub fn runsc_root(&self) -> PathBuf {
        self.layout.runsc_root_base().join(CRI_NAMESPACE)
    }

    /// The warm pool's key directory of `handler` (`<runsc root>/.pool/k8s.io/<key>`, the one
    /// whose template names the handler's policy), once a pod of it wrote one.
    pub fn pool_key_dir(&self, handler: &str) -> Option<PathBuf> {
        self.layout.pool_key_dir(&self.policy_path(handler)?)
    }

    /// How many warm sandboxes `handler`'s pool holds ready.
    pub fn pool_ready(&self, handler: &str) -> usize {
        self.policy_path(handler)
            .map_or(0, |p| self.layout.pool_ready(&p))
    }

    /// The audit log's records, parsed (lines that are not JSON left out).
    pub fn audit_records(&self) -> Vec<serde_json::Value> {
        self.audit_log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The `pool-sandbox-claimed` record of pod sandbox `pod_id`, if it claimed a warm sandbox.
    pub fn pool_claim_of(&self, pod_id: &str) -> Option<serde_json::Value> {
        self.audit_records()
            .into_iter()
            .find(|r| r["event"] == "pool-sandbox-claimed" && r["container_id"] == pod_id)
    }

    /// The runc handler's state root for `k8s.io`.
    pub fn runc_root(&self) -> PathBuf {
        self.layout.runc_root().join(CRI_NAMESPACE)
    }

    /// A kubelet-like config for a pod named `name` under this instance's cgroup root.
    pub fn pod_config(&self, name: &str) -> PodSandboxConfig {
        pod_config(name, &self.cgroup_root, &self.layout.pod_logs())
    }

    /// RunPodSandbox with `config`; the pod is recorded for the leak checks and teardown.
    pub fn run_pod_with(&self, config: PodSandboxConfig, handler: &str) -> Result<Pod> {
        let id = self.client.run_pod_sandbox(&config, handler)?;
        self.adopt_pod(id, config, handler)
    }

    /// Records a pod started through [`client`](Self::client) directly (so teardown removes
    /// it) and reads its netns and pid from PodSandboxStatus.
    pub fn adopt_pod(&self, id: String, config: PodSandboxConfig, handler: &str) -> Result<Pod> {
        let mut pod = Pod {
            id,
            config,
            handler: handler.to_string(),
            netns: None,
            pid: None,
        };
        // Recorded before anything else can fail, so teardown removes it in any case.
        self.pods
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pod.clone());
        let (_, info) = self.client.pod_sandbox_status(&pod.id, true)?;
        if let Some(info) = info
            .get("info")
            .and_then(|i| serde_json::from_str::<serde_json::Value>(i).ok())
        {
            pod.pid = info["pid"].as_i64().map(|p| p as i32);
            pod.netns = network_namespace_path(&info["runtimeSpec"]);
        }
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pods.iter_mut().find(|p| p.id == pod.id) {
            *p = pod.clone();
        }
        Ok(pod)
    }

    /// RunPodSandbox of a plain pod named `name` with `handler`.
    pub fn run_pod(&self, name: &str, handler: &str) -> Result<Pod> {
        self.run_pod_with(self.pod_config(name), handler)
    }

    /// CreateContainer in `pod`.
    pub fn create_container(&self, pod: &Pod, config: &ContainerConfig) -> Result<String> {
        Ok(self.client.create_container(&pod.id, config, &pod.config)?)
    }

    /// CreateContainer + StartContainer. A failed start removes the created container (as the
    /// kubelet eventually does), so the failure leaves nothing the test must clean.
    pub fn run_container(&self, pod: &Pod, config: &ContainerConfig) -> Result<String> {
        let id = self.create_container(pod, config)?;
        if let Err(e) = self.client.start_container(&id) {
            let _ = self.client.remove_container(&id);
            return Err(e.into());
        }
        Ok(id)
    }

    /// StopPodSandbox + RemovePodSandbox, then removes the pod's cgroup parent as the kubelet
    /// does (runtimes only remove their containers' cgroups). A parent that cannot be removed
    /// is left for the leak check to report.
    pub fn remove_pod(&self, pod: &Pod) -> Result<()> {
        self.client.stop_pod_sandbox(&pod.id)?;
        self.client.remove_pod_sandbox(&pod.id)?;
        self.forget_pod(&pod.id);
        Ok(())
    }

    /// For a pod removed through [`client`](Self::client) directly: drops its record and
    /// removes its cgroup parent, as [`remove_pod`](Self::remove_pod) does.
    pub fn forget_pod(&self, id: &str) {
        let mut pods = self.pods.lock().unwrap_or_else(|e| e.into_inner());
        let Some(pos) = pods.iter().position(|p| p.id == id) else {
            return;
        };
        let pod = pods.remove(pos);
        if let Some(parent) = pod.cgroup_parent() {
            for dir in crate::inspect::cgroup_dirs(parent) {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }

    /// Pods started through the harness and not removed yet.
    pub fn pods(&self) -> Vec<Pod> {
        self.pods.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// `linux.namespaces[type=network].path` of an OCI spec.
fn network_namespace_path(spec: &serde_json::Value) -> Option<PathBuf> {
    spec["linux"]["namespaces"]
        .as_array()?
        .iter()
        .find(|n| n["type"] == "network")
        .and_then(|n| n["path"].as_str())
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_path_is_read_from_the_sandbox_spec() {
        let spec = serde_json::json!({"linux": {"namespaces": [
            {"type": "pid"},
            {"type": "network", "path": "/var/run/netns/cni-1234"}
        ]}});
        assert_eq!(
            network_namespace_path(&spec),
            Some(PathBuf::from("/var/run/netns/cni-1234"))
        );
        assert_eq!(network_namespace_path(&serde_json::json!({})), None);
    }
}
