//! `noNewPrivileges`: setuid binaries and file capabilities never elevate the process.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

pub(crate) fn apply(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    if !pass.policy.privileges.no_new_privileges {
        return Ok(());
    }
    let current = json::opt_bool(process, "noNewPrivileges", prefix)?;
    if current != Some(true) {
        process.insert("noNewPrivileges".into(), Value::Bool(true));
        pass.record(
            Rule::Privileges,
            format!("{prefix}.noNewPrivileges"),
            Action::Set,
            current.map(Value::Bool),
            Some(Value::Bool(true)),
            "setuid binaries and file capabilities must not elevate privileges",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use serde_json::json;

    #[test]
    fn no_new_privileges_is_set_when_false_or_missing() {
        for value in [json!(false), json!(null)] {
            let mut spec = base_spec();
            spec["process"]["noNewPrivileges"] = value;
            let h = harden_ok(&spec);
            assert_eq!(h.spec["process"]["noNewPrivileges"], json!(true));
        }
    }

    #[test]
    fn no_new_privileges_of_wrong_type_is_malformed() {
        let mut spec = base_spec();
        spec["process"]["noNewPrivileges"] = json!("false");
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { .. }
        ));
    }
}
