//! The root filesystem is mounted read-only; writable space comes from the scratch tmpfs mounts.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(root) = json::opt_object_mut(spec, "root", "")? else {
        return Err(HardenError::malformed(
            "root",
            "missing: a container needs a root filesystem",
        ));
    };
    let readonly = json::opt_bool(root, "readonly", "root")?;
    if pass.policy.root.readonly && readonly != Some(true) {
        root.insert("readonly".into(), Value::Bool(true));
        pass.record(
            Rule::Root,
            "root.readonly",
            Action::Set,
            readonly.map(Value::Bool),
            Some(Value::Bool(true)),
            "the root filesystem is read-only; scratch tmpfs mounts give writable space",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::policy::Policy;
    use serde_json::json;

    #[test]
    fn writable_root_becomes_readonly() {
        let mut spec = base_spec();
        spec["root"]["readonly"] = json!(false);
        let h = harden_ok(&spec);
        assert_eq!(h.spec["root"]["readonly"], json!(true));
        assert_eq!(h.runsc.overlay, None);
    }

    #[test]
    fn missing_readonly_is_added() {
        let h = harden_ok(&base_spec());
        assert_eq!(h.spec["root"], json!({"path": "rootfs", "readonly": true}));
    }

    #[test]
    fn writable_root_allowed_by_policy_gets_a_memory_overlay() {
        let mut policy = Policy::default();
        policy.root.readonly = false;
        let h = harden_ok_with(&base_spec(), &policy);
        assert!(h.spec["root"].get("readonly").is_none());
        assert_eq!(h.runsc.overlay.as_deref(), Some("root:memory"));
    }

    #[test]
    fn missing_root_is_malformed() {
        let mut spec = base_spec();
        spec.as_object_mut().unwrap().remove("root");
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "root")
        );
    }

    #[test]
    fn readonly_of_wrong_type_is_malformed() {
        let mut spec = base_spec();
        spec["root"]["readonly"] = json!("yes");
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "root.readonly")
        );
    }
}
