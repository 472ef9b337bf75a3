//! The wall-clock lifetime the shim enforces: the policy's, or a shorter one from annotation.

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
    }
}
