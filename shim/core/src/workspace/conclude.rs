//! The exit: search, carry back, neutralise, quarantine, clean up. Runs after the sandbox
//! ended and before its exit is announced, so the developer's next git command finds the
//! project as this leaves it.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use policy_injector::policy::WorkspaceExitAction;
use policy_injector::tree_glob::TreeGlob;
use policy_injector::workspace::{is_git_dir, QUARANTINED_IN_NEW_REPOS};
use serde::Serialize;

use super::config;
use super::fsutil::{list_dir, quarantine, read_regular, write_new, Fingerprint, MAX_GIT_PATH};
use super::stage::{protect_globs, remove_staging};
use super::state::{StagedRepo, WorkspaceState};
use super::WorkspaceError;

/// What the exit did, for the exit record (`workspace` member).
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
    /// New or replaced paths of the protect list.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<Moved>,
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
    /// Where it is now; absent when only reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub reason: String,
}

/// What the search found.
#[derive(Default)]
struct Found {
    /// Git directories: path, identity.
    git_dirs: Vec<(PathBuf, (u64, u64))>,
    /// Protect-list matches: bind, relative path, host path, identity.
    protect: Vec<(usize, String, PathBuf, (u64, u64))>,
    dirs: u64,
}

/// Concludes a container's workspace: see the module's comment. Marks the state concluded
/// and writes it back to `bundle`.
pub fn conclude(state: &mut WorkspaceState, bundle: &Path) -> WorkspaceReport {
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
    let stagings: HashSet<(u64, u64)> = state
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
    report.dirs_searched = found.dirs;

    // Carry back, each repository where it is now (found by identity).
    let mut new_dirs: Vec<PathBuf> = Vec::new();
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
        let (carried, moved_in) = carry(repo, &gitdir);
        if !(carried.files.is_empty()
            && carried.config.is_empty()
            && carried.not_carried.is_empty())
        {
            report.carried.push(carried);
        }
        new_dirs.extend(moved_in);
        remove_staging(repo, &gitdir);
    }

    // Neutralise every git directory that is not one of the staged ones.
    let staged: HashSet<(u64, u64)> = state.staged.iter().map(|r| (r.dev, r.ino)).collect();
    let mut to_neutralise: Vec<PathBuf> = found
        .git_dirs
        .iter()
        .filter(|(_, id)| !staged.contains(id))
        .map(|(p, _)| p.clone())
        .collect();
    to_neutralise.extend(new_dirs);
    for dir in to_neutralise {
        let root = state
            .binds
            .iter()
            .map(|b| b.source.as_path())
            .filter(|s| dir.starts_with(s))
            .max_by_key(|s| s.as_os_str().len())
            .unwrap_or(&dir)
            .to_path_buf();
        match neutralise(&dir, &root, &state.container_id, quarantine_on) {
            Ok(Some(n)) => report.neutralised.push(n),
            Ok(None) => {}
            Err(e) => report.errors.push(e.to_string()),
        }
    }

    // The paths the repositories' configs point at: checked where they are, no search needed.
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
    // The protect list: a match that is not the file found there at create is new or replaced.
    for (bind, rel, path, id) in &found.protect {
        let known = state
            .protected_paths
            .iter()
            .any(|p| p.bind == *bind && p.path == *rel && (p.dev, p.ino) == *id);
        if known {
            continue;
        }
        let reason = if state
            .protected_paths
            .iter()
            .any(|p| p.bind == *bind && p.path == *rel)
        {
            "replaced by the sandbox (not the file protected at create)"
        } else {
            "created by the sandbox"
        };
        let mut moved = Moved {
            path: path.display().to_string(),
            to: None,
            reason: format!("{reason}: [mounts] protect"),
        };
        if quarantine_on {
            match quarantine(path, &state.container_id) {
                Ok(to) => moved.to = Some(to.display().to_string()),
                Err(e) => report.errors.push(e.to_string()),
            }
        }
        report.quarantined.push(moved);
    }

    state.concluded = true;
    if let Err(e) = state.write(bundle) {
        report.errors.push(e.to_string());
    }
    report.duration_ms = started.elapsed().as_millis() as u64;
    report
}

/// Walks one bind: every git directory and every protect-list match, never through a link,
/// skipping the staging copies.
fn search(
    root: &Path,
    bind: usize,
    globs: &[TreeGlob],
    stagings: &HashSet<(u64, u64)>,
    found: &mut Found,
) -> Result<(), WorkspaceError> {
    let root_meta = fs::symlink_metadata(root).map_err(WorkspaceError::io(root))?;
    if !root_meta.is_dir() {
        return Ok(());
    }
    let mut mount_roots: HashSet<(u64, u64)> = HashSet::new();
    let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let path = root.join(&rel);
        if path.as_os_str().len() > MAX_GIT_PATH {
            continue;
        }
        let listed = match list_dir(&path) {
            Ok(l) => l,
            // Gone meanwhile, or not a directory any more: nothing there for git either.
            Err(WorkspaceError::Io { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ENOTDIR)
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        found.dirs += 1;
        let id = (listed.dev, listed.ino);
        if stagings.contains(&id) {
            continue;
        }
        if listed.dev != root_meta.dev() && !mount_roots.insert(id) {
            continue;
        }
        let name = rel
            .file_name()
            .or_else(|| root.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let has = |n: &str| listed.entries.iter().any(|e| e.name == n);
        if is_git_dir(&name, has) {
            found.git_dirs.push((path.clone(), id));
        }
        for e in &listed.entries {
            let child = rel.join(&e.name);
            if !globs.is_empty() {
                let segs: Vec<String> = child
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
                if globs.iter().any(|g| g.matches(&segs)) {
                    let full = root.join(&child);
                    if let Ok(m) = fs::symlink_metadata(&full) {
                        found
                            .protect
                            .push((bind, segs.join("/"), full, (m.dev(), m.ino())));
                    }
                }
            }
            if e.is_dir {
                stack.push(child);
            }
        }
    }
    Ok(())
}

/// Carries back one repository's data and safe config keys; returns what happened and the new
/// git directories moved in from the copy's `modules/` (the sandbox's submodule clones).
fn carry(repo: &StagedRepo, gitdir: &Path) -> (CarriedRepo, Vec<PathBuf>) {
    let copy = WorkspaceState::staging_of(repo, gitdir);
    let mut out = CarriedRepo {
        gitdir: gitdir.display().to_string(),
        ..CarriedRepo::default()
    };
    match fs::symlink_metadata(&copy) {
        Ok(m) if m.is_dir() => {}
        _ => {
            out.not_carried
                .push("the staging copy is missing or not a directory".into());
            return (out, Vec::new());
        }
    }
    let owner = fs::symlink_metadata(gitdir).ok();
    // A rebase, merge or cherry-pick left half done in the copy: its HEAD (often detached) and
    // index belong to that operation, whose state stays in the copy (a todo list can run
    // commands). Carrying them alone would leave the host's repository in a state nobody made.
    let in_progress = IN_PROGRESS
        .iter()
        .find(|n| fs::symlink_metadata(copy.join(n)).is_ok());
    for file in &repo.carried {
        if let (Some(op), "HEAD" | "index") = (in_progress, file.name.as_str()) {
            if Fingerprint::at(&copy.join(&file.name)).ok().flatten() != file.copy {
                out.not_carried.push(format!(
                    "{}: the sandbox left an operation in progress ({op}); finish or abort it inside, the host's is kept",
                    file.name
                ));
            }
            continue;
        }
        let in_copy = Fingerprint::at(&copy.join(&file.name)).ok().flatten();
        if in_copy == file.copy {
            continue;
        }
        let on_host = Fingerprint::at(&gitdir.join(&file.name)).ok().flatten();
        if on_host != file.host {
            // The developer's git wrote it meanwhile: theirs wins. The sandbox's is data they
            // can rebuild (an index) or find in the reflog (HEAD, packed refs).
            out.not_carried.push(format!(
                "{}: changed on the host while the sandbox ran: the host's is kept",
                file.name
            ));
            continue;
        }
        match carry_file(&copy, gitdir, &file.name, in_copy.is_some(), owner.as_ref()) {
            Ok(Some(done)) => out.files.push(done),
            Ok(None) => {}
            Err(why) => out.not_carried.push(format!("{}: {why}", file.name)),
        }
    }
    carry_config(repo, &copy, gitdir, &mut out);
    let moved_in = move_new_modules(repo, &copy, gitdir, &mut out);
    (out, moved_in)
}

/// What a git directory holds while an operation waits for `--continue`.
const IN_PROGRESS: &[&str] = &[
    "rebase-merge",
    "rebase-apply",
    "MERGE_HEAD",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "sequencer",
    "BISECT_LOG",
];

/// Takes git's own lock on `name` (a developer's git running at that moment keeps its file),
/// then renames the sandbox's file over the host's.
fn carry_file(
    copy: &Path,
    gitdir: &Path,
    name: &str,
    exists: bool,
    owner: Option<&fs::Metadata>,
) -> Result<Option<String>, String> {
    let lock = gitdir.join(format!("{name}.lock"));
    let target = gitdir.join(name);
    if !exists {
        if name == "HEAD" {
            return Err("removed in the sandbox: the host's is kept".into());
        }
        return match fs::remove_file(&target) {
            Ok(()) => Ok(Some(format!("-{name}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e.to_string()),
        };
    }
    let src = copy.join(name);
    let meta = fs::symlink_metadata(&src).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file in the sandbox's copy".into());
    }
    if name == "HEAD" {
        let head = read_regular(&src, 1024).map_err(|e| e.to_string())?;
        if !head.as_deref().is_some_and(config::is_valid_head) {
            return Err("not a valid HEAD (a ref or an object name)".into());
        }
    }
    write_new(&lock, b"", None).map_err(|_| {
        format!("{name}.lock exists on the host (a git command holds it): the host's is kept")
    })?;
    let result = fs::rename(&src, &target).map_err(|e| e.to_string());
    let _ = fs::remove_file(&lock);
    result?;
    if let Some(o) = owner {
        let _ = std::os::unix::fs::lchown(&target, Some(o.uid()), Some(o.gid()));
    }
    // Data, never a program: no execute, setuid or setgid bit comes back with it.
    let _ = fs::set_permissions(&target, fs::Permissions::from_mode(meta.mode() & 0o666));
    Ok(Some(name.to_string()))
}

fn carry_config(repo: &StagedRepo, copy: &Path, gitdir: &Path, out: &mut CarriedRepo) {
    let seed = match &repo.seed_config {
        Some(p) => match read_regular(p, config::MAX_CONFIG) {
            Ok(b) => b.unwrap_or_default(),
            Err(e) => {
                out.not_carried.push(format!("config: {e}"));
                return;
            }
        },
        None => Vec::new(),
    };
    let sandbox = match read_regular(&copy.join("config"), config::MAX_CONFIG) {
        Ok(b) => b.unwrap_or_default(),
        Err(e) => {
            out.not_carried.push(format!("config: {e}"));
            return;
        }
    };
    if sandbox == seed {
        return;
    }
    let host_path = gitdir.join("config");
    let host_meta = fs::symlink_metadata(&host_path).ok();
    let host = match read_regular(&host_path, config::MAX_CONFIG) {
        Ok(b) => b.unwrap_or_default(),
        Err(e) => {
            out.not_carried.push(format!("config: the host's: {e}"));
            return;
        }
    };
    let carried = match config::carry(&seed, &sandbox, &host) {
        Ok(c) => c,
        Err(e) => {
            out.not_carried.push(format!("config: {e}"));
            return;
        }
    };
    out.not_carried
        .extend(carried.refused.iter().map(|r| format!("config: {r}")));
    if carried.applied.is_empty() {
        return;
    }
    let lock = gitdir.join("config.lock");
    // The host's config's owner and mode, or the git directory's where there was none.
    let like = host_meta
        .filter(|m| m.is_file())
        .or_else(|| fs::symlink_metadata(gitdir).ok());
    if let Err(e) = write_new(&lock, &carried.bytes, like.as_ref()) {
        out.not_carried.push(format!(
            "config: {e} (a git command on the host may hold config.lock): nothing of it carried"
        ));
        return;
    }
    if let Err(e) = fs::rename(&lock, &host_path) {
        let _ = fs::remove_file(&lock);
        out.not_carried.push(format!("config: {e}"));
        return;
    }
    out.config.extend(carried.applied);
}

/// New git directories under the copy's `modules/` (submodules the sandbox cloned, `git
/// submodule update --init`) move to the host's `modules/`, to be neutralised like any git
/// directory the sandbox made. Anything else new in the copy (a linked worktree's directory,
/// whose paths name the sandbox's mounts) stays there and goes with it.
fn move_new_modules(
    repo: &StagedRepo,
    copy: &Path,
    gitdir: &Path,
    out: &mut CarriedRepo,
) -> Vec<PathBuf> {
    let mut moved = Vec::new();
    let modules = copy.join("modules");
    if !fs::symlink_metadata(&modules).is_ok_and(|m| m.is_dir()) {
        return moved;
    }
    let mut stack: Vec<PathBuf> = vec![PathBuf::from("modules")];
    while let Some(rel) = stack.pop() {
        let path = copy.join(&rel);
        if path.as_os_str().len() > MAX_GIT_PATH {
            continue;
        }
        let Ok(listed) = list_dir(&path) else {
            continue;
        };
        let rel_str = rel.to_string_lossy().into_owned();
        if repo.nested.contains(&rel_str) {
            continue;
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if is_git_dir(&name, |n| listed.entries.iter().any(|e| e.name == n)) {
            let target = gitdir.join(&rel);
            if fs::symlink_metadata(&target).is_ok() {
                out.not_carried.push(format!(
                    "{rel_str}: a repository the sandbox made where the host already has one: left in the copy (removed)"
                ));
                continue;
            }
            if let Some(parent) = target.parent() {
                let _ = fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(parent);
            }
            match fs::rename(&path, &target) {
                Ok(()) => {
                    out.files.push(rel_str);
                    moved.push(target);
                }
                Err(e) => out.not_carried.push(format!("{rel_str}: {e}")),
            }
            continue;
        }
        for e in &listed.entries {
            if e.is_dir {
                stack.push(rel.join(&e.name));
            }
        }
    }
    moved
}

/// Neutralises a git directory the sandbox created or moved. `None`: nothing in it could run
/// code (a fresh `git init`'s sample hooks and plain config).
fn neutralise(
    dir: &Path,
    bind_root: &Path,
    container_id: &str,
    quarantine_on: bool,
) -> Result<Option<Neutralised>, WorkspaceError> {
    let mut out = Neutralised {
        gitdir: dir.display().to_string(),
        ..Neutralised::default()
    };
    let set_aside = |path: PathBuf, reason: String, out: &mut Neutralised| {
        let mut m = Moved {
            path: path.display().to_string(),
            to: None,
            reason,
        };
        if quarantine_on {
            m.to = Some(quarantine(&path, container_id)?.display().to_string());
        }
        out.moved.push(m);
        Ok::<(), WorkspaceError>(())
    };
    for name in QUARANTINED_IN_NEW_REPOS {
        let path = dir.join(name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if *name == "hooks" && meta.is_dir() && only_sample_hooks(&path) {
            continue;
        }
        // `git init` makes an empty `branches/`: nothing in it to define a remote.
        if matches!(*name, "branches" | "remotes")
            && meta.is_dir()
            && list_dir(&path).is_ok_and(|l| l.entries.is_empty())
        {
            continue;
        }
        set_aside(path, reason_for(name).to_string(), &mut out)?;
    }
    let config_path = dir.join("config");
    if let Ok(meta) = fs::symlink_metadata(&config_path) {
        let bytes = if meta.is_file() {
            read_regular(&config_path, config::MAX_CONFIG)
                .ok()
                .flatten()
        } else {
            None
        };
        match bytes.map(|b| config::sanitize_new(&b, dir, bind_root)) {
            Some(Ok(clean)) if clean.removed.is_empty() => {}
            Some(Ok(clean)) => {
                out.config_removed = clean.removed.clone();
                if quarantine_on {
                    let fresh = dir.join("config.gvisor-hardened-new");
                    let _ = fs::remove_file(&fresh);
                    write_new(&fresh, &clean.bytes, Some(&meta))?;
                    set_aside(
                        config_path.clone(),
                        "config with keys that run code or point elsewhere; its safe keys stay in config".into(),
                        &mut out,
                    )?;
                    fs::rename(&fresh, &config_path).map_err(WorkspaceError::io(&config_path))?;
                } else {
                    out.moved.push(Moved {
                        path: config_path.display().to_string(),
                        to: None,
                        reason: "config with keys that run code or point elsewhere".into(),
                    });
                }
            }
            // Not a regular file, too large or not a config git can read: set aside whole.
            Some(Err(_)) | None => set_aside(
                config_path.clone(),
                "config that is not a readable git config file".into(),
                &mut out,
            )?,
        }
    }
    if out.moved.is_empty() && out.config_removed.is_empty() {
        return Ok(None);
    }
    Ok(Some(out))
}

fn reason_for(name: &str) -> &'static str {
    match name {
        "hooks" => "hooks: git runs them by name",
        "commondir" => "commondir: takes config and hooks from another directory",
        "config.worktree" => "config.worktree: a second config",
        "rebase-merge" | "rebase-apply" | "sequencer" => {
            "an operation in progress: its todo list can run commands on --continue"
        }
        _ => "legacy remote definitions",
    }
}

/// A hooks directory holding only `git init`'s `*.sample` files: git runs none of them.
fn only_sample_hooks(hooks: &Path) -> bool {
    match list_dir(hooks) {
        Ok(l) => l
            .entries
            .iter()
            .all(|e| e.is_file && e.name.to_string_lossy().ends_with(".sample")),
        Err(_) => false,
    }
}
