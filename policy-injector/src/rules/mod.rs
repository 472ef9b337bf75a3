//! The rules, one module each, run in a fixed order over one working copy of the spec. Each
//! rule records what it changed as `Decision`s and what it refuses as `Rejection`s; a rule
//! keeps going after a rejection so that one run reports every problem.

pub(crate) mod annotations;
mod capabilities;
mod devices;
mod egress;
mod environment;
mod hooks;
mod lifetime;
mod mounts;
mod namespaces;
mod network;
mod privileges;
pub(crate) mod resources;
mod rlimits;
mod root;
mod scratch;
mod seccomp;
mod seccomp_profile;
mod selinux;
mod sysctls;
mod user;

#[cfg(test)]
pub(crate) mod testutil;

use std::time::Duration;

use serde_json::Value;

use crate::decision::{Action, Decision, Rule};
use crate::egress::{AllowEntry, EgressPlan};
use crate::error::{HardenError, Rejection};
use crate::harden::types::{Context, Lifetime};
use crate::json::{self, Object};
use crate::policy::{NetworkMode, Policy};

/// Limits a workload asked to tighten through `gvisor-hardened.dev/*` annotations, after the
/// annotations rule checked that each is no looser than the policy.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tightening {
    pub memory: Option<u64>,
    pub cpu_millis: Option<u64>,
    pub pids: Option<u64>,
    pub max_runtime: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub network: Option<NetworkMode>,
    /// A narrower egress allowlist (empty: none at all), already checked against the policy.
    pub egress: Option<Vec<AllowEntry>>,
}

/// The state of one run: inputs, the record, and the runtime-side outcomes.
pub(crate) struct Pass<'a> {
    pub policy: &'a Policy,
    pub ctx: &'a Context,
    pub decisions: Vec<Decision>,
    pub rejections: Vec<Rejection>,
    pub tightening: Tightening,
    pub network: NetworkMode,
    pub lifetime: Lifetime,
    pub egress: Option<EgressPlan>,
    /// Git directories the mounts rule staged (`[mounts.workspace] git`).
    pub staged_git: Vec<crate::harden::types::StagedGitDir>,
    /// The spec as given asked for CAP_SYS_ADMIN in its bounding set: what `--privileged` and
    /// `securityContext.privileged` send (with the host's devices). The capabilities rule drops
    /// it silently; the devices rule's refusal then says the container is privileged.
    pub asks_privileged: bool,
}

impl<'a> Pass<'a> {
    pub(crate) fn new(policy: &'a Policy, ctx: &'a Context) -> Self {
        Pass {
            policy,
            ctx,
            decisions: Vec::new(),
            rejections: Vec::new(),
            tightening: Tightening::default(),
            network: policy.network.mode,
            lifetime: Lifetime {
                max_runtime: policy.lifetime.max_runtime.0,
                grace_period: policy.lifetime.grace_period.0,
                idle_timeout: policy.lifetime.idle_timeout.map(|d| d.0),
            },
            egress: None,
            staged_git: Vec::new(),
            asks_privileged: false,
        }
    }

    pub(crate) fn record(
        &mut self,
        rule: Rule,
        field: impl Into<String>,
        action: Action,
        before: Option<Value>,
        after: Option<Value>,
        reason: impl Into<String>,
    ) {
        self.decisions.push(Decision {
            rule,
            field: field.into(),
            action,
            before,
            after,
            reason: reason.into(),
        });
    }

    /// Records a rejection. It also goes into the decisions, where audit mode reports it; in
    /// enforce mode a rejected run returns no decisions at all.
    pub(crate) fn reject(
        &mut self,
        rule: Rule,
        field: impl Into<String>,
        reason: impl Into<String>,
    ) {
        let field = field.into();
        let reason = reason.into();
        self.record(
            rule,
            field.clone(),
            Action::Rejected,
            None,
            None,
            reason.clone(),
        );
        self.rejections.push(Rejection {
            rule,
            field,
            reason,
        });
    }
}

/// Runs every rule on a whole spec, in the documented order.
pub(crate) fn run_spec(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    annotations::apply(spec, pass)?;
    hooks::apply(spec, pass)?;
    if let Some(process) = json::opt_object_mut(spec, "process", "")? {
        selinux::apply(process, "process", pass)?;
    }
    root::apply(spec, pass)?;
    if let Some(process) = json::opt_object_mut(spec, "process", "")? {
        capabilities::apply(process, "process", pass)?;
        privileges::apply(process, "process", pass)?;
        user::apply(process, "process", pass)?;
        rlimits::apply(process, "process", pass)?;
        environment::apply(process, "process", pass)?;
    }
    namespaces::apply(spec, pass)?;
    devices::apply(spec, pass)?;
    sysctls::apply(spec, pass)?;
    scratch::apply(spec, pass)?;
    mounts::apply(spec, pass)?;
    scratch::cap_tmpfs(spec, pass)?;
    resources::apply(spec, pass)?;
    seccomp::apply(spec, pass)?;
    network::apply(pass);
    network::refuse_unreachable(spec, pass);
    egress::apply(spec, pass)?;
    lifetime::apply(pass);
    Ok(())
}

/// The process rules alone, for an Exec.
pub(crate) fn run_process(
    process: &mut Object,
    prefix: &str,
    pass: &mut Pass<'_>,
) -> Result<(), HardenError> {
    selinux::apply(process, prefix, pass)?;
    capabilities::apply(process, prefix, pass)?;
    privileges::apply(process, prefix, pass)?;
    user::apply(process, prefix, pass)?;
    rlimits::apply(process, prefix, pass)?;
    environment::apply(process, prefix, pass)?;
    egress::apply_process(process, prefix, pass)
}
