//! seccomp: a spec without a profile gets the default one (and a spec with one keeps it unless
//! the policy overrides it). runsc applies a spec's profile only with `--oci-seccomp`, which
//! the result sets whenever the final spec has `linux.seccomp`.

use super::seccomp_profile::default_profile;
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
    let existing = json::opt_object(linux, "seccomp", "linux")?.cloned();
    let profile = default_profile(&policy.deny);
    match existing {
        None => {
            linux.insert("seccomp".into(), profile);
            pass.record(
                Rule::Seccomp,
                "linux.seccomp",
                Action::Added,
                None,
                None,
                "no seccomp profile: the default profile is injected",
            );
        }
        Some(current)
            if policy.override_spec && serde_json::Value::Object(current.clone()) != profile =>
        {
            linux.insert("seccomp".into(), profile);
            pass.record(
                Rule::Seccomp,
                "linux.seccomp",
                Action::Set,
                None,
                None,
                "the policy replaces the spec's seccomp profile with the default one",
            );
        }
        Some(_) => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
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
    fn spec_profile_is_kept_and_flagged() {
        let mut spec = base_spec();
        spec["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []});
        let h = harden_ok(&spec);
        assert_eq!(h.spec["linux"]["seccomp"], spec["linux"]["seccomp"]);
        assert!(h.runsc.oci_seccomp);
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
