//! Carrying back a staged repository's data from the sandbox's copy at exit: HEAD, the index,
//! packed refs (each only where the host's own did not change meanwhile, never through a link),
//! the config keys that cannot run code, and the submodules the sandbox cloned.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use policy_injector::workspace::is_git_dir;

use super::config;
use super::fsutil::{list_dir, read_regular, write_new, Fingerprint, MAX_GIT_PATH};
use super::report::CarriedRepo;
use super::state::{StagedRepo, WorkspaceState};

/// Carries back one repository's data and safe config keys; returns what happened and the new
/// git directories moved in from the copy's `modules/` (the sandbox's submodule clones).
pub(super) fn carry(repo: &StagedRepo, gitdir: &Path) -> (CarriedRepo, Vec<PathBuf>) {
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
