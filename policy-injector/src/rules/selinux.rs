//! `process.selinuxLabel` is removed: runsc refuses to start a spec that carries one.

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

pub(crate) fn apply(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    if !pass.policy.selinux.strip_label {
        return Ok(());
    }
    let label = json::opt_str(process, "selinuxLabel", prefix)?;
    if label.is_some_and(|l| !l.is_empty()) {
        let before = process.shift_remove("selinuxLabel");
        pass.record(
            Rule::Selinux,
            format!("{prefix}.selinuxLabel"),
            Action::Removed,
            before,
            None,
            "runsc fails on an SELinux process label",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use serde_json::json;

    #[test]
    fn selinux_label_is_removed() {
        let mut spec = base_spec();
        spec["process"]["selinuxLabel"] = json!("system_u:system_r:container_t:s0:c1,c2");
        let h = harden_ok(&spec);
        assert!(h.spec["process"].get("selinuxLabel").is_none());
        assert_eq!(count(&h, Rule::Selinux, Action::Removed), 1);
    }

    #[test]
    fn empty_label_is_left_alone() {
        let mut spec = base_spec();
        spec["process"]["selinuxLabel"] = json!("");
        let h = harden_ok(&spec);
        assert_eq!(h.spec["process"]["selinuxLabel"], json!(""));
    }

    #[test]
    fn non_string_label_is_malformed() {
        let mut spec = base_spec();
        spec["process"]["selinuxLabel"] = json!(7);
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "process.selinuxLabel")
        );
    }
}
