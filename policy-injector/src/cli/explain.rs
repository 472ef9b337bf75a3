//! `explain`: what the policy does to a spec, grouped by rule, for a person or as JSON.

use serde_json::{json, Value};

use policy_injector::quantity::HumanDuration;
use policy_injector::{
    harden, Action, Context, Decision, HardenError, Mode, Policy, Rule, RunscFlags,
};

pub struct Report {
    policy_mode: Mode,
    decisions: Vec<Decision>,
    /// The enforce-mode outcome when the spec is accepted.
    accepted: Option<(RunscFlags, policy_injector::Lifetime)>,
}

/// Runs the policy in audit mode (so every change and every rejection is listed) and in
/// enforce mode (for the runsc flags and lifetime of an accepted spec).
pub fn explain(spec: &Value, policy: &Policy, ctx: &Context) -> Result<Report, HardenError> {
    let mut audit = policy.clone();
    audit.mode = Mode::Audit;
    let audited = harden(spec, &audit, ctx)?;
    let mut enforce = policy.clone();
    enforce.mode = Mode::Enforce;
    let accepted = match harden(spec, &enforce, ctx) {
        Ok(h) => Some((h.runsc, h.lifetime)),
        Err(HardenError::Rejected(_)) => None,
        Err(e) => return Err(e),
    };
    Ok(Report {
        policy_mode: policy.mode,
        decisions: audited.decisions,
        accepted,
    })
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Audit => "audit",
    }
}

/// The runsc flags as the command-line arguments they stand for.
pub fn runsc_args(f: &RunscFlags) -> Vec<String> {
    let mut args = vec![format!("--network={}", f.network.as_str())];
    if f.oci_seccomp {
        args.push("--oci-seccomp".into());
    }
    args.push(format!("--net-raw={}", f.net_raw));
    args.push(format!("--host-uds={}", f.host_uds));
    if let Some(o) = &f.overlay {
        args.push(format!("--overlay2={o}"));
    }
    if let Some(p) = &f.platform {
        args.push(format!("--platform={p}"));
    }
    for (k, v) in &f.extra {
        args.push(format!("--{k}={v}"));
    }
    args
}

impl Report {
    fn rejections(&self) -> impl Iterator<Item = &Decision> {
        self.decisions
            .iter()
            .filter(|d| d.action == Action::Rejected)
    }

    fn verdict(&self) -> &'static str {
        match (self.accepted.is_some(), self.policy_mode) {
            (true, _) => "accepted",
            (false, Mode::Enforce) => "rejected",
            (false, Mode::Audit) => "would be rejected (audit mode: runs unchanged)",
        }
    }

    pub fn to_json(&self) -> Value {
        let mut by_rule = serde_json::Map::new();
        for rule in Rule::ALL {
            let ds: Vec<&Decision> = self.decisions.iter().filter(|d| d.rule == rule).collect();
            if !ds.is_empty() {
                by_rule.insert(rule.to_string(), json!(ds));
            }
        }
        json!({
            "policy_mode": mode_name(self.policy_mode),
            "verdict": if self.accepted.is_some() { "accepted" } else { "rejected" },
            "rejections": self.rejections().collect::<Vec<_>>(),
            "runsc_args": self.accepted.as_ref().map(|(f, _)| runsc_args(f)),
            "lifetime": self.accepted.as_ref().map(|(_, l)| json!({
                "max_runtime": HumanDuration(l.max_runtime).to_string(),
                "grace_period": HumanDuration(l.grace_period).to_string(),
                "idle_timeout": l.idle_timeout.map(|d| HumanDuration(d).to_string()),
            })),
            "rules": by_rule,
        })
    }

    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let n_rej = self.rejections().count();
        out.push_str(&format!("policy mode: {}\n", mode_name(self.policy_mode)));
        out.push_str(&format!("verdict: {}", self.verdict()));
        if n_rej > 0 {
            out.push_str(&format!(" ({n_rej} rejection(s))"));
        }
        out.push('\n');
        if let Some((flags, lifetime)) = &self.accepted {
            out.push_str(&format!("runsc flags: {}\n", runsc_args(flags).join(" ")));
            out.push_str(&format!(
                "lifetime: max {}, grace {}",
                HumanDuration(lifetime.max_runtime),
                HumanDuration(lifetime.grace_period)
            ));
            if let Some(idle) = lifetime.idle_timeout {
                out.push_str(&format!(", idle {}", HumanDuration(idle)));
            }
            out.push('\n');
        }
        for rule in Rule::ALL {
            let ds: Vec<&Decision> = self.decisions.iter().filter(|d| d.rule == rule).collect();
            if ds.is_empty() {
                continue;
            }
            out.push_str(&format!("\n[{rule}]\n"));
            for d in ds {
                let action = if d.action == Action::Rejected {
                    "REJECTED".to_string()
                } else {
                    d.action.to_string()
                };
                out.push_str(&format!("  {action:<9}{}: {}\n", d.field, d.reason));
                let short = |v: &Option<Value>| {
                    v.as_ref().map(|v| {
                        let s = v.to_string();
                        if s.len() > 100 {
                            format!(
                                "{}...",
                                &s[..s.char_indices().nth(97).map_or(s.len(), |(i, _)| i)]
                            )
                        } else {
                            s
                        }
                    })
                };
                match (short(&d.before), short(&d.after)) {
                    (Some(b), Some(a)) => out.push_str(&format!("           {b} -> {a}\n")),
                    (None, Some(a)) => out.push_str(&format!("           -> {a}\n")),
                    (Some(b), None) => out.push_str(&format!("           was {b}\n")),
                    (None, None) => {}
                }
            }
        }
        out
    }
}
