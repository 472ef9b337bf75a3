//! The manifests agree with the installer: handler names, the node label, the policies
//! ConfigMap that becomes the handler set, and the DaemonSet's flags.

use std::path::{Path, PathBuf};
use std::process::Command;

use gvisor_hardened_installer::handlers::{
    is_dns_label, AGENT_HANDLER, DEFAULT_HANDLER, DEFAULT_POLICY_FILE, NODE_LABEL,
    NODE_LABEL_VALUE, TOOL_HANDLER,
};
use gvisor_hardened_installer::sources::{classes, Sources};
use serde_json::Value as Json;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn yaml_docs(rel: &str) -> Vec<Json> {
    let text = std::fs::read_to_string(repo().join(rel)).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Json| !v.is_null())
        .collect()
}

/// `kubectl kustomize` output as JSON values.
fn render(dir: &str) -> Vec<Json> {
    let out = Command::new("kubectl")
        .args(["kustomize", &repo().join(dir).display().to_string()])
        .output()
        .expect("kubectl (with kustomize) is needed for the manifest tests");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

const INSTALLER_DAEMONSET: &str = "gvisor-hardened-installer";
const METRICS_DAEMONSET: &str = "gvisor-hardened-metrics";

/// The rendered DaemonSet called `name`.
fn daemonset<'a>(rendered: &'a [Json], name: &str) -> &'a Json {
    rendered
        .iter()
        .find(|o| o["kind"] == "DaemonSet" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no DaemonSet {name} rendered"))
}

#[test]
fn runtime_class_handlers_are_the_installers_runtime_names() {
    for (file, name) in [
        (
            "runtimeclass/runtimeclass-gvisor-hardened.yaml",
            DEFAULT_HANDLER,
        ),
        (
            "runtimeclass/runtimeclass-gvisor-hardened-tool.yaml",
            TOOL_HANDLER,
        ),
        (
            "runtimeclass/runtimeclass-gvisor-hardened-agent.yaml",
            AGENT_HANDLER,
        ),
    ] {
        let rc = &yaml_docs(file)[0];
        assert_eq!(rc["kind"], "RuntimeClass");
        assert_eq!(rc["handler"], name, "{file}");
        assert_eq!(rc["metadata"]["name"], name, "{file}");
        assert!(is_dns_label(name));
        assert_eq!(
            rc["scheduling"]["nodeSelector"][NODE_LABEL], NODE_LABEL_VALUE,
            "{file}: nodeSelector must be the installer's label"
        );
    }
}

/// The installer derives its handlers from the policy files; the ConfigMap's files must give
/// exactly the RuntimeClasses' handlers, and be loadable by the installer's source checks.
#[test]
fn policies_configmap_yields_exactly_the_runtime_class_handlers() {
    let dir = repo().join("deploy/kustomize/runtimeclasses/policies");
    let tmp = tempfile::tempdir().unwrap();
    let shim = tmp.path().join("shim");
    std::fs::write(&shim, b"x").unwrap();
    let policies = Sources {
        forwarder: shim.clone(),
        shim,
        policy_dir: dir.clone(),
        allow_audit_mode: false,
    }
    .validate()
    .unwrap();
    let mut handlers = vec![DEFAULT_HANDLER.to_string()];
    handlers.extend(classes(&policies));
    handlers.sort();

    let rendered = render("deploy/kustomize/default");
    let mut rc_handlers: Vec<String> = rendered
        .iter()
        .filter(|o| o["kind"] == "RuntimeClass")
        .map(|o| o["handler"].as_str().unwrap().to_string())
        .collect();
    rc_handlers.sort();
    assert_eq!(handlers, rc_handlers);

    let cm = rendered
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("policies ConfigMap rendered");
    let mut keys: Vec<&String> = cm["data"].as_object().unwrap().keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "gvisor-hardened-agent.toml",
            "gvisor-hardened-tool.toml",
            DEFAULT_POLICY_FILE
        ]
    );
}

#[test]
fn shipped_policies_load_with_the_shims_own_parser() {
    for name in [
        DEFAULT_POLICY_FILE,
        "gvisor-hardened-tool.toml",
        "gvisor-hardened-agent.toml",
    ] {
        let path = repo()
            .join("deploy/kustomize/runtimeclasses/policies")
            .join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        if let Err(e) = policy_injector::Policy::from_toml_str(&text) {
            panic!("{}: {e}", path.display());
        }
    }
}

#[test]
fn tool_policy_is_the_strict_one() {
    let text = std::fs::read_to_string(
        repo().join("deploy/kustomize/runtimeclasses/policies/gvisor-hardened-tool.toml"),
    )
    .unwrap();
    let doc: toml_edit::DocumentMut = text.parse().unwrap();
    assert_eq!(doc["resources"]["memory"].as_str(), Some("512Mi"));
    assert_eq!(doc["resources"]["cpu"].as_str(), Some("1"));
    assert_eq!(doc["resources"]["processes"].as_integer(), Some(64));
    assert_eq!(doc["lifetime"]["max_runtime"].as_str(), Some("10m"));
    assert_eq!(doc["lifetime"]["idle_timeout"].as_str(), Some("2m"));
    assert_eq!(doc["output"]["max_bytes"].as_str(), Some("16Mi"));
}

#[test]
fn agent_policy_is_netless_until_a_cluster_lists_hosts() {
    let text = std::fs::read_to_string(
        repo().join("deploy/kustomize/runtimeclasses/policies/gvisor-hardened-agent.toml"),
    )
    .unwrap();
    let policy = policy_injector::Policy::from_toml_str(&text).unwrap();
    assert_eq!(policy.network.mode, policy_injector::NetworkMode::None);
    assert!(policy.network.egress.allow.is_empty());
    assert!(policy.network.egress.require_sni && !policy.network.egress.plain_http);
    // The comments say where the model API and the package index go.
    for hint in ["model API", "package index", "gvisor-hardened.dev/egress"] {
        assert!(text.contains(hint), "{hint}");
    }
}

#[test]
fn daemonset_mounts_the_host_and_the_policies_where_the_installer_looks() {
    let rendered = render("deploy/kustomize/default");
    let ds = daemonset(&rendered, INSTALLER_DAEMONSET);
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["hostPID"], true);
    // The installer alone: anything beside it would share its host PID namespace.
    assert_eq!(spec["containers"].as_array().unwrap().len(), 1);
    let c = &spec["containers"][0];
    assert_eq!(c["name"], "installer");
    assert_eq!(c["args"], serde_json::json!(["run"]));
    let env = |name: &str| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == name)
            .cloned()
            .unwrap_or(Json::Null)
    };
    assert_eq!(
        env("NODE_NAME")["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let host_root = env("GVH_HOST_ROOT")["value"].as_str().unwrap().to_string();
    let policy_src = env("GVH_POLICY_SOURCE")["value"]
        .as_str()
        .unwrap()
        .to_string();
    let mounts = c["volumeMounts"].as_array().unwrap();
    let mount_of = |path: &str| {
        mounts
            .iter()
            .find(|m| m["mountPath"] == path)
            .and_then(|m| m["name"].as_str())
            .unwrap_or_else(|| panic!("nothing mounted at {path}"))
            .to_string()
    };
    let volumes = spec["volumes"].as_array().unwrap();
    let volume = |name: &str| volumes.iter().find(|v| v["name"] == name).unwrap().clone();
    assert_eq!(volume(&mount_of(&host_root))["hostPath"]["path"], "/");
    let cm_name = volume(&mount_of(&policy_src))["configMap"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        rendered
            .iter()
            .any(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == cm_name.as_str()),
        "DaemonSet mounts {cm_name}, which is not rendered"
    );
}

/// The privileged installer pods (host `/` mounted) and the exporter's run exactly this
/// installer's release: kustomize's `images:` pins the tag to the crate version, never a moving
/// `:latest`.
#[test]
fn installer_image_is_pinned_to_the_crate_version() {
    let want = format!("gvisor-hardened-installer:{}", env!("CARGO_PKG_VERSION"));
    for (dir, kind, count) in [
        ("deploy/kustomize/default", "DaemonSet", 2),
        ("deploy/kustomize/base", "DaemonSet", 2),
        ("deploy/kustomize/cleanup", "Job", 1),
    ] {
        let rendered = render(dir);
        let pods: Vec<&Json> = rendered
            .iter()
            .filter(|o| o["kind"] == kind)
            .map(|o| &o["spec"]["template"]["spec"])
            .collect();
        assert_eq!(pods.len(), count, "{dir}: {kind}s");
        for pod in pods {
            for c in pod["containers"].as_array().unwrap() {
                assert_eq!(c["image"], want.as_str(), "{dir} {kind}");
            }
        }
    }
}

/// The metrics exporter: its own DaemonSet on the installer's nodes, the same image, and none
/// of the installer's rights. Its pod shares no host namespace (hostPID is per pod: in the
/// installer's pod its uid 0 could signal every uid-0 process of the node), has no service
/// account token and no RBAC; it reads one host directory (the audit log's), read-only, and
/// serves on the port the pod's scrape annotations name.
#[test]
fn metrics_daemonset_serves_the_audit_log_with_least_privilege() {
    let rendered = render("deploy/kustomize/default");
    let installer_ds = daemonset(&rendered, INSTALLER_DAEMONSET);
    let installer_spec = &installer_ds["spec"]["template"]["spec"];
    let installer = &installer_spec["containers"][0];
    let ds = daemonset(&rendered, METRICS_DAEMONSET);
    assert_eq!(
        ds["metadata"]["namespace"],
        installer_ds["metadata"]["namespace"]
    );
    let template = &ds["spec"]["template"];
    let spec = &template["spec"];

    // Its own pod: no host namespace, no token, an account of its own that nothing binds.
    for k in ["hostPID", "hostNetwork", "hostIPC"] {
        assert!(
            spec.get(k).is_none() || spec[k] == false,
            "{k}: {}",
            spec[k]
        );
    }
    assert_eq!(spec["automountServiceAccountToken"], false);
    let sa = spec["serviceAccountName"].as_str().unwrap();
    assert_ne!(sa, installer_spec["serviceAccountName"].as_str().unwrap());
    let account = rendered
        .iter()
        .find(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] == sa)
        .unwrap_or_else(|| panic!("service account {sa} not rendered"));
    assert_eq!(account["automountServiceAccountToken"], false);
    for binding in rendered
        .iter()
        .filter(|o| o["kind"] == "RoleBinding" || o["kind"] == "ClusterRoleBinding")
    {
        for subject in binding["subjects"].as_array().into_iter().flatten() {
            assert_ne!(subject["name"], sa, "{binding}");
        }
    }
    // On the installer's nodes, whatever their taints.
    assert_eq!(spec["nodeSelector"], installer_spec["nodeSelector"]);
    assert_eq!(spec["tolerations"], installer_spec["tolerations"]);
    // Selects its own pods, not the installer's.
    let selector = &ds["spec"]["selector"]["matchLabels"];
    assert_ne!(selector, &installer_ds["spec"]["selector"]["matchLabels"]);
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(&template["metadata"]["labels"][k], v);
    }

    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = containers
        .iter()
        .find(|c| c["name"] == "metrics")
        .expect("a container named metrics");
    assert_eq!(c["image"], installer["image"]);
    assert_eq!(
        c["command"],
        serde_json::json!(["/opt/gvisor-hardened/bin/policy-injector"])
    );
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[..2], ["audit", "metrics"]);
    let flag = |name: &str| {
        let i = args.iter().position(|a| *a == name).unwrap();
        args[i + 1]
    };
    // Every shipped policy logs where the exporter reads.
    let log = flag("--log");
    for name in [
        DEFAULT_POLICY_FILE,
        "gvisor-hardened-tool.toml",
        "gvisor-hardened-agent.toml",
    ] {
        let path = repo()
            .join("deploy/kustomize/runtimeclasses/policies")
            .join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        let policy = policy_injector::Policy::from_toml_str(&text).unwrap();
        assert_eq!(policy.audit.path, log, "{name}");
    }
    let port: u16 = flag("--listen")
        .strip_prefix("0.0.0.0:")
        .unwrap()
        .parse()
        .unwrap();

    let ports = c["ports"].as_array().unwrap();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0]["name"], "metrics");
    assert_eq!(ports[0]["containerPort"], port);
    assert!(ports[0].get("hostPort").is_none());
    // The pod network gets the exposition only with the Secret's bearer token; the probe asks
    // /healthz, which shows nothing and needs none.
    let token = flag("--bearer-token-file");
    let token_mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| token.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the token file is on a mount");
    assert_eq!(token_mount["readOnly"], true);
    let token_volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == token_mount["name"])
        .unwrap();
    assert_eq!(
        token_volume["secret"]["secretName"],
        "gvisor-hardened-metrics-token"
    );
    let probe = &c["readinessProbe"]["httpGet"];
    assert_eq!(probe["path"], "/healthz");
    assert_eq!(probe["port"], "metrics");
    // Only Prometheus's pods may connect.
    let policy = rendered
        .iter()
        .find(|o| o["kind"] == "NetworkPolicy")
        .expect("a NetworkPolicy for the exporter");
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(
            &policy["spec"]["podSelector"]["matchLabels"][k], v,
            "{policy}"
        );
    }
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress"])
    );
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], port.to_string().as_str());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    // The installer serves nothing: discovery must not pick its pods.
    assert!(installer_ds["spec"]["template"]["metadata"]
        .get("annotations")
        .and_then(|a| a.get("prometheus.io/scrape"))
        .is_none());

    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"], false);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert!(sc["capabilities"].get("add").is_none());
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    // uid 0 as the log's owner, without capabilities (see the manifest's comment).
    assert_eq!(sc["runAsUser"], 0);
    assert!(c.get("env").is_none(), "the exporter needs no environment");
    for q in ["requests", "limits"] {
        assert!(c["resources"][q]["memory"].is_string(), "{q}");
    }

    // Two mounts, both read-only: the log's directory from the host (never the host's /),
    // then the token's Secret.
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 2, "{mounts:?}");
    assert_eq!(mounts[1]["name"], token_mount["name"]);
    assert_eq!(mounts[0]["readOnly"], true);
    let dir = mounts[0]["mountPath"].as_str().unwrap();
    assert_eq!(Path::new(log).parent(), Some(Path::new(dir)));
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mounts[0]["name"])
        .unwrap();
    assert_eq!(volume["hostPath"]["path"], dir);
    assert_ne!(volume["hostPath"]["path"], "/");
}
