//! Egress: with an allowlist on, every process gets the proxy variables (overriding the spec's,
//! so a workload cannot point its tools around the proxy or at a proxy of its own), the spec
//! gets the forwarder's read-only bind mount, and the result carries the plan the shim runs.
//! The `gvisor-hardened.dev/egress` annotation (read by the annotations rule) only narrows.

use serde_json::Value;

use super::scratch::normalized_destination;
use super::Pass;
use crate::decision::{Action, Rule};
use crate::egress::{
    ca_bundle_host_path, EgressPlan, CA_BUNDLE_IN_SANDBOX, CA_VARS, NO_PROXY_VARS, PROXY_VARS,
    RESERVED_DIR,
};
use crate::error::HardenError;
use crate::json::{self, Object};

/// The policy's plan, or a rejection when the policy was built in code and never validated.
fn policy_plan(pass: &mut Pass<'_>) -> Option<EgressPlan> {
    match EgressPlan::from_policy(&pass.policy.network.egress) {
        Ok(plan) => plan,
        Err(why) => {
            pass.reject(Rule::Egress, "network.egress", why);
            None
        }
    }
}

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(mut plan) = policy_plan(pass) else {
        return Ok(());
    };
    if let Some(narrow) = pass.tightening.egress.take() {
        if narrow.is_empty() {
            pass.record(
                Rule::Egress,
                "egress",
                Action::Removed,
                None,
                None,
                format!(
                    "annotation {} is empty: no egress for this sandbox",
                    crate::annotations::EGRESS
                ),
            );
            return Ok(());
        }
        plan.allow = narrow;
        plan.narrowed = true;
    }
    let mount = plan.forwarder_mount();
    let ca_mount = if plan.credentials.is_empty() {
        None
    } else {
        ca_bundle_source(spec, pass).and_then(|source| plan.ca_bundle_mount(&source))
    };
    if let Some(mounts) = json::opt_array_mut(spec, "mounts", "")? {
        // Our own mounts from an earlier pass are taken out and put back (hardening twice
        // gives the same spec); anything else in the reserved directory is refused.
        mounts.retain(|m| *m != mount && Some(m) != ca_mount.as_ref());
        for (i, m) in mounts.iter().enumerate() {
            let dest = normalized_destination(m, i)?;
            if dest == RESERVED_DIR || dest.starts_with(&format!("{RESERVED_DIR}/")) {
                pass.reject(
                    Rule::Egress,
                    format!("mounts[{dest}]"),
                    format!("{RESERVED_DIR} is reserved for the runtime's egress forwarder"),
                );
            }
        }
    }
    let standalone = spec
        .get("annotations")
        .and_then(|a| a.get(CRI_CONTAINER_TYPE))
        .is_none();
    if let Some(process) = json::opt_object_mut(spec, "process", "")? {
        inject_env(process, "process", &plan, pass)?;
        if standalone {
            await_forwarder(process, &plan, pass)?;
        }
    }
    if !matches!(spec.get("mounts"), Some(Value::Array(_))) {
        spec.insert("mounts".into(), Value::Array(Vec::new()));
    }
    if let Some(Value::Array(mounts)) = spec.get_mut("mounts") {
        mounts.push(mount.clone());
        if let Some(ca) = &ca_mount {
            mounts.push(ca.clone());
        }
    }
    if let Some(ca) = ca_mount {
        pass.record(
            Rule::Egress,
            format!("mounts[{CA_BUNDLE_IN_SANDBOX}]"),
            Action::Added,
            None,
            Some(ca),
            "the node's trust store and this sandbox's CA, read-only: the proxy terminates TLS for hosts it adds a credential to",
        );
    }
    pass.record(
        Rule::Egress,
        format!("mounts[{}]", plan.forwarder.in_sandbox_path),
        Action::Added,
        None,
        Some(mount),
        "the egress forwarder, read-only; started inside with runsc exec",
    );
    let allow: Vec<Value> = plan
        .allow
        .iter()
        .map(|e| Value::String(e.to_string()))
        .collect();
    let why = if plan.narrowed {
        format!(
            "allowlist narrowed by annotation {}",
            crate::annotations::EGRESS
        )
    } else {
        "the policy's egress allowlist".to_string()
    };
    pass.record(
        Rule::Egress,
        "egress.allow",
        Action::Set,
        None,
        Some(Value::Array(allow)),
        why,
    );
    pass.egress = Some(plan);
    Ok(())
}

/// CRI names the pod's sandbox on each of its containers (and on the sandbox container itself).
const CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

/// The host file the shim writes the sandbox's CA bundle to: one per sandbox, shared by a
/// pod's containers. `None` (and a rejection) when the names would not make a plain path.
fn ca_bundle_source(spec: &Object, pass: &mut Pass<'_>) -> Option<String> {
    let sandbox = spec
        .get("annotations")
        .and_then(|a| a.get(CRI_SANDBOX_ID))
        .and_then(Value::as_str)
        .unwrap_or(&pass.ctx.container_id)
        .to_string();
    let namespace = pass.ctx.namespace.clone();
    let plain = |s: &str| !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\0']);
    if !plain(&sandbox) || !plain(&namespace) {
        pass.reject(
            Rule::Egress,
            "network.egress.credentials",
            format!(
                "namespace {namespace:?} or sandbox {sandbox:?} cannot name the CA bundle's file"
            ),
        );
        return None;
    }
    Some(ca_bundle_host_path(&namespace, &sandbox))
}

/// CRI marks every container of a pod; a spec without the mark is its own sandbox (ctr, nerdctl).
const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// A container that is its own sandbox starts its workload at `runsc start`, and the forwarder
/// can only be exec'd after that: the workload could bind the forwarder's port first. Its
/// command is put behind the forwarder binary's `--await-listener`, which waits until the
/// forwarder listens and then becomes the workload. (A pod's sandbox container is started, and
/// its forwarder listening, before any of the pod's workloads exists.)
fn await_forwarder(
    process: &mut Object,
    plan: &EgressPlan,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let launcher = [
        plan.forwarder.in_sandbox_path.clone(),
        AWAIT_FLAG.to_string(),
        plan.listen.to_string(),
        "--".to_string(),
    ];
    let Some(args) = json::opt_array_mut(process, "args", "process")? else {
        return Ok(());
    };
    let already = args.len() > launcher.len()
        && args
            .iter()
            .zip(&launcher)
            .all(|(a, l)| a.as_str() == Some(l.as_str()));
    if already || args.is_empty() {
        return Ok(());
    }
    let before = Value::Array(args.clone());
    for (i, l) in launcher.into_iter().enumerate() {
        args.insert(i, Value::String(l));
    }
    pass.record(
        Rule::Egress,
        "process.args",
        Action::Set,
        Some(before),
        Some(Value::Array(args.clone())),
        "the workload starts once the egress forwarder listens, so it cannot take its port first",
    );
    Ok(())
}

/// The forwarder binary's launcher mode.
const AWAIT_FLAG: &str = "--await-listener";

/// For an Exec: the proxy variables of the policy's plan (an exec cannot narrow; the sandbox's
/// proxy enforces whatever its Create decided).
pub(crate) fn apply_process(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let Some(plan) = policy_plan(pass) else {
        return Ok(());
    };
    inject_env(process, prefix, &plan, pass)?;
    pass.egress = Some(plan);
    Ok(())
}

fn inject_env(
    process: &mut Object,
    prefix: &str,
    plan: &EgressPlan,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    // The user rule keeps a non-root uid from the spec; a workload running as the forwarder's
    // uid could signal or ptrace it without any capability.
    let uid = json::opt_object(process, "user", prefix)?
        .and_then(|u| u.get("uid"))
        .and_then(Value::as_u64);
    if uid == Some(u64::from(plan.forwarder.uid)) {
        pass.reject(
            Rule::Egress,
            format!("{prefix}.user.uid"),
            format!(
                "uid {} is the egress forwarder's; a workload running as it could stop the forwarder",
                plan.forwarder.uid
            ),
        );
    }
    let field = format!("{prefix}.env");
    if json::opt_array(process, "env", prefix)?.is_none() {
        process.insert("env".into(), Value::Array(Vec::new()));
    }
    let Some(env) = json::opt_array_mut(process, "env", prefix)? else {
        return Ok(());
    };
    let ca_env = plan.ca_env();
    let ours = |name: &str| {
        PROXY_VARS.contains(&name)
            || NO_PROXY_VARS.contains(&name)
            || (!ca_env.is_empty() && CA_VARS.contains(&name))
    };
    let mut overridden = Vec::new();
    for (i, item) in env.iter().enumerate() {
        let s = item
            .as_str()
            .ok_or_else(|| HardenError::malformed(format!("{field}[{i}]"), "expected a string"))?;
        let name = s.split_once('=').map_or(s, |(n, _)| n);
        if ours(name) {
            overridden.push(name.to_string());
        }
    }
    env.retain(|v| {
        let s = v.as_str().unwrap_or_default();
        !ours(s.split_once('=').map_or(s, |(n, _)| n))
    });
    for (name, value) in plan.proxy_env().into_iter().chain(ca_env) {
        env.push(Value::String(format!("{name}={value}")));
        // The spec's value is not copied: a proxy URL can carry credentials.
        let reason = if overridden.iter().any(|o| o == name) {
            "overrides the spec's value: egress goes through the runtime's proxy only"
        } else {
            "egress goes through the runtime's proxy"
        };
        pass.record(
            Rule::Egress,
            format!("{field}[{name}]"),
            Action::Set,
            None,
            Some(Value::String(value)),
            reason,
        );
    }
    Ok(())
}
