//! The runsc network mode: the policy's, or a tighter one a workload asked for.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::json::Object;
use crate::policy::NetworkMode;

pub(crate) fn apply(pass: &mut Pass<'_>) {
    let policy_mode = pass.policy.network.mode;
    let mode = pass
        .tightening
        .network
        .map_or(policy_mode, |a| a.min(policy_mode));
    pass.network = mode;
    let reason = if mode == policy_mode {
        "the policy's network mode".to_string()
    } else {
        format!(
            "tightened from the policy's {} by annotation {}",
            policy_mode.as_str(),
            crate::annotations::NETWORK
        )
    };
    pass.record(
        Rule::Network,
        "runsc.network",
        Action::Set,
        None,
        Some(Value::String(mode.as_str().to_string())),
        reason,
    );
}

/// What nerdctl asks of the network, in its own annotations: published ports (`-p`) and the
/// networks it attached (`--network`, `bridge` by default). Under network mode `none` the
/// sandbox has no network stack: nothing could ever connect to a published port, and a bridge
/// nerdctl wires up is never used. Both are refused with the rule's name rather than accepted
/// and silently unreachable (`--network none` is what works).
pub(crate) fn refuse_unreachable(spec: &Object, pass: &mut Pass<'_>) {
    if pass.network != NetworkMode::None {
        return;
    }
    let Some(ann) = spec.get("annotations").and_then(Value::as_object) else {
        return;
    };
    let list = |key: &str| -> Vec<Value> {
        ann.get(key)
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str::<Vec<Value>>(s).ok())
            .unwrap_or_default()
    };
    let ports = list(NERDCTL_PORTS);
    if !ports.is_empty() {
        let shown: Vec<String> = ports.iter().map(port).collect();
        pass.reject(
            Rule::Network,
            format!("annotations.{NERDCTL_PORTS}"),
            format!(
                "published ports ({}) cannot reach the sandbox: network.mode is \"none\", it has no network stack",
                shown.join(", ")
            ),
        );
    }
    let networks: Vec<String> = list(NERDCTL_NETWORKS)
        .iter()
        .filter_map(|n| n.as_str().map(str::to_string))
        .filter(|n| n != "none")
        .collect();
    if !networks.is_empty() {
        pass.reject(
            Rule::Network,
            format!("annotations.{NERDCTL_NETWORKS}"),
            format!(
                "network {} cannot reach the sandbox: network.mode is \"none\", it has no network stack; run with --network none",
                networks.join(", ")
            ),
        );
    }
}

const NERDCTL_PORTS: &str = "nerdctl/ports";
const NERDCTL_NETWORKS: &str = "nerdctl/networks";

/// `127.0.0.1:8080->80/tcp` from nerdctl's port entry.
fn port(p: &Value) -> String {
    let get = |k: &str| {
        p.get(k)
            .map(|v| v.to_string().trim_matches('"').to_string())
    };
    format!(
        "{}{}->{}/{}",
        get("HostIP")
            .filter(|h| !h.is_empty())
            .map(|h| format!("{h}:"))
            .unwrap_or_default(),
        get("HostPort").unwrap_or_default(),
        get("ContainerPort").unwrap_or_default(),
        get("Protocol").unwrap_or_else(|| "tcp".into())
    )
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::policy::{NetworkMode, Policy};
    use serde_json::json;

    #[test]
    fn network_mode_comes_from_the_policy() {
        assert_eq!(harden_ok(&base_spec()).runsc.network, NetworkMode::None);
        let mut policy = Policy::default();
        policy.network.mode = NetworkMode::Sandbox;
        assert_eq!(
            harden_ok_with(&base_spec(), &policy).runsc.network,
            NetworkMode::Sandbox
        );
    }

    #[test]
    fn annotation_tightens_network_mode() {
        let mut policy = Policy::default();
        policy.network.mode = NetworkMode::Host;
        let mut spec = base_spec();
        spec["annotations"] = json!({"gvisor-hardened.dev/network": "none"});
        assert_eq!(
            harden_ok_with(&spec, &policy).runsc.network,
            NetworkMode::None
        );
    }

    #[test]
    fn nerdctls_published_ports_and_bridge_are_refused_under_network_none() {
        let mut spec = base_spec();
        spec["annotations"] = json!({
            "nerdctl/ports": "[{\"HostPort\":8080,\"ContainerPort\":80,\"Protocol\":\"tcp\",\"HostIP\":\"127.0.0.1\"}]",
            "nerdctl/networks": "[\"bridge\"]"
        });
        let r = rejections(&spec);
        assert_eq!(r.len(), 2, "{r:?}");
        assert!(
            r[0].reason
                .contains("published ports (127.0.0.1:8080->80/tcp)"),
            "{r:?}"
        );
        assert!(
            r[1].reason.contains("network bridge") && r[1].reason.contains("--network none"),
            "{r:?}"
        );
        // `--network none` passes; under network mode sandbox a bridge is what it uses.
        spec["annotations"] = json!({"nerdctl/networks": "[\"none\"]"});
        harden_ok(&spec);
        let mut policy = Policy::default();
        policy.network.mode = NetworkMode::Sandbox;
        spec["annotations"] = json!({"nerdctl/networks": "[\"bridge\"]"});
        harden_ok_with(&spec, &policy);
    }
}
