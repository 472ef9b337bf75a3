//! crictl (the stack's, `hack/deps.sh`) bound to one CRI containerd of the harness
//! ([`crate::cri::CriContainerd`]): its own config file in the instance directory (never
//! /etc/crictl.yaml), both endpoints on the instance's socket, no image pulls. Pod and
//! container configs are the harness's kubelet-like prost structs ([`crate::cri::pod_config`],
//! [`crate::cri::container_config`]), written as the JSON crictl reads, so a pod started through
//! crictl is recorded with the same config ([`crate::cri::CriContainerd::adopt_pod`]) for the
//! leak checks and teardown.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_cri::v1::{ContainerConfig, KeyValue, NamespaceOption, PodSandboxConfig};
use serde_json::{json, Map, Value};

use crate::cri::CriContainerd;
use crate::error::{HarnessError, Result};
use crate::process::{BoundedCommand, CommandOutput};

/// Deadline of one crictl call (crictl's own `timeout` is set below it).
pub const DEFAULT_CRICTL_TIMEOUT: Duration = Duration::from_secs(120);

/// crictl bound to one CRI containerd.
#[derive(Debug)]
pub struct Crictl {
    binary: PathBuf,
    dir: PathBuf,
}

impl Crictl {
    /// crictl for `cri`, its config and the config files it is given in `<dir>/crictl/`.
    pub fn new(cri: &CriContainerd) -> Result<Crictl> {
        let dir = cri.dir().join("crictl");
        fs::create_dir_all(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
        let endpoint = format!("unix://{}", cri.containerd().address().display());
        let config = format!(
            "runtime-endpoint: {endpoint}\nimage-endpoint: {endpoint}\ntimeout: 60\ndebug: false\npull-image-on-create: false\n"
        );
        let path = dir.join("crictl.yaml");
        fs::write(&path, config).map_err(|e| HarnessError::io("writing", &path, e))?;
        Ok(Crictl {
            binary: crate::stack::bin("crictl")?,
            dir,
        })
    }

    /// crictl's config file.
    pub fn config_path(&self) -> PathBuf {
        self.dir.join("crictl.yaml")
    }

    /// `crictl --config <ours>`: add the subcommand and its arguments.
    pub fn command(&self) -> BoundedCommand {
        let mut cmd = Command::new(&self.binary);
        // crictl reads these when set; none may point it elsewhere.
        for var in [
            "CONTAINER_RUNTIME_ENDPOINT",
            "IMAGE_SERVICE_ENDPOINT",
            "CRI_CONFIG_FILE",
        ] {
            cmd.env_remove(var);
        }
        cmd.arg("--config").arg(self.config_path());
        BoundedCommand::new(cmd, DEFAULT_CRICTL_TIMEOUT)
    }

    /// `crictl ARGS`, whatever its exit status.
    pub fn output<I, S>(&self, args: I) -> Result<CommandOutput>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command().args(args).output()
    }

    /// `crictl ARGS`; a non-zero exit is an error carrying the output.
    pub fn checked<I, S>(&self, args: I) -> Result<CommandOutput>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command().args(args).checked()
    }

    /// Writes `value` as `<dir>/crictl/<name>.json` and returns the path.
    pub fn write_json(&self, name: &str, value: &Value) -> Result<PathBuf> {
        let path = self.dir.join(format!("{name}.json"));
        let text = serde_json::to_string_pretty(value).expect("JSON values serialize");
        fs::write(&path, text).map_err(|e| HarnessError::io("writing", &path, e))?;
        Ok(path)
    }

    /// `crictl runp --runtime HANDLER <pod.json>`: the pod's id.
    pub fn runp(&self, config: &PodSandboxConfig, handler: &str) -> Result<String> {
        let file = self.write_json(&pod_file_name(config), &pod_json(config))?;
        let out = self.checked([
            "runp".as_ref(),
            "--runtime".as_ref(),
            handler.as_ref(),
            file.as_os_str(),
        ])?;
        Ok(out.stdout.trim().to_string())
    }

    /// `crictl create POD <container.json> <pod.json>`, whatever its exit status (a refusal
    /// is a result here).
    pub fn create(
        &self,
        pod_id: &str,
        pod: &PodSandboxConfig,
        config: &ContainerConfig,
    ) -> Result<CommandOutput> {
        let name = config
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let file = self.write_json(&format!("container-{name}"), &container_json(config))?;
        let pod_file = self.dir.join(format!("{}.json", pod_file_name(pod)));
        self.output([
            "create".as_ref(),
            pod_id.as_ref(),
            file.as_os_str(),
            pod_file.as_os_str(),
        ])
    }
}

fn pod_file_name(config: &PodSandboxConfig) -> String {
    let name = config
        .metadata
        .as_ref()
        .map(|m| m.name.as_str())
        .unwrap_or("pod");
    format!("pod-{name}")
}

fn map(entries: &std::collections::HashMap<String, String>) -> Value {
    let mut sorted: Vec<_> = entries.iter().collect();
    sorted.sort();
    Value::Object(
        sorted
            .into_iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

fn namespaces(ns: &NamespaceOption) -> Value {
    json!({"network": ns.network, "pid": ns.pid, "ipc": ns.ipc, "target_id": ns.target_id})
}

fn envs(env: &[KeyValue]) -> Value {
    env.iter()
        .map(|kv| json!({"key": kv.key, "value": kv.value}))
        .collect()
}

/// The pod config as crictl's `runp` reads it (the CRI message's JSON field names; enums as
/// numbers). Covers what the harness's builders and mutators set.
pub fn pod_json(c: &PodSandboxConfig) -> Value {
    let mut v = Map::new();
    if let Some(m) = &c.metadata {
        v.insert(
            "metadata".into(),
            json!({"name": m.name, "uid": m.uid, "namespace": m.namespace, "attempt": m.attempt}),
        );
    }
    v.insert("hostname".into(), json!(c.hostname));
    v.insert("log_directory".into(), json!(c.log_directory));
    v.insert("labels".into(), map(&c.labels));
    v.insert("annotations".into(), map(&c.annotations));
    if let Some(linux) = &c.linux {
        let mut l = Map::new();
        l.insert("cgroup_parent".into(), json!(linux.cgroup_parent));
        if let Some(sc) = &linux.security_context {
            let mut s = Map::new();
            if let Some(ns) = &sc.namespace_options {
                s.insert("namespace_options".into(), namespaces(ns));
            }
            s.insert("privileged".into(), json!(sc.privileged));
            l.insert("security_context".into(), Value::Object(s));
        }
        v.insert("linux".into(), Value::Object(l));
    }
    Value::Object(v)
}

/// The container config as crictl's `create` reads it.
pub fn container_json(c: &ContainerConfig) -> Value {
    let mut v = Map::new();
    if let Some(m) = &c.metadata {
        v.insert(
            "metadata".into(),
            json!({"name": m.name, "attempt": m.attempt}),
        );
    }
    if let Some(i) = &c.image {
        v.insert("image".into(), json!({"image": i.image}));
    }
    v.insert("command".into(), json!(c.command));
    v.insert("args".into(), json!(c.args));
    v.insert("working_dir".into(), json!(c.working_dir));
    v.insert("envs".into(), envs(&c.envs));
    v.insert(
        "mounts".into(),
        c.mounts
            .iter()
            .map(|m| {
                json!({"container_path": m.container_path, "host_path": m.host_path,
                       "readonly": m.readonly})
            })
            .collect(),
    );
    v.insert("labels".into(), map(&c.labels));
    v.insert("annotations".into(), map(&c.annotations));
    v.insert("log_path".into(), json!(c.log_path));
    v.insert("stdin".into(), json!(c.stdin));
    v.insert("tty".into(), json!(c.tty));
    if let Some(linux) = &c.linux {
        let mut l = Map::new();
        if let Some(sc) = &linux.security_context {
            let mut s = Map::new();
            if let Some(ns) = &sc.namespace_options {
                s.insert("namespace_options".into(), namespaces(ns));
            }
            s.insert("privileged".into(), json!(sc.privileged));
            l.insert("security_context".into(), Value::Object(s));
        }
        v.insert("linux".into(), Value::Object(l));
    }
    Value::Object(v)
}

/// The log file CRI writes for a container of `pod` with `config` (kubelet's layout:
/// `<log_directory>/<log_path>`).
pub fn log_file(pod: &PodSandboxConfig, config: &ContainerConfig) -> PathBuf {
    Path::new(&pod.log_directory).join(&config.log_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::{container_config, pod_config, ContainerConfigExt};

    #[test]
    fn pod_json_carries_what_the_kubelet_like_config_sets() {
        let c = pod_config("p", "/gvh-cri-x", Path::new("/tmp/logs"));
        let v = pod_json(&c);
        let m = c.metadata.as_ref().unwrap();
        assert_eq!(v["metadata"]["uid"], m.uid.as_str());
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(
            v["linux"]["cgroup_parent"],
            format!("/gvh-cri-x/pod{}", m.uid)
        );
        // POD = 0, CONTAINER = 1, as the CRI enum numbers them.
        assert_eq!(
            v["linux"]["security_context"]["namespace_options"],
            json!({"network": 0, "pid": 1, "ipc": 0, "target_id": ""})
        );
        assert!(v["log_directory"]
            .as_str()
            .unwrap()
            .starts_with("/tmp/logs/"));
    }

    #[test]
    fn container_json_carries_privileged_and_host_paths() {
        let c = container_config("a", "img", &["sleep", "1"])
            .privileged()
            .host_path("/var/run", "/x", false);
        let v = container_json(&c);
        assert_eq!(v["command"], json!(["sleep", "1"]));
        assert_eq!(v["image"]["image"], "img");
        assert_eq!(v["linux"]["security_context"]["privileged"], true);
        assert_eq!(
            v["mounts"],
            json!([{"container_path": "/x", "host_path": "/var/run", "readonly": false}])
        );
        assert_eq!(v["log_path"], "a/0.log");
    }
}
