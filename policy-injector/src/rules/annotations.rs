//! Strips `dev.gvisor.*` annotations (they can override runsc flags and mounts) and reads the
//! `gvisor-hardened.dev/*` annotations through which a workload tightens its own limits. A
//! tightening annotation that is malformed, or looser than the policy, is a rejection: an
//! annotation never loosens the policy, and a typo must not silently leave a limit loose.

use serde_json::Value;

use super::Pass;
use crate::annotations as keys;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};
use crate::quantity::{ByteSize, HumanDuration, MilliCpu};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(ann) = json::opt_object_mut(spec, "annotations", "")? else {
        return Ok(());
    };
    for (k, v) in ann.iter() {
        if !v.is_string() {
            return Err(HardenError::malformed(
                format!("annotations.{k}"),
                "expected a string",
            ));
        }
    }
    let stripped: Vec<String> = ann
        .keys()
        .filter(|k| {
            pass.policy
                .annotations
                .strip_prefixes
                .iter()
                .any(|p| k.starts_with(p.as_str()))
        })
        .cloned()
        .collect();
    for k in stripped {
        let before = ann.shift_remove(&k);
        pass.record(
            Rule::Annotations,
            format!("annotations.{k}"),
            Action::Removed,
            before,
            None,
            "annotation prefix is stripped: it could override runsc flags or mounts",
        );
    }
    // The runtime's own summary of its decisions, an output and no setting: a spec's value (a
    // restart from a record the shim annotated, or a workload's attempt to mislead whoever
    // inspects it) gives way to the one `harden` writes.
    ann.shift_remove(keys::DECISIONS);
    let own: Vec<(String, String)> = ann
        .iter()
        .filter(|(k, _)| k.starts_with(keys::PREFIX))
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect();
    read_tightening(
        own.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        "annotations",
        pass,
    );
    Ok(())
}

/// Checks each `gvisor-hardened.dev/*` annotation and records the valid ones in
/// `pass.tightening`. Other annotations are ignored.
pub(crate) fn read_tightening<'s>(
    pairs: impl Iterator<Item = (&'s str, &'s str)>,
    field_prefix: &str,
    pass: &mut Pass<'_>,
) {
    for (key, value) in pairs {
        let Some(name) = key.strip_prefix(keys::PREFIX) else {
            continue;
        };
        let field = format!("{field_prefix}.{key}");
        if let Err(reason) = tighten_one(name, value, pass) {
            pass.reject(
                Rule::Annotations,
                field,
                format!("annotation {key}={value:?}: {reason}"),
            );
        }
    }
}

fn tighten_one(name: &str, value: &str, pass: &mut Pass<'_>) -> Result<(), String> {
    let policy = pass.policy;
    let looser = |ceiling: String| {
        format!("looser than the policy's {ceiling}; annotations can only tighten")
    };
    match name {
        "memory" => {
            let v = value.parse::<ByteSize>()?;
            if v.0 == 0 {
                return Err("0 bytes leaves nothing to run in".into());
            }
            if v > policy.resources.memory {
                return Err(looser(format!("memory {}", policy.resources.memory)));
            }
            pass.tightening.memory = Some(v.0);
        }
        "cpu" => {
            let v = value.parse::<MilliCpu>()?;
            if v.0 == 0 {
                return Err("0 CPUs leaves nothing to run on".into());
            }
            if v > policy.resources.cpu {
                return Err(looser(format!("cpu {}", policy.resources.cpu)));
            }
            pass.tightening.cpu_millis = Some(v.0);
        }
        "pids" => {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err("expected a whole number of guest processes".into());
            }
            let v: u64 = value.parse().map_err(|_| "value too large".to_string())?;
            if v == 0 {
                return Err("0 processes leaves nothing to run".into());
            }
            if v > policy.resources.processes {
                return Err(looser(format!("processes {}", policy.resources.processes)));
            }
            pass.tightening.pids = Some(v);
        }
        "max-runtime" => {
            let v = value.parse::<HumanDuration>()?;
            if v.0.is_zero() {
                return Err("0 would stop the container at once".into());
            }
            if v > policy.lifetime.max_runtime {
                return Err(looser(format!(
                    "max_runtime {}",
                    policy.lifetime.max_runtime
                )));
            }
            pass.tightening.max_runtime = Some(v.0);
        }
        "idle-timeout" => {
            let v = value.parse::<HumanDuration>()?;
            let min = crate::policy::MIN_IDLE_TIMEOUT;
            if v.0 < min {
                return Err(format!("below the minimum idle timeout {}", HumanDuration(min)));
            }
            // No idle timeout in the policy is the loosest setting: any value tightens it.
            if let Some(ceiling) = policy.lifetime.idle_timeout.filter(|c| v > *c) {
                return Err(looser(format!("idle_timeout {ceiling}")));
            }
            pass.tightening.idle_timeout = Some(v.0);
        }
        "network" => {
            let v: crate::policy::NetworkMode = value.parse()?;
            if v > policy.network.mode {
                return Err(looser(format!(
                    "network mode {}",
                    policy.network.mode.as_str()
                )));
            }
            pass.tightening.network = Some(v);
        }
        "egress" => {
            let wanted = crate::egress::parse_annotation(value)?;
            let policy_list = crate::egress::EgressPlan::from_policy(&policy.network.egress)?
                .map(|p| p.allow)
                .unwrap_or_default();
            crate::egress::check_narrowing(&policy_list, &wanted)?;
            pass.tightening.egress = Some(wanted);
        }
        // The runtime's own summary of what it changed (`annotations::DECISIONS`), in the
        // hardened spec that an engine's `update` hands back: an output, never a setting.
        "decisions" => {}
        // No pool key, on purpose: whether sandboxes are booted ahead of time on a node is the
        // operator's choice ([pool] in the policy), never a pod's.
        other => {
            return Err(format!(
                "unknown {}{other} annotation (known: memory, cpu, pids, max-runtime, idle-timeout, network, egress)",
                keys::PREFIX
            ))
        }
    }
    Ok(())
}

/// Writes (or rewrites) one of our own annotations, creating the map if needed.
pub(crate) fn set_own(
    spec: &mut Object,
    key: &str,
    value: String,
    rule: Rule,
    reason: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let ann = json::ensure_object(spec, "annotations", "")?;
    let new = Value::String(value);
    let before = ann.get(key).cloned();
    if before.as_ref() == Some(&new) {
        return Ok(());
    }
    ann.insert(key.to_string(), new.clone());
    let action = if before.is_some() {
        Action::Set
    } else {
        Action::Added
    };
    pass.record(
        rule,
        format!("annotations.{key}"),
        action,
        before,
        Some(new),
        reason,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use serde_json::json;

    #[test]
    fn dev_gvisor_annotations_are_stripped() {
        let mut spec = base_spec();
        spec["annotations"] = json!({
            "dev.gvisor.flag.network": "host",
            "dev.gvisor.spec.mount.x.share": "shared",
            "io.kubernetes.cri.container-type": "container"
        });
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["annotations"],
            json!({"io.kubernetes.cri.container-type": "container", "gvisor-hardened.dev/pids": "512"})
        );
        assert_eq!(count(&h, Rule::Annotations, Action::Removed), 2);
    }

    #[test]
    fn tightening_annotations_are_applied() {
        let mut spec = base_spec();
        spec["annotations"] = json!({
            "gvisor-hardened.dev/memory": "512Mi",
            "gvisor-hardened.dev/cpu": "500m",
            "gvisor-hardened.dev/pids": "10",
            "gvisor-hardened.dev/max-runtime": "90s",
            "gvisor-hardened.dev/network": "none"
        });
        let h = harden_ok(&spec);
        let res = &h.spec["linux"]["resources"];
        assert_eq!(res["memory"]["limit"], json!(512i64 << 20));
        assert_eq!(res["cpu"]["quota"], json!(50_000));
        assert_eq!(res["pids"]["limit"], json!(32 + 12 * 10));
        assert_eq!(h.lifetime.max_runtime, std::time::Duration::from_secs(90));
    }

    #[test]
    fn looser_annotations_are_rejected_naming_the_annotation() {
        for (key, value) in [
            ("gvisor-hardened.dev/memory", "4Gi"),
            ("gvisor-hardened.dev/cpu", "3"),
            ("gvisor-hardened.dev/pids", "513"),
            ("gvisor-hardened.dev/max-runtime", "2h"),
            ("gvisor-hardened.dev/network", "sandbox"),
        ] {
            let mut spec = base_spec();
            spec["annotations"] = json!({ key: value });
            let r = rejections(&spec);
            assert_eq!(r.len(), 1, "{key}");
            assert_eq!(r[0].rule, Rule::Annotations);
            assert!(
                r[0].reason.contains(key) && r[0].reason.contains("looser"),
                "{}",
                r[0].reason
            );
        }
    }

    #[test]
    fn idle_timeout_annotation_looser_than_the_policy_is_rejected() {
        let mut policy = crate::Policy::default();
        policy.lifetime.idle_timeout = Some("1m".parse().unwrap());
        let mut spec = base_spec();
        spec["annotations"] = json!({ "gvisor-hardened.dev/idle-timeout": "2m" });
        let e = crate::harden(&spec, &policy, &crate::Context::default()).unwrap_err();
        let crate::HardenError::Rejected(r) = &e else {
            panic!("{e}")
        };
        assert!(
            r[0].reason.contains("idle-timeout") && r[0].reason.contains("looser"),
            "{}",
            r[0].reason
        );
    }

    #[test]
    fn malformed_or_unknown_annotations_are_rejected() {
        for (key, value) in [
            ("gvisor-hardened.dev/memory", "lots"),
            ("gvisor-hardened.dev/memory", "0"),
            ("gvisor-hardened.dev/cpu", "-1"),
            ("gvisor-hardened.dev/pids", "1e3"),
            ("gvisor-hardened.dev/pids", "0"),
            ("gvisor-hardened.dev/max-runtime", "forever"),
            ("gvisor-hardened.dev/idle-timeout", "soon"),
            ("gvisor-hardened.dev/idle-timeout", "1s"),
            ("gvisor-hardened.dev/network", "bridge"),
            ("gvisor-hardened.dev/memroy", "1Gi"),
        ] {
            let mut spec = base_spec();
            spec["annotations"] = json!({ key: value });
            let r = rejections(&spec);
            assert_eq!(r.len(), 1, "{key}={value}");
            assert!(r[0].field.ends_with(key), "{}", r[0].field);
        }
    }

    #[test]
    fn a_specs_own_decisions_summary_is_dropped_and_never_refused() {
        // A task started again from containerd's record (which the shim annotated), or a
        // workload that would mislead whoever inspects it: the runtime writes its own.
        let mut spec = base_spec();
        spec["annotations"] = json!({ "gvisor-hardened.dev/decisions": "changed nothing" });
        let h = harden_ok(&spec);
        assert!(h.spec["annotations"]
            .get("gvisor-hardened.dev/decisions")
            .is_none());
    }

    #[test]
    fn an_annotation_cannot_turn_the_pool_on() {
        // The pool is the operator's: only a policy file sets [pool]. There is no pool
        // annotation, so the generic unknown-key rule refuses every spelling of one.
        for (key, value) in [
            ("gvisor-hardened.dev/pool", "on"),
            ("gvisor-hardened.dev/pool-size", "4"),
            ("gvisor-hardened.dev/pool.size", "4"),
            ("gvisor-hardened.dev/pool-memory-limit", "1Gi"),
            ("gvisor-hardened.dev/pool-refill-per-minute", "60"),
        ] {
            let mut spec = base_spec();
            spec["annotations"] = json!({ key: value });
            let r = rejections(&spec);
            assert_eq!(r.len(), 1, "{key}={value}");
            assert_eq!(r[0].rule, Rule::Annotations);
            assert!(r[0].field.ends_with(key), "{}", r[0].field);
            assert!(r[0].reason.contains("unknown"), "{}", r[0].reason);
        }
    }

    #[test]
    fn non_string_annotation_is_malformed() {
        let mut spec = base_spec();
        spec["annotations"] = json!({ "a": 1 });
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { field, .. } if field == "annotations.a"
        ));
    }
}
