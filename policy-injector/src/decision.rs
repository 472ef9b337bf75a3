//! The audit record: one `Decision` per change, report or rejection a rule makes.

use serde::Serialize;

/// The rules, in the order `harden` runs them. The order is part of the contract: decisions
/// come out in rule order, and later rules see what earlier ones did (scratch tmpfs mounts are
/// in place before the mounts rule adds nosuid/nodev everywhere, for instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    Annotations,
    Hooks,
    Selinux,
    Root,
    Capabilities,
    Privileges,
    User,
    Rlimits,
    Environment,
    Namespaces,
    Devices,
    Sysctls,
    Scratch,
    Mounts,
    Resources,
    Seccomp,
    Network,
    Egress,
    Lifetime,
}

impl Rule {
    /// Every rule in execution order.
    pub const ALL: [Rule; 19] = [
        Rule::Annotations,
        Rule::Hooks,
        Rule::Selinux,
        Rule::Root,
        Rule::Capabilities,
        Rule::Privileges,
        Rule::User,
        Rule::Rlimits,
        Rule::Environment,
        Rule::Namespaces,
        Rule::Devices,
        Rule::Sysctls,
        Rule::Scratch,
        Rule::Mounts,
        Rule::Resources,
        Rule::Seccomp,
        Rule::Network,
        Rule::Egress,
        Rule::Lifetime,
    ];

    /// The kebab-case name used in decisions, errors and the policy reference.
    pub fn as_str(self) -> &'static str {
        match self {
            Rule::Annotations => "annotations",
            Rule::Hooks => "hooks",
            Rule::Selinux => "selinux",
            Rule::Root => "root",
            Rule::Capabilities => "capabilities",
            Rule::Privileges => "privileges",
            Rule::User => "user",
            Rule::Rlimits => "rlimits",
            Rule::Environment => "environment",
            Rule::Namespaces => "namespaces",
            Rule::Devices => "devices",
            Rule::Sysctls => "sysctls",
            Rule::Scratch => "scratch",
            Rule::Mounts => "mounts",
            Rule::Resources => "resources",
            Rule::Seccomp => "seccomp",
            Rule::Network => "network",
            Rule::Egress => "egress",
            Rule::Lifetime => "lifetime",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a rule did to a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// A value was written (or overwritten).
    Set,
    /// A value or entry was taken out.
    Removed,
    /// An entry that was missing was put in.
    Added,
    /// A number was lowered to a ceiling.
    Clamped,
    /// Nothing changed; the rule only reports (secret-looking environment names).
    Reported,
    /// The spec cannot run under the policy (in audit mode: would have been rejected).
    Rejected,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Set => "set",
            Action::Removed => "removed",
            Action::Added => "added",
            Action::Clamped => "clamped",
            Action::Reported => "reported",
            Action::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the audit record. Environment values never appear here: the environment rule
/// names variables, it does not copy them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    pub rule: Rule,
    /// Path of the field in the spec, e.g. `process.capabilities.bounding` or `mounts[/data]`.
    pub field: String,
    pub action: Action,
    pub before: Option<serde_json::Value>,
    pub after: Option<serde_json::Value>,
    pub reason: String,
}

/// The changes in `decisions` in one line, for where a user inspects a container: per rule in
/// rule order, what it did and how often (`user: set 1; capabilities: removed 14`), then
/// where each change is told in full. Reports (which change nothing) are left out; rejections
/// never get this far (the spec did not run).
pub fn summary(decisions: &[Decision]) -> String {
    let mut rules: Vec<(Rule, Vec<(Action, usize)>)> = Vec::new();
    for d in decisions.iter().filter(|d| d.action != Action::Reported) {
        let at = match rules.iter().position(|(r, _)| *r == d.rule) {
            Some(i) => i,
            None => {
                rules.push((d.rule, Vec::new()));
                rules.len() - 1
            }
        };
        let actions = &mut rules[at].1;
        match actions.iter_mut().find(|(a, _)| *a == d.action) {
            Some((_, n)) => *n += 1,
            None => actions.push((d.action, 1)),
        }
    }
    if rules.is_empty() {
        return "gvisor-hardened changed nothing: the spec was within the policy".into();
    }
    let parts: Vec<String> = rules
        .iter()
        .map(|(rule, actions)| {
            let what: Vec<String> = actions
                .iter()
                .map(|(a, n)| format!("{} {n}", a.as_str()))
                .collect();
            format!("{rule}: {}", what.join(", "))
        })
        .collect();
    format!(
        "gvisor-hardened changed {}; each change is in the create record of the audit log",
        parts.join("; ")
    )
}

#[cfg(test)]
mod summary_tests {
    use super::*;

    fn d(rule: Rule, action: Action) -> Decision {
        Decision {
            rule,
            field: "f".into(),
            action,
            before: None,
            after: None,
            reason: "r".into(),
        }
    }

    #[test]
    fn the_summary_counts_each_rules_actions_in_rule_order_and_leaves_out_reports() {
        let got = summary(&[
            d(Rule::Capabilities, Action::Removed),
            d(Rule::Capabilities, Action::Removed),
            d(Rule::User, Action::Set),
            d(Rule::Environment, Action::Reported),
            d(Rule::Capabilities, Action::Added),
        ]);
        assert_eq!(
            got,
            "gvisor-hardened changed capabilities: removed 2, added 1; user: set 1; each change is in the create record of the audit log"
        );
    }

    #[test]
    fn a_spec_within_the_policy_is_summarised_as_unchanged() {
        assert!(summary(&[d(Rule::Environment, Action::Reported)]).contains("changed nothing"));
    }
}
