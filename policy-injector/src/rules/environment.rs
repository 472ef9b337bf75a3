//! Environment: the policy's defaults are given to a process that does not set them, and
//! variable names that look like secrets are reported (by name only: values never reach the
//! audit record) or, if the policy says so, stripped.

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
    let policy = pass.policy;
    if !policy.environment.defaults.is_empty() && !process.contains_key("env") {
        process.insert("env".into(), serde_json::Value::Array(Vec::new()));
    }
    let Some(env) = json::opt_array_mut(process, "env", prefix)? else {
        return Ok(());
    };
    add_defaults(env, &field, pass)?;
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

/// Docker and Podman set `HOME=/` for a uid without an entry in the image's passwd (the
/// developer's uid in a coding agent's image): pip's cache is then off and git has no global
/// config, so that value counts as unset.
const UNSET_HOME: &str = "HOME=/";

fn add_defaults(
    env: &mut Vec<serde_json::Value>,
    field: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let policy = pass.policy;
    for (name, value) in &policy.environment.defaults {
        let prefix = format!("{name}=");
        let mut present = None;
        for (i, item) in env.iter().enumerate() {
            let s = item.as_str().ok_or_else(|| {
                HardenError::malformed(format!("{field}[{i}]"), "expected a string")
            })?;
            if s.starts_with(&prefix) {
                present = Some((i, s == UNSET_HOME));
            }
        }
        let entry = serde_json::Value::String(format!("{name}={value}"));
        match present {
            Some((_, false)) => {}
            Some((i, true)) => {
                let before = std::mem::replace(&mut env[i], entry.clone());
                pass.record(
                    Rule::Environment,
                    format!("{field}[{name}]"),
                    Action::Set,
                    Some(before),
                    Some(entry),
                    "HOME=/ is what the engine sets for a uid it cannot find: environment.defaults gives the agent its home",
                );
            }
            None => {
                env.push(entry.clone());
                pass.record(
                    Rule::Environment,
                    format!("{field}[{name}]"),
                    Action::Added,
                    None,
                    Some(entry),
                    "not set by the spec: environment.defaults",
                );
            }
        }
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

    fn policy_with_defaults() -> Policy {
        let mut policy = Policy::default();
        policy.environment.defaults = [
            ("HOME".to_string(), "/home/agent".to_string()),
            (
                "GIT_CONFIG_GLOBAL".to_string(),
                "/home/agent/.config/gitconfig".to_string(),
            ),
        ]
        .into_iter()
        .collect();
        policy
    }

    #[test]
    fn defaults_fill_what_the_spec_leaves_unset_and_the_engines_home_of_slash() {
        let mut spec = base_spec();
        spec["process"]["env"] = json!(["PATH=/bin", "HOME=/"]);
        let h = harden_ok_with(&spec, &policy_with_defaults());
        assert_eq!(
            h.spec["process"]["env"],
            json!([
                "PATH=/bin",
                "HOME=/home/agent",
                "GIT_CONFIG_GLOBAL=/home/agent/.config/gitconfig"
            ])
        );
        assert_eq!(count(&h, Rule::Environment, Action::Set), 1);
        assert_eq!(count(&h, Rule::Environment, Action::Added), 1);
    }

    #[test]
    fn a_value_the_spec_sets_is_kept() {
        let mut spec = base_spec();
        spec["process"]["env"] = json!(["HOME=/srv/me", "GIT_CONFIG_GLOBAL=/x"]);
        let h = harden_ok_with(&spec, &policy_with_defaults());
        assert_eq!(
            h.spec["process"]["env"],
            json!(["HOME=/srv/me", "GIT_CONFIG_GLOBAL=/x"])
        );
    }

    #[test]
    fn an_exec_without_env_gets_the_defaults_too() {
        let process = json!({"args": ["git", "status"], "cwd": "/"});
        let h = crate::harden::harden_process(
            &process,
            &policy_with_defaults(),
            &crate::harden::types::Context::default(),
        )
        .unwrap();
        let env = h.process["env"].as_array().unwrap();
        assert!(env.contains(&json!("HOME=/home/agent")), "{env:?}");
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
