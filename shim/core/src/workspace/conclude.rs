//! The exit: search, carry back, disarm, quarantine, compare, clean up. Runs after the sandbox
//! ended and before its exit is announced, so the developer's next git command finds the
//! project as this leaves it. The order matters: the carry-back moves the submodules the
//! sandbox cloned into the host's git directory, so they are searched and neutralised with the
//! rest; links in git directories go before the entries around them are renamed.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use policy_injector::policy::WorkspaceExitAction;

use super::aside::rename_aside;
use super::carry::carry;
use super::inputs::Print;
use super::neutralise::{Disarm, Rename};
use super::report::{InputChange, Moved, WorkspaceReport};
use super::search::{search, Found, Identity};
use super::stage::{protect_globs, remove_staging};
use super::state::{ProtectedPath, WorkspaceState};

/// Concludes a container's workspace: see the module's comment. Marks the state concluded
/// and writes it back to `bundle`.
pub fn conclude(state: &mut WorkspaceState, bundle: &Path) -> WorkspaceReport {
    conclude_with(state, bundle, rename_aside)
}

/// [`conclude`], renaming with `rename`.
pub(super) fn conclude_with(
    state: &mut WorkspaceState,
    bundle: &Path,
    rename: Rename,
) -> WorkspaceReport {
    let started = Instant::now();
    let quarantine_on = state.at_exit == WorkspaceExitAction::Quarantine;
    let mut report = WorkspaceReport {
        action: if quarantine_on {
            "quarantine"
        } else {
            "report"
        },
        ..WorkspaceReport::default()
    };
    if state.concluded {
        return report;
    }
    let mut found = search_binds(state, &mut report);
    let moved_in = carry_back(state, &found, &mut report);
    // The submodules moved in from the copies were inside them during the search.
    for dir in &moved_in {
        if let Err(e) = search(dir, usize::MAX, &[], &HashSet::new(), &mut found) {
            report.errors.push(e.to_string());
        }
    }
    report.dirs_searched = found.dirs;
    let staged: HashSet<Identity> = state.staged.iter().map(|r| (r.dev, r.ino)).collect();
    let mut errors = Vec::new();
    let mut disarm = Disarm {
        container_id: &state.container_id,
        quarantine_on,
        rename,
        errors: &mut errors,
    };
    report.git_links = disarm.strays(&found.strays, |i| staged.contains(&found.git_dirs[i].1));
    for (dir, _) in found.git_dirs.iter().filter(|(_, id)| !staged.contains(id)) {
        if let Some(n) = disarm.git_dir(dir, bind_root(state, dir)) {
            report.neutralised.push(n);
        }
    }
    report.quarantined = quarantine_replaced(state, &mut found, &mut disarm);
    report.errors.extend(errors);
    report.hook_inputs_changed = changed_inputs(state);
    state.concluded = true;
    if let Err(e) = state.write(bundle) {
        report.errors.push(e.to_string());
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    report
}

/// Every writable bind searched; the staging copies are skipped.
fn search_binds(state: &WorkspaceState, report: &mut WorkspaceReport) -> Found {
    let stagings: HashSet<Identity> = state
        .staged
        .iter()
        .filter_map(|r| {
            let m = fs::symlink_metadata(WorkspaceState::staging_of(r, &r.gitdir)).ok()?;
            Some((m.dev(), m.ino()))
        })
        .collect();
    let globs = protect_globs(&state.protect);
    let mut found = Found::default();
    for (i, bind) in state.binds.iter().enumerate() {
        if let Err(e) = search(&bind.source, i, &globs, &stagings, &mut found) {
            report.errors.push(e.to_string());
        }
    }
    found
}

/// Carries back each staged repository where it is now (found by identity) and removes its
/// copy; returns the git directories moved in from the copies (submodules the sandbox cloned).
fn carry_back(state: &WorkspaceState, found: &Found, report: &mut WorkspaceReport) -> Vec<PathBuf> {
    let mut moved_in = Vec::new();
    for repo in &state.staged {
        let now = found
            .git_dirs
            .iter()
            .find(|(_, id)| *id == (repo.dev, repo.ino))
            .map(|(p, _)| p.clone());
        let Some(gitdir) = now else {
            report.errors.push(format!(
                "{}: the repository is no longer in the writable binds (moved or removed by the sandbox): its staging copy could not be carried back",
                repo.gitdir.display()
            ));
            continue;
        };
        let (carried, new_dirs) = carry(repo, &gitdir);
        if !(carried.files.is_empty()
            && carried.config.is_empty()
            && carried.not_carried.is_empty())
        {
            report.carried.push(carried);
        }
        moved_in.extend(new_dirs);
        remove_staging(repo, &gitdir);
    }
    moved_in
}

/// The deepest bind holding `dir`.
fn bind_root<'a>(state: &'a WorkspaceState, dir: &'a Path) -> &'a Path {
    state
        .binds
        .iter()
        .map(|b| b.source.as_path())
        .filter(|s| dir.starts_with(s))
        .max_by_key(|s| s.as_os_str().len())
        .unwrap_or(dir)
}

/// The protect list's matches, the referenced paths and the links on the way to them: what is
/// not what was there at create is new or replaced, and is set aside.
fn quarantine_replaced(
    state: &WorkspaceState,
    found: &mut Found,
    disarm: &mut Disarm<'_>,
) -> Vec<Moved> {
    // The referenced paths are checked where they are, no search needed.
    for r in &state.referenced {
        let Some(bind) = state.binds.get(r.bind) else {
            continue;
        };
        let path = bind.source.join(&r.path);
        if let Ok(m) = fs::symlink_metadata(&path) {
            let entry = (r.bind, r.path.clone(), path, (m.dev(), m.ino()));
            if !found.protect.contains(&entry) {
                found.protect.push(entry);
            }
        }
    }
    // Parents first: what is below a path set aside went with it.
    found.protect.sort_by(|a, b| a.2.cmp(&b.2));
    let mut out: Vec<Moved> = Vec::new();
    let mut gone: Vec<&Path> = Vec::new();
    for (bind, rel, path, id) in &found.protect {
        if gone.iter().any(|g| path.starts_with(g)) {
            continue;
        }
        let here = |p: &ProtectedPath| p.bind == *bind && p.path == *rel;
        let was_file = state.protected_paths.iter().filter(|p| here(p));
        let was_link = state
            .links
            .iter()
            .filter(|l| l.bind == *bind && l.path == *rel);
        if was_file.clone().any(|p| (p.dev, p.ino) == *id)
            || was_link.clone().any(|l| l.is_at(path))
        {
            continue;
        }
        let was_nothing = was_file.count() == 0 && was_link.count() == 0;
        let what = if was_nothing {
            "created by the sandbox"
        } else {
            "replaced by the sandbox (not the file protected at create)"
        };
        let list = if state
            .referenced
            .iter()
            .any(|r| r.bind == *bind && r.path == *rel)
        {
            "what the owner's git config or hooks run or read"
        } else {
            "[mounts] protect"
        };
        out.push(disarm.aside(path, &format!("{what}: {list}")));
        gone.push(path);
    }
    out
}

/// The writable inputs of the owner's hooks that are not what they were at create.
fn changed_inputs(state: &WorkspaceState) -> Vec<InputChange> {
    state
        .hook_inputs
        .iter()
        .filter_map(|input| {
            let bind = state.binds.get(input.bind)?;
            let now = Print::of(&bind.source.join(&input.path));
            let change = input.print.change(&now)?;
            Some(InputChange {
                path: bind.source.join(&input.path).display().to_string(),
                change,
                hooks: input.hooks.clone(),
            })
        })
        .collect()
}
