//! Environment: variable names that look like secrets are reported (by name only: values never
//! reach the audit record) or, if the policy says so, stripped.

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::glob::wildcard_match_ignore_case;
use crate::json::{self, Object};
use crate::policy::SecretEnvAction;

pub(crate) fn apply(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let field = format!("{prefix}.env");
    let Some(env) = json::opt_array_mut(process, "env", prefix)? else {
        return Ok(());
    };
    let policy = pass.policy;
    let patterns = &policy.environment.secret_patterns;
    let strip = policy.environment.action == SecretEnvAction::Strip;
    let mut keep = Vec::with_capacity(env.len());
    for (i, item) in env.iter().enumerate() {
        let Some(s) = item.as_str() else {
            return Err(HardenError::malformed(
                format!("{field}[{i}]"),
                "expected a string",
            ));
        };
        let name = s.split_once('=').map_or(s, |(n, _)| n);
        let hit = patterns
            .iter()
            .find(|p| wildcard_match_ignore_case(p, name));
        match hit {
            Some(pattern) if strip => {
                keep.push(false);
                pass.record(
                    Rule::Environment,
                    format!("{field}[{name}]"),
                    Action::Removed,
                    None,
                    None,
                    format!("variable {name} matches secret pattern {pattern} and is stripped (value not recorded)"),
                );
            }
            Some(pattern) => {
                keep.push(true);
                pass.record(
                    Rule::Environment,
                    format!("{field}[{name}]"),
                    Action::Reported,
                    None,
                    None,
                    format!(
                        "variable {name} matches secret pattern {pattern} (value not recorded)"
                    ),
                );
            }
            None => keep.push(true),
        }
    }
    if strip {
        let mut it = keep.into_iter();
        env.retain(|_| it.next().unwrap_or(true));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use crate::policy::{Policy, SecretEnvAction};
    use serde_json::json;

    fn spec_with_env() -> serde_json::Value {
        let mut spec = base_spec();
        spec["process"]["env"] = json!([
            "PATH=/bin",
            "GITHUB_TOKEN=ghp_verysecretvalue",
            "db_password=hunter2",
            "AWS_SECRET_ACCESS_KEY=abc",
            "NOEQUALS",
            "HOME=/root"
        ]);
        spec
    }

    #[test]
    fn secret_names_are_reported_without_values() {
        let h = harden_ok(&spec_with_env());
        assert_eq!(count(&h, Rule::Environment, Action::Reported), 3);
        let text = serde_json::to_string(&h.decisions).unwrap();
        for value in ["ghp_verysecretvalue", "hunter2", "=abc"] {
            assert!(!text.contains(value), "decision leaks {value}");
        }
        assert_eq!(h.spec["process"]["env"], spec_with_env()["process"]["env"]);
    }

    #[test]
    fn secret_names_are_stripped_when_the_policy_says_so() {
        let mut policy = Policy::default();
        policy.environment.action = SecretEnvAction::Strip;
        let h = harden_ok_with(&spec_with_env(), &policy);
        assert_eq!(
            h.spec["process"]["env"],
            json!(["PATH=/bin", "NOEQUALS", "HOME=/root"])
        );
        let text = serde_json::to_string(&h.decisions).unwrap();
        assert!(!text.contains("hunter2"));
    }

    #[test]
    fn non_string_env_is_malformed() {
        let mut spec = base_spec();
        spec["process"]["env"] = json!([{"A": "b"}]);
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "process.env[0]")
        );
    }
}
