//! The runsc network mode: the policy's, or a tighter one a workload asked for.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};

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
}
