//! Resources: memory, CPU and pids limits of the sandbox, clamped to the policy's ceilings and
//! to any tighter `gvisor-hardened.dev/*` annotation.
//!
//! - Memory: limit = min(ceiling, annotation, spec); swap = limit (no swap); reservation <= limit.
//! - CPU: quota/period clamped to the ceiling; no quota gives the ceiling over a 100ms period. A
//!   pod's sandbox container also stays within the pod's own CPU limit (the CRI's annotations).
//! - Processes: the guest budget B = min(policy, annotation, spec pids.limit read as a guest
//!   count) becomes `pids.limit = pids_base + per_process * B`, because runsc's own host tasks
//!   live in the same pids cgroup; `per_process` is `pids_per_process_systrap` when the caller
//!   says runsc runs on systrap (`Context::runsc_platform`), else `pids_per_process`. B is written back as an annotation so that hardening a
//!   hardened spec reads the same budget again.
//!
//! `-1` (unlimited) and `0` (unset, for runc) count as "no value"; anything below -1 is garbage
//! and rejected, as is a CPU period the kernel would refuse.
//!
//! The limits only hold in a cgroup runsc creates: `cgroup_path.rs` checks `linux.cgroupsPath`.

use serde_json::Value;

use super::annotations::set_own;
use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

/// The kernel's CFS period bounds, in microseconds.
const PERIOD_MIN: i128 = 1_000;
const PERIOD_MAX: i128 = 1_000_000;
const DEFAULT_PERIOD: i128 = 100_000;

mod cgroup_path;

/// What containerd's CRI writes into a pod sandbox container's spec: the pod's CPU limit as the
/// kubelet computed it (the containers' limits plus the RuntimeClass overhead), which the kubelet
/// has already set on the pod's cgroup.
const CRI_SANDBOX_CPU_QUOTA: &str = "io.kubernetes.cri.sandbox-cpu-quota";
const CRI_SANDBOX_CPU_PERIOD: &str = "io.kubernetes.cri.sandbox-cpu-period";

/// The pod's CPU limit in millicores (rounded down), if the CRI gave one. runsc puts the sandbox
/// in a cgroup under the pod's, and cgroup v1 refuses a child CFS quota above its parent's
/// (EINVAL on cpu.cfs_quota_us, and the pod never starts), so the sandbox's quota must not exceed
/// the pod's: it can only tighten the ceiling, whoever set the annotations.
fn pod_cpu_millis(spec: &Object) -> Option<u64> {
    let annotations = spec.get("annotations")?.as_object()?;
    let read = |key: &str| -> Option<i128> {
        let v: i128 = annotations.get(key)?.as_str()?.parse().ok()?;
        (v > 0).then_some(v)
    };
    let (quota, period) = (read(CRI_SANDBOX_CPU_QUOTA)?, read(CRI_SANDBOX_CPU_PERIOD)?);
    u64::try_from(quota * 1000 / period).ok()
}

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    if let Some(pod) = pod_cpu_millis(spec) {
        let t = &mut pass.tightening.cpu_millis;
        *t = Some(t.map_or(pod, |a| a.min(pod)));
    }
    let linux = json::ensure_object(spec, "linux", "")?;
    cgroup_path::check(linux, pass)?;
    let resources = json::ensure_object(linux, "resources", "linux")?;
    let budget = apply_resources(resources, "linux.resources", pass)?;
    if let Some(b) = budget {
        set_own(
            spec,
            crate::annotations::PIDS,
            b.to_string(),
            Rule::Resources,
            "the guest-process budget behind pids.limit, so re-hardening reads the same budget",
            pass,
        )?;
    }
    Ok(())
}

/// Reads a limit where -1 and 0 mean "none"; below -1 is rejected (`Err(())`).
fn limit_value(v: Option<i128>) -> Result<Option<i128>, ()> {
    match v {
        None | Some(0) | Some(-1) => Ok(None),
        Some(v) if v < -1 => Err(()),
        Some(v) => Ok(Some(v)),
    }
}

/// Writes `key` and records it; `values` is (before, after).
fn write(
    obj: &mut Object,
    (key, field): (&str, String),
    (before, after): (Option<i128>, i128),
    action: Action,
    reason: String,
    pass: &mut Pass<'_>,
) {
    let after_v = Value::from(after as i64);
    obj.insert(key.to_string(), after_v.clone());
    let action = if before.is_none() {
        Action::Added
    } else {
        action
    };
    pass.record(
        Rule::Resources,
        field,
        action,
        before.map(number),
        Some(after_v),
        reason,
    );
}

fn number(v: i128) -> Value {
    if let Ok(i) = i64::try_from(v) {
        Value::from(i)
    } else {
        Value::from(v as u64)
    }
}

/// An update that names no memory limit (none, or containerd's 0 for "unset") keeps the one the
/// sandbox was created with: the clamp would otherwise give it the ceiling, a change the guest
/// cannot see (`refuse_memory_change`). Runs before `apply_resources`.
pub(crate) fn keep_unnamed_memory(
    res: &mut Object,
    path: &str,
    at_create: i64,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    let mem_path = format!("{path}.memory");
    let mem = json::ensure_object(res, "memory", path)?;
    let limit = json::opt_int(mem, "limit", &mem_path)?;
    if matches!(limit, None | Some(0)) {
        write(
            mem,
            ("limit", format!("{mem_path}.limit")),
            (limit, i128::from(at_create)),
            Action::Set,
            format!("an update naming no memory limit keeps the {at_create} bytes the sandbox was created with"),
            pass,
        );
    }
    Ok(())
}

/// The memory limit of a running sandbox cannot change: gVisor sizes the guest's memory when
/// the sandbox boots and `runsc update` only rewrites the host's cgroup, so the workload would
/// go on seeing the old size (a raise it cannot see, or a cut that kills the whole sandbox where
/// the guest's own OOM killer should have acted). Runs after `apply_resources`, on what the
/// clamp made of the request.
pub(crate) fn refuse_memory_change(res: &Object, path: &str, at_create: i64, pass: &mut Pass<'_>) {
    let limit = res
        .get("memory")
        .and_then(|m| m.get("limit"))
        .and_then(Value::as_i64);
    match limit {
        Some(l) if l == at_create => {}
        Some(l) => pass.reject(
            Rule::Resources,
            format!("{path}.memory.limit"),
            format!(
                "the memory limit of a running sandbox cannot change ({at_create} bytes at create, {l} asked): gVisor sizes the guest's memory when the sandbox boots and the workload would not see a new limit; recreate the container with the limit it needs"
            ),
        ),
        // A rejection already left nothing sensible in place.
        None => {}
    }
}

/// Clamps one LinuxResources object. Returns the guest-process budget, or `None` when a
/// rejection left nothing sensible to write.
pub(crate) fn apply_resources(
    res: &mut Object,
    path: &str,
    pass: &mut Pass<'_>,
) -> Result<Option<u64>, HardenError> {
    memory(res, path, pass)?;
    cpu(res, path, pass)?;
    unified(res, path, pass)?;
    pids(res, path, pass)
}

fn memory(res: &mut Object, parent: &str, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let path = format!("{parent}.memory");
    let policy_ceiling = i128::from(pass.policy.resources.memory.0).min(i128::from(i64::MAX));
    let ceiling = pass
        .tightening
        .memory
        .map_or(policy_ceiling, |a| i128::from(a).min(policy_ceiling));
    let mem = json::ensure_object(res, "memory", parent)?;
    let limit = json::opt_int(mem, "limit", &path)?;
    let swap = json::opt_int(mem, "swap", &path)?;
    let reservation = json::opt_int(mem, "reservation", &path)?;
    let mut bad = false;
    for (key, v) in [
        ("limit", limit),
        ("swap", swap),
        ("reservation", reservation),
    ] {
        if limit_value(v).is_err() {
            pass.reject(
                Rule::Resources,
                format!("{path}.{key}"),
                format!("negative memory {key} {}", v.unwrap_or_default()),
            );
            bad = true;
        }
    }
    if bad {
        return Ok(());
    }
    let spec_limit = limit_value(limit).unwrap_or(None);
    let new_limit = spec_limit.map_or(ceiling, |l| l.min(ceiling));
    if limit != Some(new_limit) {
        let reason = match spec_limit {
            None => format!("no memory limit: the ceiling {new_limit} bytes applies"),
            Some(_) => format!("memory limit capped at {new_limit} bytes"),
        };
        write(
            mem,
            ("limit", format!("{path}.limit")),
            (limit, new_limit),
            Action::Clamped,
            reason,
            pass,
        );
    }
    if swap != Some(new_limit) {
        write(
            mem,
            ("swap", format!("{path}.swap")),
            (swap, new_limit),
            Action::Set,
            "memory+swap equals the memory limit: no swap".to_string(),
            pass,
        );
    }
    // A cgroup with the OOM killer off stalls every task at the ceiling instead of killing one:
    // the sandbox hangs (and its runtime with it) rather than exiting with an OOM reported.
    if json::opt_bool(mem, "disableOOMKiller", &path)? == Some(true) {
        mem.insert("disableOOMKiller".into(), Value::Bool(false));
        pass.record(
            Rule::Resources,
            format!("{path}.disableOOMKiller"),
            Action::Set,
            Some(Value::Bool(true)),
            Some(Value::Bool(false)),
            "the OOM killer stays on: at the memory ceiling the sandbox is killed and reported, not stalled",
        );
    }
    if let Some(r) = limit_value(reservation).unwrap_or(None) {
        if r > new_limit {
            write(
                mem,
                ("reservation", format!("{path}.reservation")),
                (reservation, new_limit),
                Action::Clamped,
                "a reservation cannot exceed the limit".to_string(),
                pass,
            );
        }
    }
    Ok(())
}

fn cpu(res: &mut Object, path: &str, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let path_cpu = format!("{path}.cpu");
    let policy_millis = i128::from(pass.policy.resources.cpu.0);
    let millis = pass
        .tightening
        .cpu_millis
        .map_or(policy_millis, |a| i128::from(a).min(policy_millis));
    let cpu = json::ensure_object(res, "cpu", path)?;
    let period = json::opt_int(cpu, "period", &path_cpu)?;
    let quota = json::opt_int(cpu, "quota", &path_cpu)?;
    let mut bad = false;
    let new_period = match period {
        None | Some(0) => DEFAULT_PERIOD,
        Some(p) if (PERIOD_MIN..=PERIOD_MAX).contains(&p) => p,
        Some(p) => {
            pass.reject(Rule::Resources, format!("{path_cpu}.period"),
                format!("CPU period {p} is outside the kernel's range {PERIOD_MIN}..={PERIOD_MAX} microseconds"));
            bad = true;
            DEFAULT_PERIOD
        }
    };
    if limit_value(quota).is_err() {
        pass.reject(
            Rule::Resources,
            format!("{path_cpu}.quota"),
            format!("negative CPU quota {}", quota.unwrap_or_default()),
        );
        bad = true;
    }
    if bad {
        return Ok(());
    }
    let max_quota = (millis * new_period / 1000).min(i128::from(i64::MAX));
    if max_quota < PERIOD_MIN {
        pass.reject(Rule::Resources, format!("{path_cpu}.period"),
            format!("a CPU period of {new_period}us gives a quota of {max_quota}us under the ceiling, below the kernel's 1ms minimum"));
        return Ok(());
    }
    if period != Some(new_period) {
        write(
            cpu,
            ("period", format!("{path_cpu}.period")),
            (period, new_period),
            Action::Set,
            "CFS period for the CPU ceiling".to_string(),
            pass,
        );
    }
    let spec_quota = limit_value(quota).unwrap_or(None);
    let new_quota = spec_quota.map_or(max_quota, |q| q.min(max_quota));
    if quota != Some(new_quota) {
        let reason = format!("CPU quota capped at {millis}m ({new_quota}us per {new_period}us)");
        write(
            cpu,
            ("quota", format!("{path_cpu}.quota")),
            (quota, new_quota),
            Action::Clamped,
            reason,
            pass,
        );
    }
    Ok(())
}

/// cgroup v2 `unified` entries would set memory, CPU or pids limits behind the ceilings' back.
fn unified(res: &mut Object, path: &str, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(unified) = json::opt_object(res, "unified", path)? else {
        return Ok(());
    };
    let refused: Vec<String> = unified
        .keys()
        .filter(|k| {
            ["memory.", "cpu.", "pids.", "cpuset."]
                .iter()
                .any(|p| k.starts_with(p))
        })
        .cloned()
        .collect();
    for k in refused {
        pass.reject(
            Rule::Resources,
            format!("{path}.unified.{k}"),
            format!("cgroup v2 file {k} would bypass the policy's resource ceilings"),
        );
    }
    Ok(())
}

fn pids(res: &mut Object, path: &str, pass: &mut Pass<'_>) -> Result<Option<u64>, HardenError> {
    let path_pids = format!("{path}.pids");
    let p = &pass.policy.resources;
    // systrap runs a guest process on ~2 host tasks, ptrace on ~9: one factor for both would
    // make the budget either ~5x too loose under systrap or crash ptrace sandboxes early.
    let systrap = pass.ctx.runsc_platform.as_deref() == Some("systrap");
    let per_process = if systrap {
        p.pids_per_process_systrap
    } else {
        p.pids_per_process
    };
    let platform = pass.ctx.runsc_platform.as_deref().unwrap_or("ptrace");
    let (base, per) = (i128::from(p.pids_base), i128::from(per_process));
    let mut budget = i128::from(p.processes);
    if let Some(a) = pass.tightening.pids {
        budget = budget.min(i128::from(a));
    }
    let pids = json::ensure_object(res, "pids", path)?;
    let limit = json::opt_int(pids, "limit", &path_pids)?;
    let spec_budget = match limit_value(limit) {
        Ok(v) => v,
        Err(()) => {
            pass.reject(
                Rule::Resources,
                format!("{path_pids}.limit"),
                format!("negative pids limit {}", limit.unwrap_or_default()),
            );
            return Ok(None);
        }
    };
    if let Some(s) = spec_budget {
        budget = budget.min(s);
    }
    let new_limit = (base + per * budget).min(i128::from(i64::MAX));
    if limit != Some(new_limit) {
        let reason = format!(
            "a budget of {budget} guest processes: {base} + {per} host tasks per guest process under runsc on {platform}"
        );
        write(
            pids,
            ("limit", format!("{path_pids}.limit")),
            (limit, new_limit),
            Action::Set,
            reason,
            pass,
        );
    }
    Ok(u64::try_from(budget).ok())
}

#[cfg(test)]
mod tests;
