//! The entry points: `harden` (a whole spec), `harden_process` (an Exec's process) and
//! `clamp_resources` (an Update's resources); what they take and give is in `types.rs`.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::decision::Decision;
use crate::error::HardenError;
use crate::json::Object;
use crate::policy::{Mode, NetworkMode, Policy};
use crate::rules::{self, Pass};

pub(crate) mod types;
pub use types::*;

fn as_object<'a>(v: &'a Value, what: &str) -> Result<&'a Object, HardenError> {
    v.as_object()
        .ok_or_else(|| HardenError::malformed(what, "expected a JSON object"))
}

/// Applies every rule of the policy to an OCI runtime spec.
///
/// Enforce mode: the rewritten spec, or `HardenError::Rejected` with every rejection found.
/// Audit mode: the input spec unchanged, with what enforce would have changed as decisions and
/// what it would have rejected as `Action::Rejected` decisions.
pub fn harden(spec: &Value, policy: &Policy, ctx: &Context) -> Result<Hardened, HardenError> {
    harden_owned(spec.clone(), policy, ctx)
}

/// [`harden`] for a caller that owns the spec and does not need it afterwards (the shim): the
/// rules rewrite it in place instead of a copy. Same result, byte for byte.
pub fn harden_owned(spec: Value, policy: &Policy, ctx: &Context) -> Result<Hardened, HardenError> {
    // Audit mode answers with the input unchanged (but for runsc's own annotations, below),
    // so only then is a copy kept.
    let original = (policy.mode == Mode::Audit).then(|| spec.clone());
    let Value::Object(mut out) = spec else {
        return Err(HardenError::malformed("spec", "expected a JSON object"));
    };
    let mut pass = Pass::new(policy, ctx);
    pass.asks_privileged = out
        .get("process")
        .and_then(|p| p.pointer("/capabilities/bounding"))
        .and_then(Value::as_array)
        .is_some_and(|caps| caps.iter().any(|c| c == "CAP_SYS_ADMIN"));
    rules::run_spec(&mut out, &mut pass)?;
    let spec = match original {
        None => {
            if !pass.rejections.is_empty() {
                return Err(HardenError::Rejected(pass.rejections));
            }
            Value::Object(out)
        }
        Some(mut original) => {
            strip_runsc_annotations(&mut original, policy);
            original
        }
    };
    let runsc = runsc_flags(&spec, policy, pass.network);
    let egress = pass.egress.filter(|_| policy.mode == Mode::Enforce);
    let staged_git = if policy.mode == Mode::Enforce {
        pass.staged_git
    } else {
        Vec::new()
    };
    Ok(Hardened {
        spec,
        runsc,
        lifetime: pass.lifetime,
        decisions: pass.decisions,
        mode: policy.mode,
        egress,
        staged_git,
    })
}

/// Audit mode runs the workload as written, but under the runsc flags the policy pins (no
/// raw sockets, no host sockets...): the annotations that configure runsc itself
/// (`annotations.strip_prefixes`, `dev.gvisor.*`) are removed anyway, or a current runsc
/// would take `dev.gvisor.flag.host-uds=all` and similar over those flags. The annotations
/// rule's decisions already name each one.
fn strip_runsc_annotations(spec: &mut Value, policy: &Policy) {
    let Some(ann) = spec.get_mut("annotations").and_then(Value::as_object_mut) else {
        return;
    };
    ann.retain(|k, _| {
        !policy
            .annotations
            .strip_prefixes
            .iter()
            .any(|p| k.starts_with(p.as_str()))
    });
}

fn runsc_flags(spec: &Value, policy: &Policy, network: NetworkMode) -> RunscFlags {
    let has_seccomp = !matches!(
        spec.get("linux").and_then(|l| l.get("seccomp")),
        None | Some(Value::Null)
    );
    let root_readonly = spec
        .get("root")
        .and_then(|r| r.get("readonly"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let overlay = match policy.runsc.overlay.as_str() {
        "none" => None,
        "auto" if root_readonly => None,
        "auto" => Some("root:memory".to_string()),
        explicit => Some(explicit.to_string()),
    };
    RunscFlags {
        network,
        oci_seccomp: has_seccomp,
        net_raw: false,
        host_uds: "none".to_string(),
        overlay,
        platform: (!policy.runsc.platform.is_empty()).then(|| policy.runsc.platform.clone()),
        extra: policy.runsc.extra_flags.clone(),
    }
}

/// Applies the process rules (selinux, capabilities, privileges, user, rlimits, environment) to
/// the process of an Exec.
pub fn harden_process(
    process: &Value,
    policy: &Policy,
    ctx: &Context,
) -> Result<HardenedProcess, HardenError> {
    let mut out = as_object(process, "process")?.clone();
    let mut pass = Pass::new(policy, ctx);
    rules::run_process(&mut out, "process", &mut pass)?;
    let egress = pass.egress.take().filter(|_| policy.mode == Mode::Enforce);
    finish(policy, pass, process, Value::Object(out)).map(|(process, decisions)| HardenedProcess {
        process,
        decisions,
        egress,
    })
}

/// Clamps an Update's `LinuxResources` to the policy and to the container's
/// `gvisor-hardened.dev/*` annotations, which can only tighten, measured against what the
/// sandbox was created with (`created`): the pids limit is sized for the platform the create
/// sized it for (never the larger one of another platform), and the memory limit cannot change
/// (gVisor sizes the guest's memory at boot; an update naming none keeps it).
pub fn clamp_resources(
    resources: &Value,
    policy: &Policy,
    annotations: &BTreeMap<String, String>,
    created: &AtCreate,
) -> Result<ClampedResources, HardenError> {
    let mut out = as_object(resources, "resources")?.clone();
    let ctx = Context {
        runsc_platform: created.runsc_platform.clone(),
        ..Context::default()
    };
    let mut pass = Pass::new(policy, &ctx);
    rules::annotations::read_tightening(
        annotations.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        "annotations",
        &mut pass,
    );
    if let Some(at_create) = created.memory_limit {
        rules::resources::keep_unnamed_memory(&mut out, "resources", at_create, &mut pass)?;
    }
    rules::resources::apply_resources(&mut out, "resources", &mut pass)?;
    if let Some(at_create) = created.memory_limit {
        rules::resources::refuse_memory_change(&out, "resources", at_create, &mut pass);
    }
    finish(policy, pass, resources, Value::Object(out)).map(|(resources, decisions)| {
        ClampedResources {
            resources,
            decisions,
        }
    })
}

fn finish(
    policy: &Policy,
    pass: Pass<'_>,
    input: &Value,
    output: Value,
) -> Result<(Value, Vec<Decision>), HardenError> {
    match policy.mode {
        Mode::Enforce if !pass.rejections.is_empty() => Err(HardenError::Rejected(pass.rejections)),
        Mode::Enforce => Ok((output, pass.decisions)),
        Mode::Audit => Ok((input.clone(), pass.decisions)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{Action, Rule};
    use crate::rules::testutil::base_spec;
    use serde_json::json;

    fn audit() -> Policy {
        Policy {
            mode: Mode::Audit,
            ..Policy::default()
        }
    }

    #[test]
    fn a_spec_that_is_not_an_object_is_malformed() {
        for v in [json!([]), json!("x"), json!(null)] {
            let e = harden(&v, &Policy::default(), &Context::default()).unwrap_err();
            assert!(
                matches!(e, HardenError::Malformed { ref field, .. } if field == "spec"),
                "{e}"
            );
        }
    }

    #[test]
    fn enforce_reports_every_rejection_and_names_the_first() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [{"path": "/x"}]});
        spec["linux"]["sysctl"] = json!({"kernel.core_pattern": "|/x"});
        let e = harden(&spec, &Policy::default(), &Context::default()).unwrap_err();
        let HardenError::Rejected(r) = &e else {
            panic!("{e}")
        };
        assert_eq!(r.len(), 2);
        assert_eq!(
            e.to_string(),
            "rejected by policy: hooks: hooks.prestart: 1 prestart hook(s) would run on the host as root, outside the sandbox (+1 more)"
        );
    }

    #[test]
    fn audit_returns_the_input_and_lists_rejections_as_decisions() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [{"path": "/x"}]});
        let h = harden(&spec, &audit(), &Context::default()).unwrap();
        assert_eq!(h.spec, spec);
        assert_eq!(h.mode, Mode::Audit);
        let rejected: Vec<_> = h
            .decisions
            .iter()
            .filter(|d| d.action == Action::Rejected)
            .collect();
        assert_eq!(rejected.len(), 1);
        assert_eq!(rejected[0].rule, Rule::Hooks);
        // What enforce would change is there too.
        assert!(h
            .decisions
            .iter()
            .any(|d| d.rule == Rule::Root && d.action == Action::Set));
        // The flags describe the spec that runs: the unchanged one, which has no seccomp.
        assert!(!h.runsc.oci_seccomp);
    }

    #[test]
    fn audit_mode_still_removes_the_annotations_that_configure_runsc() {
        let mut spec = base_spec();
        spec["annotations"] = json!({
            "dev.gvisor.flag.host-uds": "all",
            "dev.gvisor.internal.seccomp.c": "RuntimeDefault",
            "io.kubernetes.cri.container-type": "container"
        });
        let h = harden(&spec, &audit(), &Context::default()).unwrap();
        assert_eq!(
            h.spec["annotations"],
            json!({"io.kubernetes.cri.container-type": "container"})
        );
        let mut rest = h.spec.clone();
        rest["annotations"] = spec["annotations"].clone();
        assert_eq!(rest, spec, "nothing else changed");
        assert!(h
            .decisions
            .iter()
            .any(|d| d.rule == Rule::Annotations && d.field.contains("host-uds")));
    }

    #[test]
    fn decisions_come_in_rule_order() {
        let mut spec = base_spec();
        spec["annotations"] = json!({"dev.gvisor.x": "1"});
        spec["process"]["selinuxLabel"] = json!("l");
        let h = harden(&spec, &Policy::default(), &Context::default()).unwrap();
        assert!(h.decisions.windows(2).all(|w| w[0].rule <= w[1].rule));
        assert_eq!(h.decisions.first().unwrap().rule, Rule::Annotations);
        assert_eq!(h.decisions.last().unwrap().rule, Rule::Lifetime);
    }

    #[test]
    fn runsc_flags_are_fixed_where_the_policy_leaves_no_choice() {
        let mut policy = Policy::default();
        policy.runsc.platform = "ptrace".into();
        policy
            .runsc
            .extra_flags
            .insert("fdlimit".into(), "4096".into());
        let h = harden(&base_spec(), &policy, &Context::default()).unwrap();
        assert!(!h.runsc.net_raw);
        assert_eq!(h.runsc.host_uds, "none");
        assert_eq!(h.runsc.platform.as_deref(), Some("ptrace"));
        assert_eq!(
            h.runsc.extra.get("fdlimit").map(String::as_str),
            Some("4096")
        );
    }

    #[test]
    fn exec_process_gets_the_process_rules() {
        let process = json!({
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["GITHUB_TOKEN=x"],
            "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "ambient": ["CAP_SYS_ADMIN"]},
            "selinuxLabel": "l",
            "rlimits": [{"type": "RLIMIT_NPROC", "hard": 5, "soft": 5}]
        });
        let h = harden_process(&process, &Policy::default(), &Context::default()).unwrap();
        assert_eq!(h.process["user"], json!({"uid": 65534, "gid": 65534}));
        assert_eq!(
            h.process["capabilities"],
            json!({"bounding": [], "ambient": []})
        );
        assert_eq!(h.process["noNewPrivileges"], json!(true));
        assert!(h.process.get("selinuxLabel").is_none());
        assert_eq!(h.process["rlimits"].as_array().unwrap().len(), 3);
        assert!(h
            .decisions
            .iter()
            .any(|d| d.rule == Rule::Environment && d.action == Action::Reported));
    }

    #[test]
    fn exec_process_in_audit_mode_is_unchanged() {
        let process = json!({"user": {"uid": 0, "gid": 0}, "args": ["sh"]});
        let h = harden_process(&process, &audit(), &Context::default()).unwrap();
        assert_eq!(h.process, process);
        assert!(!h.decisions.is_empty());
    }

    #[test]
    fn update_in_audit_mode_is_unchanged_but_reported() {
        let update = json!({"memory": {"limit": 1i64 << 40}});
        let c = clamp_resources(&update, &audit(), &BTreeMap::new(), &AtCreate::default()).unwrap();
        assert_eq!(c.resources, update);
        assert!(c.decisions.iter().any(|d| d.action == Action::Clamped));
    }
}
