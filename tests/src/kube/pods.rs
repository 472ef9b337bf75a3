//! Pods for the node: manifests as JSON (which kubectl takes as YAML), and waiting on them
//! through the API server.

use std::time::Duration;

use serde_json::{json, Value};

use super::KubeNode;
use crate::error::Result;
use crate::poll::poll_until;
use crate::process::CommandOutput;

/// A pod of the test image's containers, `imagePullPolicy: Never` (no registry here).
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub runtime_class: Option<String>,
    pub containers: Vec<(String, Vec<String>)>,
    pub annotations: Vec<(String, String)>,
    /// Extra fields merged into `spec` (volumes, securityContext, hostNetwork...).
    pub spec_extra: Value,
    /// Extra fields merged into every container.
    pub container_extra: Value,
}

impl PodSpec {
    pub fn new(name: &str, namespace: &str, image: &str) -> Self {
        PodSpec {
            name: name.to_string(),
            namespace: namespace.to_string(),
            image: image.to_string(),
            runtime_class: None,
            containers: Vec::new(),
            annotations: Vec::new(),
            spec_extra: json!({}),
            container_extra: json!({}),
        }
    }

    pub fn runtime_class(mut self, class: &str) -> Self {
        self.runtime_class = Some(class.to_string());
        self
    }

    pub fn container(mut self, name: &str, argv: &[&str]) -> Self {
        self.containers.push((
            name.to_string(),
            argv.iter().map(|s| s.to_string()).collect(),
        ));
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.push((key.to_string(), value.to_string()));
        self
    }

    pub fn spec(mut self, extra: Value) -> Self {
        merge(&mut self.spec_extra, extra);
        self
    }

    pub fn each_container(mut self, extra: Value) -> Self {
        merge(&mut self.container_extra, extra);
        self
    }

    pub fn to_json(&self) -> Value {
        let containers: Vec<Value> = self
            .containers
            .iter()
            .map(|(name, argv)| {
                let mut c = json!({
                    "name": name,
                    "image": self.image,
                    "imagePullPolicy": "Never",
                    "command": argv,
                });
                merge(&mut c, self.container_extra.clone());
                c
            })
            .collect();
        let mut spec = json!({
            "containers": containers,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
        });
        if let Some(class) = &self.runtime_class {
            spec["runtimeClassName"] = json!(class);
        }
        merge(&mut spec, self.spec_extra.clone());
        let annotations: serde_json::Map<String, Value> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "annotations": annotations,
            },
            "spec": spec,
        })
    }

    pub fn to_yaml(&self) -> String {
        serde_json::to_string_pretty(&self.to_json()).expect("a JSON value serialises")
    }
}

/// Merges object `extra` into `base` (objects recursively, anything else replaced).
fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                merge(b.entry(k).or_insert(Value::Null), v);
            }
        }
        (b, e) => *b = e,
    }
}

/// Watching a pod through the API server.
pub trait PodWatch {
    /// Polls until the pod's Ready condition is True.
    fn wait_ready(&self, ns: &str, pod: &str, timeout: Duration) -> Result<()>;
    /// Polls until `jsonpath` of the pod is non-empty and returns it.
    fn wait_field(&self, ns: &str, pod: &str, path: &str, timeout: Duration) -> Result<String>;
    /// `kubectl exec POD -c CONTAINER -- ARGV`, whatever its outcome.
    fn exec(&self, ns: &str, pod: &str, container: &str, argv: &[&str]) -> Result<CommandOutput>;
    /// `kubectl delete pod --wait`: returns once the kubelet removed it.
    fn delete_pod(&self, ns: &str, pod: &str) -> Result<()>;
}

impl PodWatch for KubeNode {
    fn wait_ready(&self, ns: &str, pod: &str, timeout: Duration) -> Result<()> {
        let ready = r#"{.status.conditions[?(@.type=="Ready")].status}"#;
        let result = poll_until(&format!("pod {ns}/{pod} Ready"), timeout, || {
            (self.jsonpath(ns, &format!("pod/{pod}"), ready) == "True").then_some(())
        });
        if result.is_err() {
            let describe = self
                .kubectl()
                .args(["-n", ns, "describe", "pod", pod])
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default();
            // A pod left unscheduled is most often the node's doing: a taint such as
            // disk-pressure (the host's disk is the node's) says why at once.
            let node = self
                .kubectl()
                .args([
                    "get",
                    "node",
                    super::NODE_NAME,
                    "-o",
                    r#"jsonpath=taints: {.spec.taints}{"\n"}conditions: {range .status.conditions[*]}{.type}={.status} {end}"#,
                ])
                .output()
                .map(|o| o.stdout)
                .unwrap_or_default();
            eprintln!(
                "pod {ns}/{pod} not Ready:\n{describe}\nnode {}: {node}",
                super::NODE_NAME
            );
        }
        result
    }

    fn wait_field(&self, ns: &str, pod: &str, path: &str, timeout: Duration) -> Result<String> {
        poll_until(&format!("{path} of pod {ns}/{pod}"), timeout, || {
            let v = self.jsonpath(ns, &format!("pod/{pod}"), path);
            (!v.is_empty()).then_some(v)
        })
    }

    fn exec(&self, ns: &str, pod: &str, container: &str, argv: &[&str]) -> Result<CommandOutput> {
        self.kubectl()
            .args(["-n", ns, "exec", pod, "-c", container, "--"])
            .args(argv)
            .output()
    }

    fn delete_pod(&self, ns: &str, pod: &str) -> Result<()> {
        self.kubectl()
            .args([
                "-n",
                ns,
                "delete",
                "pod",
                pod,
                "--wait=true",
                "--timeout=120s",
            ])
            .checked()
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_carry_the_class_the_image_and_the_extras() {
        let p = PodSpec::new("a", "ns", "localhost/img:1")
            .runtime_class("gvisor-hardened")
            .container("c", &["sleep", "60"])
            .annotation("k", "v")
            .spec(json!({"automountServiceAccountToken": false}))
            .each_container(json!({"securityContext": {"privileged": true}}))
            .to_json();
        assert_eq!(p["spec"]["runtimeClassName"], "gvisor-hardened");
        assert_eq!(p["spec"]["automountServiceAccountToken"], false);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Never");
        assert_eq!(
            p["spec"]["containers"][0]["securityContext"]["privileged"],
            true
        );
        assert_eq!(p["metadata"]["annotations"]["k"], "v");
    }
}
