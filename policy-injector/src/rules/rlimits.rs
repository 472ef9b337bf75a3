//! rlimits: NOFILE, FSIZE and CORE get ceilings (a lower value is kept, a missing one added);
//! RLIMIT_NPROC is removed, because runsc applies it to the sandbox's own host tasks and
//! crossing it crashes the whole sandbox. The process ceiling is the pids limit instead.

use serde_json::{json, Value};

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::{HardenError, Rejection};
use crate::json::{self, Object};

struct Entry {
    kind: String,
    hard: u64,
    soft: u64,
}

fn parse(v: &Value, field: &str) -> Result<Entry, HardenError> {
    let obj = v
        .as_object()
        .ok_or_else(|| HardenError::malformed(field, "expected an object"))?;
    let kind = json::opt_str(obj, "type", field)?
        .ok_or_else(|| HardenError::malformed(format!("{field}.type"), "missing"))?
        .to_string();
    Ok(Entry {
        kind,
        hard: json::opt_u64(obj, "hard", field)?.unwrap_or(0),
        soft: json::opt_u64(obj, "soft", field)?.unwrap_or(0),
    })
}

pub(crate) fn apply(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let path = format!("{prefix}.rlimits");
    let p = &pass.policy.rlimits;
    let ceilings = [
        ("RLIMIT_NOFILE", p.nofile),
        ("RLIMIT_FSIZE", p.fsize.0),
        ("RLIMIT_CORE", p.core.0),
    ];
    let remove_nproc = p.remove_nproc;
    let list = match json::opt_array_mut(process, "rlimits", prefix)? {
        Some(list) => list,
        None => {
            process.insert("rlimits".into(), Value::Array(Vec::new()));
            json::opt_array_mut(process, "rlimits", prefix)?.expect("just inserted")
        }
    };
    let mut entries = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        entries.push(parse(v, &format!("{path}[{i}]"))?);
    }
    let mut rejections = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if entries[..i].iter().any(|o| o.kind == e.kind) {
            rejections.push(Rejection {
                rule: Rule::Rlimits,
                field: format!("{path}[{}]", e.kind),
                reason: format!(
                    "{} is set twice; runtimes must refuse duplicate rlimits",
                    e.kind
                ),
            });
        }
    }
    if !rejections.is_empty() {
        for r in rejections {
            pass.reject(r.rule, r.field, r.reason);
        }
        return Ok(());
    }
    let mut decisions = Vec::new();
    // Walk backwards so removals keep the earlier indexes valid.
    for i in (0..entries.len()).rev() {
        let e = &entries[i];
        let field = format!("{path}[{}]", e.kind);
        if e.kind == "RLIMIT_NPROC" && remove_nproc {
            let before = list.remove(i);
            decisions.push((field, Action::Removed, Some(before), None,
                "runsc applies RLIMIT_NPROC to the sandbox's own host tasks and crashes the sandbox at the limit; the pids limit caps processes instead".to_string()));
            continue;
        }
        if let Some((_, ceiling)) = ceilings.iter().find(|(k, _)| *k == e.kind) {
            let hard = e.hard.min(*ceiling);
            let soft = e.soft.min(hard);
            if (hard, soft) != (e.hard, e.soft) {
                let before = list[i].clone();
                let obj = list[i].as_object_mut().expect("parsed as an object");
                obj.insert("hard".into(), Value::from(hard));
                obj.insert("soft".into(), Value::from(soft));
                decisions.push((
                    field,
                    Action::Clamped,
                    Some(before),
                    Some(list[i].clone()),
                    format!("{} is capped at {ceiling}", e.kind),
                ));
            }
        }
    }
    decisions.reverse();
    for (kind, ceiling) in ceilings {
        if !entries.iter().any(|e| e.kind == kind) {
            let entry = json!({"type": kind, "hard": ceiling, "soft": ceiling});
            list.push(entry.clone());
            decisions.push((
                format!("{path}[{kind}]"),
                Action::Added,
                None,
                Some(entry),
                format!("{kind} was unlimited; the policy caps it at {ceiling}"),
            ));
        }
    }
    for (field, action, before, after, reason) in decisions {
        pass.record(Rule::Rlimits, field, action, before, after, reason);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::Rule;
    use serde_json::json;

    fn limits(h: &crate::Hardened) -> serde_json::Value {
        h.spec["process"]["rlimits"].clone()
    }

    #[test]
    fn missing_rlimits_get_the_ceilings() {
        let h = harden_ok(&base_spec());
        assert_eq!(
            limits(&h),
            json!([
                {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                {"type": "RLIMIT_FSIZE", "hard": 1u64 << 30, "soft": 1u64 << 30},
                {"type": "RLIMIT_CORE", "hard": 0, "soft": 0}
            ])
        );
    }

    #[test]
    fn huge_limits_are_clamped_and_lower_ones_kept() {
        let mut spec = base_spec();
        spec["process"]["rlimits"] = json!([
            {"type": "RLIMIT_NOFILE", "hard": u64::MAX, "soft": 1048576},
            {"type": "RLIMIT_FSIZE", "hard": 4096, "soft": 1024},
            {"type": "RLIMIT_CORE", "hard": 100, "soft": 100},
            {"type": "RLIMIT_STACK", "hard": 8388608, "soft": 8388608}
        ]);
        let h = harden_ok(&spec);
        assert_eq!(
            limits(&h),
            json!([
                {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                {"type": "RLIMIT_FSIZE", "hard": 4096, "soft": 1024},
                {"type": "RLIMIT_CORE", "hard": 0, "soft": 0},
                {"type": "RLIMIT_STACK", "hard": 8388608, "soft": 8388608}
            ])
        );
    }

    #[test]
    fn soft_above_hard_is_lowered() {
        let mut spec = base_spec();
        spec["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": 100, "soft": 5000}]);
        let h = harden_ok(&spec);
        assert_eq!(
            limits(&h)[0],
            json!({"type": "RLIMIT_NOFILE", "hard": 100, "soft": 100})
        );
    }

    #[test]
    fn nproc_is_removed_not_clamped() {
        let mut spec = base_spec();
        spec["process"]["rlimits"] = json!([{"type": "RLIMIT_NPROC", "hard": 10, "soft": 10}]);
        let h = harden_ok(&spec);
        assert!(limits(&h)
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["type"] != "RLIMIT_NPROC"));
    }

    #[test]
    fn duplicate_rlimit_is_rejected() {
        let mut spec = base_spec();
        spec["process"]["rlimits"] = json!([
            {"type": "RLIMIT_NOFILE", "hard": 10, "soft": 10},
            {"type": "RLIMIT_NOFILE", "hard": 99999, "soft": 99999}
        ]);
        let r = rejections(&spec);
        assert_eq!(
            (r[0].rule, r[0].field.as_str()),
            (Rule::Rlimits, "process.rlimits[RLIMIT_NOFILE]")
        );
    }

    #[test]
    fn negative_or_untyped_rlimits_are_malformed() {
        for bad in [
            json!([{"type": "RLIMIT_NOFILE", "hard": -1, "soft": 0}]),
            json!([{"hard": 1}]),
            json!("x"),
        ] {
            let mut spec = base_spec();
            spec["process"]["rlimits"] = bad;
            assert!(matches!(
                harden_err(&spec),
                crate::HardenError::Malformed { .. }
            ));
        }
    }
}
