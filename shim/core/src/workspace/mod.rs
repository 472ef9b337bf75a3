//! `[mounts.workspace]`: nothing a sandbox writes into a writable bind makes the host's git run
//! code afterwards (docs/workspace.md).
//!
//! Three steps, over the bind sources of one container:
//!
//! 1. **Find** ([`find`], before hardening): a bounded walk of each writable bind lists every
//!    git directory (`.git` directories, bare repositories, submodules' `.git/modules/*`,
//!    linked worktrees' `.git/worktrees/*`) and every `.git` file (gitlink). The pure mounts
//!    rule turns them into mounts: each git directory's *staging copy* at its own path, its
//!    data directories (objects, refs, logs...) live on top, each gitlink read-only. What each
//!    repository's config and hooks run from the project (`refs.rs`, `hooks.rs`, followed link
//!    by link, `resolve.rs`) becomes read-only binds, watched links and reported inputs.
//! 2. **Stage** ([`stage`], after hardening, before the sandbox exists): each staging copy is
//!    made inside its git directory (`<gitdir>/gvisor-hardened/<id>/`, root's directory of
//!    mode 0700 around it): the control files copied with their owners and modes, empty
//!    directories where the data directories and nested git directories are mounted. What
//!    exit needs is written to the bundle ([`WorkspaceState`]).
//! 3. **Conclude** ([`conclude`], after the sandbox ended, before the exit is announced):
//!    search every writable bind for git directories, carry back from each staging copy what
//!    is data (HEAD, index, packed refs...; not where the host changed it meanwhile) and the
//!    config keys that cannot run code, remove links and special files from git directories,
//!    neutralise every git directory the sandbox created or moved (hooks, commondir,
//!    config.worktree and rebase state set aside, the config cut to its safe keys), set aside
//!    new or replaced protected and watched paths (`aside.rs`: an unpredictable name, or
//!    disarmed in place), name the changed inputs of the owner's hooks, remove the staging
//!    copies, and report it all for the exit record.
//!
//! Why the staging copy is inside the git directory: the carry-back is then a `rename(2)`
//! (same filesystem, atomic, no size limit), and a sandbox's clone of a new submodule lands on
//! the project's disk, not in the node's memory. Why root's 0700 directory around it: the
//! host's git, run by the developer, cannot enter a sandbox's copy (a git directory in shape)
//! while the sandbox runs.
//!
//! The sandbox has ended when [`conclude`] runs, so nothing it does races the checks; another
//! sandbox working on the same project at the same time could, and is not defended against
//! (docs/workspace.md).

mod aside;
mod carry;
mod conclude;
mod config;
mod find;
mod fsutil;
mod hooks;
mod inputs;
mod neutralise;
mod refs;
mod report;
mod resolve;
mod search;
mod stage;
mod state;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use conclude::conclude;
pub use find::{find, staging_path, Found};
pub use report::{CarriedRepo, GitLink, InputChange, Moved, Neutralised, WorkspaceReport};
pub use stage::{discard, stage, StageRequest};
pub use state::{WorkspaceState, STATE_FILE};

/// How a container's life ended, for [`finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The create failed: no workload ran, the staging copies go and nothing is carried.
    Failed,
    /// The sandbox existed and may have run: conclude (carry back, neutralise, quarantine).
    Ran,
}

/// Ends the workspace of the container whose bundle is `bundle`, once: the state file is
/// removed afterwards, so a later call (delete after the exit) does nothing. Returns the report
/// when this call concluded it. Errors reading the state are logged: there is nothing more to
/// do with a state that cannot be read.
pub fn finish(bundle: &Path, ending: Ending) -> Option<WorkspaceReport> {
    let state = match WorkspaceState::read(bundle) {
        Ok(Some(s)) => s,
        Ok(None) => return None,
        Err(e) => {
            log::error!("{e}");
            return None;
        }
    };
    let report = match ending {
        Ending::Failed => {
            discard(&state, bundle);
            None
        }
        Ending::Ran => {
            let mut state = state;
            let report = conclude(&mut state, bundle);
            discard(&state, bundle);
            Some(report)
        }
    };
    let _ = std::fs::remove_file(WorkspaceState::path_in(bundle));
    report
}

#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    #[error("[mounts.workspace]: {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("[mounts.workspace]: more than {limit} directories below {source_dir} (max_dirs): git directories in them could not all be protected; bind a smaller tree or raise the bound")]
    TooManyDirs { source_dir: String, limit: u64 },
    #[error("[mounts.workspace]: git directory {path}: its control files exceed {limit} bytes (max_copy)")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("[mounts.workspace]: {path}: {reason}")]
    Refused { path: PathBuf, reason: String },
}

impl WorkspaceError {
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> WorkspaceError {
        let path = path.into();
        move |source| WorkspaceError::Io { path, source }
    }
}
