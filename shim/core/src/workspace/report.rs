//! What the exit did, for the exit record's `workspace` member
//! (`shim/audit-record.schema.json`).

use serde::Serialize;

use super::aside::Outcome;

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkspaceReport {
    /// `quarantine` or `report`: whether the paths below were changed or only named.
    pub action: &'static str,
    /// Directories searched over all writable binds, and how long it all took.
    pub dirs_searched: u64,
    pub duration_ms: u64,
    /// Per staged repository: what came back from the sandbox's copy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub carried: Vec<CarriedRepo>,
    /// Git directories the sandbox created or moved, and what was done to each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub neutralised: Vec<Neutralised>,
    /// Symbolic links and other non-regular files in git directories where the host's git
    /// would follow or open them: in any git directory's data directories, anywhere in one the
    /// sandbox made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub git_links: Vec<GitLink>,
    /// New or replaced paths of the protect list, of what the owner's git config and hooks
    /// point at, and links on the way to those that are not the same links any more.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<Moved>,
    /// What the owner's hooks read or run that is left writable (dependencies, manifests) and
    /// changed while the sandbox ran.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hook_inputs_changed: Vec<InputChange>,
    /// What could not be done; the exit is reported regardless.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CarriedRepo {
    /// The git directory on the host.
    pub gitdir: String,
    /// Files carried back (`-NAME`: removed, as the sandbox removed it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Config keys carried back.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config: Vec<String>,
    /// What stayed in the sandbox's copy, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_carried: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Neutralised {
    pub gitdir: String,
    /// Entries renamed aside (with `action` = `report`: that would have been).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub moved: Vec<Moved>,
    /// Config keys taken out (the original config is among `moved`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_removed: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Moved {
    pub path: String,
    /// Where it is now; absent when only reported or disarmed in place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// Set when it could not be renamed aside: what was done in its place instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disarmed: Option<String>,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct GitLink {
    pub path: String,
    /// `symlink`, `fifo`, `socket` or `device`.
    pub kind: &'static str,
    /// A link's target, as it was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// True once removed (with `action` = `report`: named only).
    pub removed: bool,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct InputChange {
    pub path: String,
    /// `created`, `removed`, `changed`, or why it could not be compared.
    pub change: String,
    /// The hooks that read or run it.
    pub hooks: Vec<String>,
}

impl WorkspaceReport {
    /// One line for where a user looks after the exit (a pod's termination message, the
    /// runtime's log) when the exit changed or found anything: counts, with what could not be
    /// set aside said first; the exit record has the paths. `None` when there is nothing to say.
    pub fn summary(&self) -> Option<String> {
        let moved = self
            .neutralised
            .iter()
            .flat_map(|n| n.moved.iter())
            .chain(self.quarantined.iter());
        let (mut renamed, mut disarmed, mut not) = (0, 0, 0);
        for m in moved {
            match (&m.to, m.disarmed.as_deref()) {
                (Some(_), _) => renamed += 1,
                (None, Some(d)) if d.starts_with("NOT") => not += 1,
                (None, Some(_)) => disarmed += 1,
                (None, None) => {}
            }
        }
        let links = self.git_links.len();
        let mut parts = Vec::new();
        if not > 0 {
            parts.push(format!("{not} could NOT be set aside or disarmed"));
        }
        if !self.errors.is_empty() {
            parts.push(format!("{} errors", self.errors.len()));
        }
        if disarmed > 0 {
            parts.push(format!(
                "{disarmed} could not be renamed aside and were disarmed in place"
            ));
        }
        if renamed > 0 {
            parts.push(format!("{renamed} set aside"));
        }
        if links > 0 {
            parts.push(format!(
                "{links} links or special files in git directories removed"
            ));
        }
        if !self.hook_inputs_changed.is_empty() {
            parts.push(format!(
                "{} files your hooks run or read changed",
                self.hook_inputs_changed.len()
            ));
        }
        if parts.is_empty() {
            return None;
        }
        let verb = if self.action == "report" {
            " (report only: nothing was changed)"
        } else {
            ""
        };
        Some(format!(
            "gvisor-hardened: workspace: {}{verb}; the exit record names each path",
            parts.join(", ")
        ))
    }
}

impl Moved {
    /// A path with its reason, set aside as `outcome` says (`None`: only reported). Returns
    /// the error to record when it could be neither renamed nor disarmed.
    pub(super) fn of(
        path: String,
        reason: String,
        outcome: Option<Outcome>,
    ) -> (Moved, Option<String>) {
        let mut m = Moved {
            path,
            reason,
            ..Moved::default()
        };
        let error = match outcome {
            None => None,
            Some(Outcome::Moved(to)) => {
                m.to = Some(to.display().to_string());
                None
            }
            Some(Outcome::Disarmed { why, left }) => {
                m.disarmed = Some(if left.is_empty() {
                    format!("{why}: removed in place")
                } else {
                    let left: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
                    format!(
                        "{why}: removed in place but for {}, whose mode bits were all taken",
                        left.join(", ")
                    )
                });
                None
            }
            Some(Outcome::Failed(why)) => {
                m.disarmed = Some(format!("NOT disarmed: {why}"));
                Some(format!("{}: {why}", m.path))
            }
        };
        (m, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_first_what_could_not_be_disarmed_and_nothing_when_nothing_happened() {
        assert_eq!(WorkspaceReport::default().summary(), None);
        let report = WorkspaceReport {
            action: "quarantine",
            quarantined: vec![
                Moved {
                    path: "/p/.envrc".into(),
                    disarmed: Some("NOT disarmed: EPERM".into()),
                    ..Moved::default()
                },
                Moved {
                    path: "/p/.githooks".into(),
                    to: Some("/p/.githooks.quarantine-x-y".into()),
                    ..Moved::default()
                },
            ],
            errors: vec!["/p/.envrc: EPERM".into()],
            ..WorkspaceReport::default()
        };
        assert_eq!(
            report.summary().unwrap(),
            "gvisor-hardened: workspace: 1 could NOT be set aside or disarmed, 1 errors, 1 set aside; the exit record names each path"
        );
    }
}
