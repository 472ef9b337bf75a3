//! OCI hooks run on the host, as root, outside the sandbox: a spec with any is rejected.

use super::Pass;
use crate::decision::Rule;
use crate::error::HardenError;
use crate::json::{self, Object};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    if !pass.policy.hooks.reject {
        return Ok(());
    }
    let Some(hooks) = json::opt_object(spec, "hooks", "")? else {
        return Ok(());
    };
    let mut found = Vec::new();
    for (stage, _) in hooks.iter() {
        let list = json::opt_array(hooks, stage, "hooks")?;
        let n = list.map_or(0, Vec::len);
        if n > 0 {
            found.push((stage.clone(), n));
        }
    }
    for (stage, n) in found {
        pass.reject(
            Rule::Hooks,
            format!("hooks.{stage}"),
            format!("{n} {stage} hook(s) would run on the host as root, outside the sandbox"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::Rule;
    use crate::policy::Policy;
    use serde_json::json;

    #[test]
    fn any_hook_is_rejected() {
        for stage in [
            "prestart",
            "createRuntime",
            "createContainer",
            "startContainer",
            "poststart",
            "poststop",
        ] {
            let mut spec = base_spec();
            spec["hooks"] = json!({ stage: [{"path": "/usr/bin/evil"}] });
            let r = rejections(&spec);
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].rule, r[0].field.as_str()),
                (Rule::Hooks, format!("hooks.{stage}").as_str())
            );
        }
    }

    #[test]
    fn empty_hook_lists_pass_unchanged() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [], "poststop": null});
        let h = harden_ok(&spec);
        assert_eq!(h.spec["hooks"], json!({"prestart": [], "poststop": null}));
    }

    #[test]
    fn hooks_pass_when_the_policy_allows_them() {
        let mut policy = Policy::default();
        policy.hooks.reject = false;
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [{"path": "/bin/true"}]});
        harden_ok_with(&spec, &policy);
    }

    #[test]
    fn hooks_of_the_wrong_type_are_malformed() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": "x"});
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { .. }
        ));
    }
}
