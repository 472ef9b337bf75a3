//! The staging copies: made after the spec is hardened and before the sandbox exists, undone
//! completely if anything fails (the create then fails with the reason).

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use policy_injector::policy::WorkspacePolicy;
use policy_injector::tree_glob::TreeGlob;
use policy_injector::workspace::{is_carried, CARRIED_FILES, LIVE_DIRS, STAGING_DIR};
use policy_injector::{EntryKind, HostTree, StagedGitDir, TreeList};

use super::fsutil::{list_dir, Fingerprint, MAX_GIT_PATH};
use super::inputs::Print;
use super::state::{
    CarriedFile, HookInput, ProtectedPath, ReferencedPath, StagedRepo, WatchedBind, WatchedLink,
    WorkspaceState,
};
use super::WorkspaceError;

/// The seed configs' directory in the bundle.
const SEEDS: &str = "gvisor-hardened-workspace";

/// What staging needs from the create.
pub struct StageRequest<'a> {
    pub container_id: &'a str,
    pub bundle: &'a Path,
    pub policy: &'a policy_injector::Policy,
    /// The git directories the hardened spec binds from staging copies.
    pub staged: &'a [StagedGitDir],
    /// The writable binds of the hardened spec (host source, destination).
    pub writable: Vec<(PathBuf, String)>,
    /// What the protect/mask search found below the binds, with the config references.
    pub host_tree: &'a HostTree,
    /// What the repositories' configs and hooks reach, per bind source (the create-time
    /// search; its `tree` is not read here).
    pub git: &'a super::Found,
}

/// Makes every staging copy and returns the state the exit needs (also written to the
/// bundle). `Ok(None)`: no writable bind, nothing to stage or check.
pub fn stage(req: &StageRequest<'_>) -> Result<Option<WorkspaceState>, WorkspaceError> {
    let w = &req.policy.mounts.workspace;
    if (!w.git && req.policy.mounts.protect.is_empty()) || req.writable.is_empty() {
        // Nothing to stage or check.
        return Ok(None);
    }
    // `writable_binds` lists each tree once: the staging copies' and data directories' own
    // binds are inside the project's.
    let binds: Vec<WatchedBind> = req
        .writable
        .iter()
        .map(|(source, destination)| WatchedBind {
            source: source.clone(),
            destination: destination.clone(),
        })
        .collect();
    let per_bind = |map: &BTreeMap<String, Vec<String>>| -> Vec<(usize, String)> {
        binds
            .iter()
            .enumerate()
            .flat_map(|(i, b)| {
                map.get(&b.source.display().to_string())
                    .into_iter()
                    .flatten()
                    .map(move |p| (i, p.clone()))
            })
            .collect()
    };
    // The links are watched like the referenced paths, by identity; they are never bound.
    let links: Vec<(usize, String)> = per_bind(&req.git.links);
    let referenced = per_bind(&req.git.references)
        .into_iter()
        .chain(links.iter().cloned())
        .map(|(bind, path)| ReferencedPath { bind, path })
        .collect();
    let mut state = WorkspaceState {
        container_id: req.container_id.to_string(),
        at_exit: w.at_exit,
        protect: req.policy.mounts.protect.clone(),
        referenced,
        // What the references are at create, beside the protect list's matches: a referenced
        // path holding another file at exit was replaced.
        protected_paths: protected_paths(&binds, req.host_tree)
            .into_iter()
            .chain(identities(&binds, &per_bind(&req.git.references)))
            .collect(),
        links: watched_links(&binds, &links),
        hook_inputs: hook_inputs(&binds, &req.git.reported),
        binds,
        staged: Vec::new(),
        concluded: false,
    };
    let made = stage_all(req, w, &mut state);
    if let Err(e) = made.and_then(|()| state.write(req.bundle)) {
        discard(&state, req.bundle);
        return Err(e);
    }
    Ok(Some(state))
}

/// Removes every staging copy of `state` and the seeds in the bundle, carrying nothing back:
/// the create failed, or the exit already carried what it could.
pub fn discard(state: &WorkspaceState, bundle: &Path) {
    for repo in &state.staged {
        remove_staging(repo, &repo.gitdir);
    }
    let _ = fs::remove_dir_all(bundle.join(SEEDS));
}

pub(super) fn remove_staging(repo: &StagedRepo, gitdir: &Path) {
    let copy = WorkspaceState::staging_of(repo, gitdir);
    // remove_dir_all does not follow symbolic links (std since 1.58): what the sandbox left
    // in its copy is removed, never what a link in it points to.
    if let Err(e) = fs::remove_dir_all(&copy) {
        if e.kind() != std::io::ErrorKind::NotFound {
            log::warn!("removing the staging copy {}: {e}", copy.display());
        }
    }
    // The parent goes when empty (another container's copy may still be in it).
    let _ = fs::remove_dir(gitdir.join(STAGING_DIR));
}

/// The identity of each `(bind, path)` that exists now.
fn identities(binds: &[WatchedBind], paths: &[(usize, String)]) -> Vec<ProtectedPath> {
    paths
        .iter()
        .filter_map(|(bind, path)| {
            let m = fs::symlink_metadata(binds.get(*bind)?.source.join(path)).ok()?;
            Some(ProtectedPath {
                bind: *bind,
                path: path.clone(),
                dev: m.dev(),
                ino: m.ino(),
            })
        })
        .collect()
}

/// Each watched path of `paths` that exists, as it is now.
fn watched_links(binds: &[WatchedBind], paths: &[(usize, String)]) -> Vec<WatchedLink> {
    paths
        .iter()
        .filter_map(|(bind, path)| {
            let full = binds.get(*bind)?.source.join(path);
            let m = fs::symlink_metadata(&full).ok()?;
            Some(WatchedLink {
                bind: *bind,
                path: path.clone(),
                print: Fingerprint::of(&m),
                target: fs::read_link(&full).ok(),
            })
        })
        .collect()
}

/// What the hooks read or run that stays writable, each with its print now.
fn hook_inputs(
    binds: &[WatchedBind],
    reported: &BTreeMap<String, Vec<(String, Vec<String>)>>,
) -> Vec<HookInput> {
    let mut out = Vec::new();
    for (i, b) in binds.iter().enumerate() {
        for (path, hooks) in reported
            .get(&b.source.display().to_string())
            .into_iter()
            .flatten()
        {
            out.push(HookInput {
                bind: i,
                path: path.clone(),
                hooks: hooks.clone(),
                print: Print::of(&b.source.join(path)),
            });
        }
    }
    out
}

fn protected_paths(binds: &[WatchedBind], tree: &HostTree) -> Vec<ProtectedPath> {
    let mut out = Vec::new();
    for (i, bind) in binds.iter().enumerate() {
        let Some(entries) = tree.found.get(&bind.source.display().to_string()) else {
            continue;
        };
        for e in entries {
            if e.list != TreeList::Protect || matches!(e.kind, EntryKind::Symlink) {
                continue;
            }
            if let Ok(m) = fs::symlink_metadata(bind.source.join(&e.path)) {
                out.push(ProtectedPath {
                    bind: i,
                    path: e.path.clone(),
                    dev: m.dev(),
                    ino: m.ino(),
                });
            }
        }
    }
    out
}

fn stage_all(
    req: &StageRequest<'_>,
    w: &WorkspacePolicy,
    state: &mut WorkspaceState,
) -> Result<(), WorkspaceError> {
    for (n, dir) in req.staged.iter().enumerate() {
        let gitdir = Path::new(&dir.bind_source).join(&dir.path);
        let meta = fs::symlink_metadata(&gitdir).map_err(WorkspaceError::io(&gitdir))?;
        if !meta.is_dir() {
            return Err(WorkspaceError::Refused {
                path: gitdir,
                reason: "no longer a directory".into(),
            });
        }
        let staging = PathBuf::from(&dir.staging);
        let staging_name = staging
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        if staging != gitdir.join(STAGING_DIR).join(&staging_name) {
            return Err(WorkspaceError::Refused {
                path: staging,
                reason: format!("not inside {}/{STAGING_DIR}", gitdir.display()),
            });
        }
        // Nested git directories of this one (a submodule's, a worktree's) are mounted into
        // the copy: their places are made, their contents are not copied.
        let nested = nested_in(req.staged, dir);
        let mut repo = StagedRepo {
            gitdir: gitdir.clone(),
            destination: dir.destination.clone(),
            dev: meta.dev(),
            ino: meta.ino(),
            staging_name,
            seed_config: None,
            carried: Vec::new(),
            nested: nested.clone(),
        };
        // Recorded before the copy exists, so a failure halfway removes what was made.
        state.staged.push(repo.clone());
        make_parent(&gitdir, req.container_id)?;
        let mut budget = w.max_copy.0;
        copy_dir(
            &gitdir,
            &staging,
            &meta,
            &nested,
            Path::new(""),
            &mut budget,
            &gitdir,
            w,
        )?;
        if let Some(seed) = seed_config(req.bundle, n, &staging)? {
            repo.seed_config = Some(seed);
        }
        repo.carried = carried_files(&gitdir, &staging)?;
        *state.staged.last_mut().expect("pushed above") = repo;
    }
    Ok(())
}

/// The staged git directories below `dir` in the same bind, relative to it.
fn nested_in(staged: &[StagedGitDir], dir: &StagedGitDir) -> Vec<String> {
    staged
        .iter()
        .filter(|o| o.bind_source == dir.bind_source && o.path != dir.path)
        .filter_map(|o| {
            if dir.path.is_empty() {
                Some(o.path.clone())
            } else {
                o.path
                    .strip_prefix(&format!("{}/", dir.path))
                    .map(str::to_string)
            }
        })
        .collect()
}

/// `<gitdir>/gvisor-hardened`: ours (root's, on a node), mode 0700. Anything else at that name
/// (a sandbox could have left one in a repository it created in an earlier run) is renamed
/// aside first.
fn make_parent(gitdir: &Path, container_id: &str) -> Result<(), WorkspaceError> {
    let parent = gitdir.join(STAGING_DIR);
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if let Ok(m) = fs::symlink_metadata(&parent) {
        let ours = m.is_dir() && m.uid() == me && m.mode() & 0o077 == 0;
        if ours {
            return Ok(());
        }
        let moved = super::aside::rename_aside(&parent, container_id)
            .map_err(WorkspaceError::io(&parent))?;
        log::warn!(
            "{} was not the runtime's (owner {}, mode {:o}): renamed to {}",
            parent.display(),
            m.uid(),
            m.mode() & 0o7777,
            moved.display()
        );
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&parent)
        .map_err(WorkspaceError::io(&parent))?;
    // The mode alone keeps others out; the group too.
    std::os::unix::fs::chown(&parent, Some(me), Some(unsafe { libc::getegid() }))
        .map_err(WorkspaceError::io(&parent))
}

fn make_dir_like(path: &Path, like: &fs::Metadata) -> Result<(), WorkspaceError> {
    fs::DirBuilder::new()
        .mode(like.mode() & 0o777)
        .create(path)
        .map_err(WorkspaceError::io(path))?;
    std::os::unix::fs::chown(path, Some(like.uid()), Some(like.gid()))
        .map_err(WorkspaceError::io(path))?;
    // The umask took bits the original has.
    fs::set_permissions(path, fs::Permissions::from_mode(like.mode() & 0o7777))
        .map_err(WorkspaceError::io(path))
}

/// Copies the directory `from` into the new directory `to`: regular files with their bytes,
/// mode, owner and mtime (git's index compares mtimes), symbolic links as links, directories
/// recursively. At the top of the git directory the data directories and the staging
/// directory are left out (empty places for the data binds), and at each `nested` path only an
/// empty place is made.
#[allow(clippy::too_many_arguments)]
fn copy_dir(
    from: &Path,
    to: &Path,
    meta: &fs::Metadata,
    nested: &[String],
    rel: &Path,
    budget: &mut u64,
    gitdir: &Path,
    w: &WorkspacePolicy,
) -> Result<(), WorkspaceError> {
    make_dir_like(to, meta)?;
    if to.as_os_str().len() > MAX_GIT_PATH {
        return Ok(());
    }
    let at_top = rel.as_os_str().is_empty();
    for e in list_dir(from)?.entries {
        let src = from.join(&e.name);
        let dst = to.join(&e.name);
        let child_rel = rel.join(&e.name);
        let name = e.name.to_string_lossy();
        if at_top && name == STAGING_DIR {
            continue;
        }
        let m = fs::symlink_metadata(&src).map_err(WorkspaceError::io(&src))?;
        let is_nested = nested.iter().any(|n| Path::new(n) == child_rel);
        if e.is_dir && ((at_top && LIVE_DIRS.contains(&name.as_ref())) || is_nested) {
            make_dir_like(&dst, &m)?;
            continue;
        }
        if e.is_dir {
            // A nested git directory deeper down still needs the directories on its way.
            copy_dir(&src, &dst, &m, nested, &child_rel, budget, gitdir, w)?;
        } else if e.is_symlink {
            let target = fs::read_link(&src).map_err(WorkspaceError::io(&src))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(WorkspaceError::io(&dst))?;
            std::os::unix::fs::lchown(&dst, Some(m.uid()), Some(m.gid()))
                .map_err(WorkspaceError::io(&dst))?;
        } else if e.is_file {
            if m.len() > *budget {
                return Err(WorkspaceError::TooLarge {
                    path: gitdir.to_path_buf(),
                    limit: w.max_copy.0,
                });
            }
            *budget -= m.len();
            copy_file(&src, &dst, &m)?;
        }
        // Sockets, fifos and devices have no place in a git directory; the copy leaves them
        // out.
    }
    Ok(())
}

fn copy_file(src: &Path, dst: &Path, meta: &fs::Metadata) -> Result<(), WorkspaceError> {
    let mut input = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(src)
        .map_err(WorkspaceError::io(src))?;
    let mut output = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(meta.mode() & 0o777)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dst)
        .map_err(WorkspaceError::io(dst))?;
    std::io::copy(&mut input, &mut output).map_err(WorkspaceError::io(dst))?;
    std::os::unix::fs::fchown(&output, Some(meta.uid()), Some(meta.gid()))
        .map_err(WorkspaceError::io(dst))?;
    output
        .set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(WorkspaceError::io(dst))?;
    let times = fs::FileTimes::new()
        .set_accessed(meta.accessed().map_err(WorkspaceError::io(src))?)
        .set_modified(meta.modified().map_err(WorkspaceError::io(src))?);
    output.set_times(times).map_err(WorkspaceError::io(dst))
}

/// The config as copied, kept in the bundle (the sandbox can change the copy, not this).
fn seed_config(bundle: &Path, n: usize, staging: &Path) -> Result<Option<PathBuf>, WorkspaceError> {
    let Some(bytes) =
        super::fsutil::read_regular(&staging.join("config"), super::config::MAX_CONFIG).or_else(
            |e| match e {
                // A config that is not a regular file (a link) stays the sandbox's; nothing of it
                // is carried back.
                WorkspaceError::Refused { .. } => Ok(None),
                e => Err(e),
            },
        )?
    else {
        return Ok(None);
    };
    let dir = bundle.join(SEEDS);
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(WorkspaceError::io(&dir))?;
    let path = dir.join(format!("{n}.config"));
    crate::atomic_file::write(&path, &bytes, crate::atomic_file::Options::PRIVATE)
        .map_err(WorkspaceError::io(&path))?;
    Ok(Some(path))
}

fn carried_files(gitdir: &Path, staging: &Path) -> Result<Vec<CarriedFile>, WorkspaceError> {
    let mut names: Vec<String> = CARRIED_FILES.iter().map(|s| s.to_string()).collect();
    for e in list_dir(gitdir)?.entries {
        let name = e.name.to_string_lossy().into_owned();
        if is_carried(&name) && !names.contains(&name) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .map(|name| {
            Ok(CarriedFile {
                host: Fingerprint::at(&gitdir.join(&name))?,
                copy: Fingerprint::at(&staging.join(&name))?,
                name,
            })
        })
        .collect()
}

/// The protect list's globs, compiled (the policy was validated: every one compiles).
pub(super) fn protect_globs(patterns: &[String]) -> Vec<TreeGlob> {
    patterns
        .iter()
        .filter_map(|p| TreeGlob::new(p).ok())
        .collect()
}
