//! Pod and container configs as a kubelet would send them, and the record of a running pod.
//!
//! The builders return the CRI's own prost structs, so a test changes any field directly
//! (`linux.security_context.privileged = true`, a hostPath mount...) without a parallel API.

use std::collections::HashMap;
use std::path::PathBuf;

use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ImageSpec, KeyValue, LinuxContainerConfig,
    LinuxContainerSecurityContext, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount,
    NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
};

use crate::ids::random_hex;

/// The Kubernetes namespace of every test pod.
pub const POD_NAMESPACE: &str = "default";

/// Namespace options of an ordinary v1 pod: network and IPC shared in the pod, one PID
/// namespace per container (the kubelet's default for `shareProcessNamespace: false`).
pub fn pod_namespaces() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Pod as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// A pod config like the kubelet's for a plain pod named `name`: fresh uid, kubelet labels,
/// `log_directory` under `log_root`, `cgroup_parent` = `<cgroup_root>/pod<uid>` (PodSandboxStats
/// needs one: "cgroupPath is empty" otherwise).
pub fn pod_config(name: &str, cgroup_root: &str, log_root: &std::path::Path) -> PodSandboxConfig {
    let uid = format!("{}-{}-{}", random_hex(4), random_hex(2), random_hex(6));
    let labels = HashMap::from([
        ("io.kubernetes.pod.name".to_string(), name.to_string()),
        (
            "io.kubernetes.pod.namespace".to_string(),
            POD_NAMESPACE.to_string(),
        ),
        ("io.kubernetes.pod.uid".to_string(), uid.clone()),
    ]);
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.to_string(),
            uid: uid.clone(),
            namespace: POD_NAMESPACE.to_string(),
            attempt: 0,
        }),
        hostname: name.to_string(),
        log_directory: log_root
            .join(format!("{POD_NAMESPACE}_{name}_{uid}"))
            .display()
            .to_string(),
        labels,
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: format!("{}/pod{uid}", cgroup_root.trim_end_matches('/')),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(pod_namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container config running `command` in `image`, logging to `<name>/0.log` in the pod's
/// log directory.
pub fn container_config<S: AsRef<str>>(name: &str, image: &str, command: &[S]) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.to_string(),
            ..Default::default()
        }),
        command: command.iter().map(|s| s.as_ref().to_string()).collect(),
        labels: HashMap::from([("io.kubernetes.container.name".to_string(), name.to_string())]),
        log_path: format!("{name}/0.log"),
        linux: Some(LinuxContainerConfig {
            security_context: Some(LinuxContainerSecurityContext {
                namespace_options: Some(pod_namespaces()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Mutators for the configs, for the cases the policy must refuse.
pub trait PodConfigExt {
    /// The pod's sandbox security context (created if absent).
    fn sandbox_security(&mut self) -> &mut LinuxSandboxSecurityContext;
    /// Namespace options of the sandbox (created if absent).
    fn namespaces(&mut self) -> &mut NamespaceOption {
        self.sandbox_security()
            .namespace_options
            .get_or_insert_with(pod_namespaces)
    }
    /// `hostNetwork: true`.
    fn host_network(mut self) -> Self
    where
        Self: Sized,
    {
        self.namespaces().network = NamespaceMode::Node as i32;
        self
    }
    /// `hostPID: true`.
    fn host_pid(mut self) -> Self
    where
        Self: Sized,
    {
        self.namespaces().pid = NamespaceMode::Node as i32;
        self
    }
    /// `hostIPC: true`.
    fn host_ipc(mut self) -> Self
    where
        Self: Sized,
    {
        self.namespaces().ipc = NamespaceMode::Node as i32;
        self
    }
}

impl PodConfigExt for PodSandboxConfig {
    fn sandbox_security(&mut self) -> &mut LinuxSandboxSecurityContext {
        self.linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
    }
}

pub trait ContainerConfigExt {
    fn security(&mut self) -> &mut LinuxContainerSecurityContext;
    /// `securityContext.privileged: true` (the kubelet also marks the pod privileged).
    fn privileged(mut self) -> Self
    where
        Self: Sized,
    {
        self.security().privileged = true;
        self
    }
    /// Copies the pod's namespace modes, as the kubelet does for every container.
    fn namespaces_of(mut self, pod: &PodSandboxConfig) -> Self
    where
        Self: Sized,
    {
        if let Some(ns) = pod
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone())
        {
            self.security().namespace_options = Some(ns);
        }
        self
    }
    /// A hostPath volume.
    fn host_path(self, host: &str, container: &str, readonly: bool) -> Self;
    fn env(self, key: &str, value: &str) -> Self;
}

impl ContainerConfigExt for ContainerConfig {
    fn security(&mut self) -> &mut LinuxContainerSecurityContext {
        self.linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
    }

    fn host_path(mut self, host: &str, container: &str, readonly: bool) -> Self {
        self.mounts.push(Mount {
            container_path: container.to_string(),
            host_path: host.to_string(),
            readonly,
            ..Default::default()
        });
        self
    }

    fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push(KeyValue {
            key: key.to_string(),
            value: value.to_string(),
        });
        self
    }
}

/// A pod the harness started: what teardown and the leak checks need to find its traces.
#[derive(Debug, Clone)]
pub struct Pod {
    pub id: String,
    pub config: PodSandboxConfig,
    /// The RuntimeClass handler it was started with (`""`: containerd's default).
    pub handler: String,
    /// The network namespace CRI created for it (from PodSandboxStatus verbose info).
    pub netns: Option<PathBuf>,
    /// The sandbox (pause) process's pid on the host, as containerd reports it.
    pub pid: Option<i32>,
}

impl Pod {
    /// `linux.cgroup_parent` of the pod.
    pub fn cgroup_parent(&self) -> Option<&str> {
        self.config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.as_str())
            .filter(|p| !p.is_empty())
    }

    pub fn name(&self) -> &str {
        self.config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or_default()
    }

    pub fn log_directory(&self) -> PathBuf {
        PathBuf::from(&self.config.log_directory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_config_has_a_cgroup_parent_under_the_root_and_kubelet_labels() {
        let p = pod_config("web", "/gvh-x", std::path::Path::new("/tmp/logs"));
        let uid = &p.metadata.as_ref().unwrap().uid;
        assert_eq!(
            p.linux.as_ref().unwrap().cgroup_parent,
            format!("/gvh-x/pod{uid}")
        );
        assert_eq!(p.labels["io.kubernetes.pod.uid"], *uid);
        assert!(p.log_directory.starts_with("/tmp/logs/default_web_"));
        let other = pod_config("web", "/gvh-x", std::path::Path::new("/tmp/logs"));
        assert_ne!(other.metadata.unwrap().uid, *uid);
    }

    #[test]
    fn host_namespace_mutators_set_node_mode() {
        let p = pod_config("a", "/r", std::path::Path::new("/l"))
            .host_network()
            .host_pid();
        let ns = p
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns.network, NamespaceMode::Node as i32);
        assert_eq!(ns.pid, NamespaceMode::Node as i32);
        assert_eq!(ns.ipc, NamespaceMode::Pod as i32);
    }

    #[test]
    fn container_mutators() {
        let c = container_config("c", "img", &["sleep", "1"])
            .privileged()
            .host_path("/etc", "/host-etc", true)
            .env("A", "b");
        assert!(
            c.linux
                .as_ref()
                .unwrap()
                .security_context
                .as_ref()
                .unwrap()
                .privileged
        );
        assert_eq!(c.mounts[0].host_path, "/etc");
        assert_eq!(c.envs[0].key, "A");
        assert_eq!(c.command, vec!["sleep", "1"]);
    }
}
