//! seccomp: a spec without a profile gets the default one. A spec with its own profile keeps
//! it, with the policy's rules put in front of its own (or replaced by the default profile when
//! the policy overrides spec profiles). runsc applies a spec's profile only with
//! `--oci-seccomp`, which the result sets whenever the final spec has `linux.seccomp`.
//!
//! Why in front: runsc applies the first rule that matches a call, so the policy's rules decide
//! every call they cover and the spec's profile can only refuse more. Without this, a spec
//! bringing `{"defaultAction": "SCMP_ACT_ALLOW"}` (`ctr run --seccomp-profile`) switched the
//! whole default profile off (measured: ptrace, unshare(CLONE_NEWUSER) and clone(CLONE_NEWUSER)
//! then succeeded inside the sandbox).

use serde_json::Value;

use super::seccomp_profile::{default_profile, policy_rules};
use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let policy = &pass.policy.seccomp;
    if !policy.inject_default {
        return Ok(());
    }
    let linux = json::ensure_object(spec, "linux", "")?;
    let Some(current) = json::opt_object_mut(linux, "seccomp", "linux")? else {
        linux.insert("seccomp".into(), default_profile(&policy.deny));
        pass.record(
            Rule::Seccomp,
            "linux.seccomp",
            Action::Added,
            None,
            None,
            "no seccomp profile: the default profile is injected",
        );
        return Ok(());
    };
    if policy.override_spec {
        let profile = default_profile(&policy.deny);
        if Value::Object(current.clone()) != profile {
            *current = match profile {
                Value::Object(o) => o,
                _ => unreachable!("the default profile is an object"),
            };
            pass.record(
                Rule::Seccomp,
                "linux.seccomp",
                Action::Set,
                None,
                None,
                "the policy replaces the spec's seccomp profile with the default one",
            );
        }
        return Ok(());
    }
    let rules = policy_rules(&policy.deny);
    let own = match current.get_mut("syscalls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => {
            // Already hardened (the same rules lead the list): nothing to do, so re-hardening
            // a hardened spec changes nothing.
            if list.len() >= rules.len() && list[..rules.len()] == rules[..] {
                return Ok(());
            }
            std::mem::take(list)
        }
        Some(_) => {
            return Err(HardenError::malformed(
                "linux.seccomp.syscalls",
                "must be a list of rules",
            ))
        }
    };
    let added = rules.len();
    let mut merged = rules;
    merged.extend(own);
    current.insert("syscalls".into(), Value::Array(merged));
    pass.record(
        Rule::Seccomp,
        "linux.seccomp.syscalls",
        Action::Set,
        None,
        None,
        format!(
            "the policy's {added} seccomp rules are put before the spec's own: runsc applies the first matching rule, so the spec's profile can refuse more but not allow what the policy refuses"
        ),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::seccomp_profile::policy_rules;
    use super::super::testutil::*;
    use crate::decision::Action;
    use crate::policy::Policy;
    use serde_json::json;

    #[test]
    fn default_profile_is_injected_and_flagged() {
        let h = harden_ok(&base_spec());
        assert_eq!(
            h.spec["linux"]["seccomp"]["defaultAction"],
            "SCMP_ACT_ALLOW"
        );
        assert!(h.runsc.oci_seccomp);
    }

    #[test]
    fn spec_profile_keeps_its_rules_behind_the_policys() {
        let mut spec = base_spec();
        let own = json!({"names": ["read"], "action": "SCMP_ACT_ALLOW"});
        spec["linux"]["seccomp"] =
            json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [own.clone()]});
        let h = harden_ok(&spec);
        let profile = &h.spec["linux"]["seccomp"];
        assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
        let rules = profile["syscalls"].as_array().unwrap();
        let policy = policy_rules(&Policy::default().seccomp.deny);
        assert_eq!(rules[..policy.len()], policy[..]);
        assert_eq!(rules[policy.len()..], [own]);
        assert!(h.runsc.oci_seccomp);
        assert!(h
            .decisions
            .iter()
            .any(|d| d.field == "linux.seccomp.syscalls" && d.action == Action::Set));
    }

    #[test]
    fn an_allow_everything_spec_profile_still_refuses_what_the_policy_refuses() {
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW"});
        let h = harden_ok(&spec);
        let rules = h.spec["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        assert!(rules[0]["names"]
            .as_array()
            .unwrap()
            .contains(&json!("ptrace")));
        assert_eq!(rules[0]["action"], "SCMP_ACT_ERRNO");
    }

    #[test]
    fn a_spec_rule_allowing_a_denied_call_comes_after_the_denial() {
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["ptrace"], "action": "SCMP_ACT_ALLOW"}]
        });
        let h = harden_ok(&spec);
        let rules = h.spec["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        let first_for_ptrace = rules
            .iter()
            .find(|r| r["names"].as_array().unwrap().contains(&json!("ptrace")))
            .unwrap();
        assert_eq!(first_for_ptrace["action"], "SCMP_ACT_ERRNO");
    }

    #[test]
    fn rehardening_a_merged_profile_changes_nothing() {
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []});
        let once = harden_ok(&spec);
        let twice = harden_ok(&once.spec);
        assert_eq!(once.spec, twice.spec);
        assert!(!twice
            .decisions
            .iter()
            .any(|d| d.rule == crate::decision::Rule::Seccomp));
    }

    #[test]
    fn spec_syscalls_of_wrong_type_are_malformed() {
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": "all"});
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { field, .. } if field == "linux.seccomp.syscalls"
        ));
    }

    #[test]
    fn policy_can_override_a_spec_profile() {
        let mut policy = Policy::default();
        policy.seccomp.override_spec = true;
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW"});
        let h = harden_ok_with(&spec, &policy);
        assert!(
            h.spec["linux"]["seccomp"]["syscalls"]
                .as_array()
                .unwrap()
                .len()
                >= 4
        );
    }

    #[test]
    fn no_injection_means_no_oci_seccomp_flag() {
        let mut policy = Policy::default();
        policy.seccomp.inject_default = false;
        let h = harden_ok_with(&base_spec(), &policy);
        assert!(h.spec["linux"].get("seccomp").is_none());
        assert!(!h.runsc.oci_seccomp);
    }

    #[test]
    fn seccomp_of_wrong_type_is_malformed() {
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!("unconfined");
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { .. }
        ));
    }
}
