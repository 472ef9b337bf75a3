//! The lifetime the shim enforces: the wall-clock limit and the idle timeout, each the policy's
//! or a shorter one from annotation.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::quantity::HumanDuration;

pub(crate) fn apply(pass: &mut Pass<'_>) {
    let policy_max = pass.policy.lifetime.max_runtime.0;
    let max = pass
        .tightening
        .max_runtime
        .map_or(policy_max, |a| a.min(policy_max));
    pass.lifetime.max_runtime = max;
    pass.lifetime.grace_period = pass.policy.lifetime.grace_period.0;
    let reason = if max == policy_max {
        "the policy's maximum runtime".to_string()
    } else {
        format!(
            "shortened by annotation {}",
            crate::annotations::MAX_RUNTIME
        )
    };
    pass.record(
        Rule::Lifetime,
        "lifetime.max_runtime",
        Action::Set,
        None,
        Some(Value::String(HumanDuration(max).to_string())),
        reason,
    );
    let policy_idle = pass.policy.lifetime.idle_timeout.map(|d| d.0);
    let idle = match (pass.tightening.idle_timeout, policy_idle) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    };
    pass.lifetime.idle_timeout = idle;
    if let Some(idle) = idle {
        let reason = if Some(idle) == policy_idle {
            "the policy's idle timeout".to_string()
        } else {
            format!("set by annotation {}", crate::annotations::IDLE_TIMEOUT)
        };
        pass.record(
            Rule::Lifetime,
            "lifetime.idle_timeout",
            Action::Set,
            None,
            Some(Value::String(HumanDuration(idle).to_string())),
            reason,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use std::time::Duration;

    #[test]
    fn lifetime_defaults_to_the_policy() {
        let h = harden_ok(&base_spec());
        assert_eq!(h.lifetime.max_runtime, Duration::from_secs(3600));
        assert_eq!(h.lifetime.grace_period, Duration::from_secs(10));
        assert_eq!(h.lifetime.idle_timeout, None);
    }

    fn with_idle(policy_idle: Option<&str>, annotation: Option<&str>) -> crate::Hardened {
        let mut policy = crate::Policy::default();
        policy.lifetime.idle_timeout = policy_idle.map(|s| s.parse().unwrap());
        let mut spec = base_spec();
        if let Some(a) = annotation {
            spec["annotations"] = serde_json::json!({ "gvisor-hardened.dev/idle-timeout": a });
        }
        crate::harden(&spec, &policy, &crate::Context::default()).unwrap()
    }

    #[test]
    fn idle_timeout_comes_from_the_policy() {
        let h = with_idle(Some("5m"), None);
        assert_eq!(h.lifetime.idle_timeout, Some(Duration::from_secs(300)));
        assert!(h
            .decisions
            .iter()
            .any(|d| d.field == "lifetime.idle_timeout" && d.reason.contains("policy")));
    }

    #[test]
    fn idle_timeout_annotation_shortens_the_policys() {
        let h = with_idle(Some("5m"), Some("30s"));
        assert_eq!(h.lifetime.idle_timeout, Some(Duration::from_secs(30)));
    }

    #[test]
    fn idle_timeout_annotation_sets_one_where_the_policy_has_none() {
        let h = with_idle(None, Some("1m"));
        assert_eq!(h.lifetime.idle_timeout, Some(Duration::from_secs(60)));
    }
}
