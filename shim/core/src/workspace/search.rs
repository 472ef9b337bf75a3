//! The exit's search of one writable bind: every git directory, every match of the protect
//! list, and every symbolic link or other non-regular file inside a git directory. Never
//! through a link, skipping the staging copies.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use policy_injector::tree_glob::TreeGlob;
use policy_injector::workspace::{is_git_dir, LIVE_DIRS};

use super::fsutil::{list_dir, MAX_GIT_PATH};
use super::WorkspaceError;

/// A device and inode: what a directory is, whatever its path.
pub(super) type Identity = (u64, u64);

/// What the search found.
#[derive(Default)]
pub(super) struct Found {
    /// Git directories: path, identity.
    pub git_dirs: Vec<(PathBuf, Identity)>,
    /// Protect-list matches: bind, relative path, host path, identity.
    pub protect: Vec<(usize, String, PathBuf, Identity)>,
    /// Links and special files inside git directories.
    pub strays: Vec<Stray>,
    pub dirs: u64,
}

/// A symbolic link, fifo, socket or device inside a git directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Stray {
    pub path: PathBuf,
    /// Index into [`Found::git_dirs`] of the git directory it is in.
    pub gitdir: usize,
    /// Inside one of the git directory's data directories (`objects`, `refs`, `logs`...),
    /// which are bound live into a staged repository's sandbox.
    pub live: bool,
    pub kind: &'static str,
}

/// Where a directory is relative to the git directories around it.
#[derive(Clone, Copy)]
struct InGit {
    gitdir: usize,
    live: bool,
}

/// Walks the bind `root` (index `bind`), adding to `found`.
pub(super) fn search(
    root: &Path,
    bind: usize,
    globs: &[TreeGlob],
    stagings: &HashSet<Identity>,
    found: &mut Found,
) -> Result<(), WorkspaceError> {
    let root_meta = fs::symlink_metadata(root).map_err(WorkspaceError::io(root))?;
    if !root_meta.is_dir() {
        return Ok(());
    }
    let root_dev = std::os::unix::fs::MetadataExt::dev(&root_meta);
    let mut mount_roots: HashSet<Identity> = HashSet::new();
    let mut stack: Vec<(PathBuf, Option<InGit>)> = vec![(PathBuf::new(), None)];
    while let Some((rel, around)) = stack.pop() {
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
        if listed.dev != root_dev && !mount_roots.insert(id) {
            continue;
        }
        let name = rel
            .file_name()
            .or_else(|| root.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let has = |n: &str| listed.entries.iter().any(|e| e.name == n);
        let here_git = is_git_dir(&name, has);
        if here_git {
            found.git_dirs.push((path.clone(), id));
        }
        for e in &listed.entries {
            let child = rel.join(&e.name);
            if !globs.is_empty() {
                match_protect(root, bind, &child, globs, found);
            }
            // Inside a git directory: at its top, or below (a data directory or not).
            let inside = if here_git {
                Some(InGit {
                    gitdir: found.git_dirs.len() - 1,
                    live: e.is_dir && LIVE_DIRS.iter().any(|d| e.name == *d),
                })
            } else {
                around
            };
            if let (Some(at), false) = (inside, e.is_dir || e.is_file) {
                found.strays.push(Stray {
                    path: root.join(&child),
                    gitdir: at.gitdir,
                    live: at.live && !here_git,
                    kind: kind_of(&root.join(&child)),
                });
            }
            if e.is_dir {
                stack.push((child, inside));
            }
        }
    }
    Ok(())
}

fn match_protect(root: &Path, bind: usize, child: &Path, globs: &[TreeGlob], found: &mut Found) {
    let segs: Vec<String> = child
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    if globs.iter().any(|g| g.matches(&segs)) {
        let full = root.join(child);
        if let Ok(m) = fs::symlink_metadata(&full) {
            use std::os::unix::fs::MetadataExt;
            found
                .protect
                .push((bind, segs.join("/"), full, (m.dev(), m.ino())));
        }
    }
}

fn kind_of(path: &Path) -> &'static str {
    match fs::symlink_metadata(path).map(|m| m.file_type()) {
        Ok(t) if t.is_symlink() => "symlink",
        Ok(t) if t.is_fifo() => "fifo",
        Ok(t) if t.is_socket() => "socket",
        Ok(t) if t.is_block_device() || t.is_char_device() => "device",
        _ => "other",
    }
}
