//! Capabilities: every set keeps only the policy's allowlisted capabilities that the spec asked
//! for in that set; the ambient set is always emptied (runsc drops it after the first exec
//! anyway, and an ambient capability survives execve of unprivileged binaries).

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

const SETS: [&str; 5] = [
    "bounding",
    "effective",
    "inheritable",
    "permitted",
    "ambient",
];

pub(crate) fn apply(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let path = format!("{prefix}.capabilities");
    let Some(caps) = json::opt_object_mut(process, "capabilities", prefix)? else {
        return Ok(());
    };
    for set in SETS {
        let Some(value) = caps.get(set) else { continue };
        let field = format!("{path}.{set}");
        let before = json::str_list(value, &field)?;
        let mut kept: Vec<&str> = Vec::new();
        for cap in &before {
            let allowed =
                set != "ambient" && pass.policy.capabilities.allow.iter().any(|a| a == cap);
            if allowed && !kept.contains(cap) {
                kept.push(cap);
            }
        }
        // kept is an ordered subset of before: equal length means unchanged.
        if kept.len() == before.len() {
            continue;
        }
        let reason = if set == "ambient" {
            "the ambient set is always emptied".to_string()
        } else if kept.is_empty() {
            "no capability in this set is on the policy's allowlist".to_string()
        } else {
            format!("kept only the allowlisted {}", kept.join(", "))
        };
        let after = Value::Array(kept.iter().map(|c| Value::from(*c)).collect());
        let before = caps.insert(set.to_string(), after.clone());
        pass.record(
            Rule::Capabilities,
            field,
            Action::Removed,
            before,
            Some(after),
            reason,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use crate::policy::Policy;
    use serde_json::json;

    fn all_sets(caps: serde_json::Value) -> serde_json::Value {
        json!({"bounding": caps, "effective": caps, "inheritable": caps, "permitted": caps, "ambient": caps})
    }

    #[test]
    fn every_set_is_emptied_by_default() {
        let mut spec = base_spec();
        spec["process"]["capabilities"] =
            all_sets(json!(["CAP_SYS_ADMIN", "CAP_NET_RAW", "CAP_CHOWN"]));
        let h = harden_ok(&spec);
        assert_eq!(h.spec["process"]["capabilities"], all_sets(json!([])));
        assert_eq!(count(&h, Rule::Capabilities, Action::Removed), 5);
    }

    #[test]
    fn caps_only_in_the_ambient_set_are_removed() {
        let mut spec = base_spec();
        spec["process"]["capabilities"] = json!({"ambient": ["CAP_SYS_ADMIN"]});
        let mut policy = Policy::default();
        policy.capabilities.allow = vec!["CAP_SYS_ADMIN".into()];
        let h = harden_ok_with(&spec, &policy);
        assert_eq!(h.spec["process"]["capabilities"], json!({"ambient": []}));
    }

    #[test]
    fn allowlisted_caps_are_kept_only_where_asked() {
        let mut spec = base_spec();
        spec["process"]["capabilities"] = json!({
            "bounding": ["CAP_NET_BIND_SERVICE", "CAP_SYS_ADMIN"],
            "effective": ["CAP_SYS_ADMIN"],
            "ambient": ["CAP_NET_BIND_SERVICE"]
        });
        let mut policy = Policy::default();
        policy.capabilities.allow = vec!["CAP_NET_BIND_SERVICE".into()];
        let h = harden_ok_with(&spec, &policy);
        assert_eq!(
            h.spec["process"]["capabilities"],
            json!({"bounding": ["CAP_NET_BIND_SERVICE"], "effective": [], "ambient": []})
        );
    }

    #[test]
    fn duplicate_caps_collapse() {
        let mut spec = base_spec();
        spec["process"]["capabilities"] = json!({"bounding": ["CAP_KILL", "CAP_KILL"]});
        let mut policy = Policy::default();
        policy.capabilities.allow = vec!["CAP_KILL".into()];
        let h = harden_ok_with(&spec, &policy);
        assert_eq!(
            h.spec["process"]["capabilities"]["bounding"],
            json!(["CAP_KILL"])
        );
    }

    #[test]
    fn non_string_cap_is_malformed() {
        let mut spec = base_spec();
        spec["process"]["capabilities"] = json!({"bounding": [1]});
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "process.capabilities.bounding[0]")
        );
    }
}
