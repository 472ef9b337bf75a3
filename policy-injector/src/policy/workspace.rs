//! `[mounts.workspace]`: what a sandbox may leave in its writable binds that the host runs
//! later. Git is the case that matters (a developer runs `git status` in the project the agent
//! worked on, and git runs hooks, `core.fsmonitor`, filters and editors from the repository's
//! control files); `[mounts] protect` names the rest (`.envrc`, `.vscode/tasks.json`). Kept
//! apart from the other sections because the runtime, not only the spec rewriter, acts on it:
//! at create it stages each repository's control files, at exit it carries back what is safe
//! and quarantines what is not.

use serde::{Deserialize, Serialize};

use super::issue::{invalid, Issue};
use super::Policy;

use crate::quantity::ByteSize;

/// What the exit check does with a git control file or a `protect` path that the sandbox
/// created or changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceExitAction {
    /// Rename it aside (a name git, direnv and editors never read), write a sanitized config
    /// where one was, and name every path in the exit record.
    #[default]
    Quarantine,
    /// Name it in the exit record and leave it where it is.
    Report,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkspacePolicy {
    /// Every git directory found in a writable bind at create is replaced, inside the sandbox,
    /// by a private copy of its control files (config, hooks, HEAD, index...), with its objects,
    /// refs and logs bound live on top. At exit the runtime carries back the index, HEAD and
    /// packed refs, and the config keys that cannot run code (remotes, branch tracking).
    pub git: bool,
    pub at_exit: WorkspaceExitAction,
    /// Git directories one container may stage; more fails the create (each costs a few
    /// mounts).
    pub max_repositories: u32,
    /// Directories the create-time search for git directories may list, over all writable
    /// binds; a larger tree fails the create rather than leave a repository unprotected.
    pub max_dirs: u64,
    /// Bytes of control files (everything but objects, refs and logs) copied per repository.
    pub max_copy: ByteSize,
}

impl Default for WorkspacePolicy {
    fn default() -> Self {
        WorkspacePolicy {
            git: true,
            at_exit: WorkspaceExitAction::Quarantine,
            max_repositories: 64,
            max_dirs: 250_000,
            max_copy: ByteSize(256 << 20),
        }
    }
}

/// Upper bounds that keep a typo from turning a bound into no bound.
pub(crate) const MAX_REPOSITORIES: u32 = 1024;
pub(crate) const MAX_DIRS: u64 = 10_000_000;

pub(super) fn validate(p: &Policy) -> Result<(), Issue> {
    let w = &p.mounts.workspace;
    if w.max_repositories == 0 || w.max_repositories > MAX_REPOSITORIES {
        return Err(invalid(
            "mounts.workspace.max_repositories",
            format!("between 1 and {MAX_REPOSITORIES}"),
        ));
    }
    if w.max_dirs == 0 || w.max_dirs > MAX_DIRS {
        return Err(invalid(
            "mounts.workspace.max_dirs",
            format!("between 1 and {MAX_DIRS}"),
        ));
    }
    if w.max_copy.0 == 0 {
        return Err(invalid(
            "mounts.workspace.max_copy",
            "0 would fail every create that finds a repository",
        ));
    }
    if w.git {
        // A read-only bind of `.git/config` on top of the private copy would bring back the
        // failure this section exists to remove ("could not write config file: Device or
        // resource busy"), and a protected `.git/hooks` adds nothing to it.
        for (key, list) in [
            ("mounts.protect", &p.mounts.protect),
            ("mounts.mask", &p.mounts.mask),
        ] {
            if let Some((i, pattern)) = list
                .iter()
                .enumerate()
                .find(|(_, pat)| pat.split('/').any(|seg| seg == ".git"))
            {
                return Err(invalid(
                    format!("{key}[{i}]"),
                    format!(
                        "{pattern:?} is inside a git directory, which [mounts.workspace] git = true \
                         protects as a whole: remove it (or set git = false)"
                    ),
                ));
            }
        }
    }
    Ok(())
}
