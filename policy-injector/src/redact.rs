//! Secret redaction: environment values never leave the runtime, in audit records or in their
//! exports. The environment rule names variables and never copies a secret's value, but two
//! paths still carried values: its own `set`/`added` decisions for `environment.defaults`
//! (`HOME=/` before, the policy's value after), and whole hook objects removed by the hooks
//! rule, whose `env` lists are the hook's environment. Every `NAME=value` in those places
//! becomes `NAME=<redacted>`: the name stays (what was changed is still auditable), the value
//! does not. The shim's writer applies this before a record is written; `audit export` applies
//! it again to what it reads, for logs written before the writer did.

use serde_json::Value;

use crate::decision::{Decision, Rule};

/// What a redacted value is replaced by.
pub const REDACTED: &str = "<redacted>";

/// `NAME=value` as `NAME=<redacted>`; an entry without `=` is a bare name and stays.
pub fn env_entry(entry: &str) -> String {
    match entry.split_once('=') {
        Some((name, _)) => format!("{name}={REDACTED}"),
        None => entry.to_string(),
    }
}

/// Whether a decision's field is an environment list or one of its entries
/// (`process.env[HOME]`, `process.env`, a hook's `env`): its before/after are env entries.
fn is_env_field(rule: &str, field: &str) -> bool {
    rule == Rule::Environment.as_str()
        || field
            .split('.')
            .any(|seg| seg == "env" || seg.starts_with("env["))
}

/// Redacts in place; true when something changed. `is_env`: `v` is itself an env entry or
/// list. Anywhere below, an array under an `env` key is an env list (OCI `process.env`, a
/// hook's `env`).
fn scrub(v: &mut Value, is_env: bool) -> bool {
    match v {
        Value::String(s) if is_env => {
            let r = env_entry(s);
            let changed = r != *s;
            *s = r;
            changed
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |changed, item| scrub(item, is_env) | changed),
        Value::Object(map) => map.iter_mut().fold(false, |changed, (k, item)| {
            scrub(item, is_env || k == "env") | changed
        }),
        _ => false,
    }
}

/// The decision with its env values redacted, or `None` when it carries none.
pub fn decision(d: &Decision) -> Option<Decision> {
    let is_env = is_env_field(d.rule.as_str(), &d.field);
    let mut out = d.clone();
    let mut changed = false;
    for v in [&mut out.before, &mut out.after].into_iter().flatten() {
        changed |= scrub(v, is_env);
    }
    changed.then_some(out)
}

/// The decisions with env values redacted, or `None` when none carries any (the common case:
/// nothing is copied).
pub fn decisions(ds: &[Decision]) -> Option<Vec<Decision>> {
    let redacted: Vec<Option<Decision>> = ds.iter().map(decision).collect();
    if redacted.iter().all(Option::is_none) {
        return None;
    }
    Some(
        redacted
            .into_iter()
            .zip(ds)
            .map(|(r, d)| r.unwrap_or_else(|| d.clone()))
            .collect(),
    )
}

/// A parsed audit record (any event) with the env values of its decisions redacted; true when
/// something changed.
pub fn record(rec: &mut Value) -> bool {
    let Some(ds) = rec.get_mut("decisions").and_then(Value::as_array_mut) else {
        return false;
    };
    let mut changed = false;
    for d in ds {
        let text = |key: &str| d.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let is_env = is_env_field(&text("rule"), &text("field"));
        for key in ["before", "after"] {
            if let Some(v) = d.get_mut(key) {
                changed |= scrub(v, is_env);
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Action;
    use serde_json::json;

    fn env_decision(before: Option<Value>, after: Option<Value>) -> Decision {
        Decision {
            rule: Rule::Environment,
            field: "process.env[HOME]".into(),
            action: Action::Set,
            before,
            after,
            reason: "defaults".into(),
        }
    }

    #[test]
    fn an_environment_decision_keeps_the_name_and_loses_the_value() {
        let d = env_decision(Some(json!("HOME=/")), Some(json!("HOME=/home/agent")));
        let r = decision(&d).unwrap();
        assert_eq!(r.before, Some(json!("HOME=<redacted>")));
        assert_eq!(r.after, Some(json!("HOME=<redacted>")));
        assert_eq!(r.field, d.field);
    }

    #[test]
    fn a_removed_hook_keeps_its_path_and_loses_its_env_values() {
        let d = Decision {
            rule: Rule::Hooks,
            field: "hooks.prestart".into(),
            action: Action::Removed,
            before: Some(json!([{"path": "/bin/hook", "env": ["API_KEY=planted"]}])),
            after: None,
            reason: "hooks run on the host".into(),
        };
        let r = decision(&d).unwrap();
        assert_eq!(
            r.before,
            Some(json!([{"path": "/bin/hook", "env": ["API_KEY=<redacted>"]}]))
        );
    }

    #[test]
    fn decisions_without_env_values_are_left_alone() {
        let d = Decision {
            rule: Rule::Capabilities,
            field: "process.capabilities.bounding".into(),
            action: Action::Removed,
            before: Some(json!(["CAP_SYS_ADMIN"])),
            after: Some(json!([])),
            reason: "r".into(),
        };
        assert_eq!(decisions(std::slice::from_ref(&d)), None);
        // A reported secret name carries no value in the first place.
        let reported = env_decision(None, None);
        assert_eq!(decision(&reported), None);
    }

    #[test]
    fn a_record_read_back_is_redacted_like_the_writer_redacts() {
        let d = env_decision(Some(json!("HOME=/")), Some(json!("HOME=/secret-home")));
        let mut rec = json!({"event": "create", "decisions": [d]});
        assert!(record(&mut rec));
        let text = rec.to_string();
        assert!(!text.contains("secret-home"), "{text}");
        assert!(text.contains("HOME=<redacted>"), "{text}");
        assert!(!record(&mut rec), "redacting twice changes nothing");
    }
}
