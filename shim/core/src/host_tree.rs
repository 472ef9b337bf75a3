//! The host side of `[mounts] protect` and `mask`: for every directory a spec binds, find the
//! entries the patterns name, and make the empty file masks are bound from. What to do with
//! them is policy-injector's decision (`Context::host_tree`).
//!
//! The walk follows the patterns: a literal segment (`.git`, `hooks`) is one `lstat`, only a
//! `*` segment or `**` lists a directory, and symbolic links are reported, never followed. A
//! walk that would visit more than [`MAX_DIRS`] directories fails the create rather than leave
//! part of a tree unchecked: narrow the `**` patterns for such trees.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use policy_injector::tree_glob::{Step, TreeGlob};
use policy_injector::{EntryKind, HostTree, Policy, TreeEntry, TreeList};
use serde_json::Value;

/// The empty file masks bind read-only, in the bundle (removed with it).
pub const EMPTY_FILE: &str = "gvisor-hardened-empty";
/// Directories one create may list for `**` patterns, over all binds.
pub const MAX_DIRS: usize = 20_000;

#[derive(Debug, thiserror::Error)]
pub enum HostTreeError {
    #[error("[mounts] protect/mask: {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("[mounts] protect/mask: pattern {pattern:?} would list more than {limit} directories below {source_dir}; use narrower patterns for this tree")]
    TooLarge {
        pattern: String,
        source_dir: String,
        limit: usize,
    },
}

struct Walk<'a> {
    glob: &'a TreeGlob,
    list: TreeList,
    dirs_left: &'a mut usize,
    limit: usize,
    found: &'a mut BTreeSet<(String, TreeListKey, EntryKindKey)>,
}

// Orderable stand-ins (the policy types are not Ord).
type TreeListKey = u8;
type EntryKindKey = u8;

fn list_key(l: TreeList) -> TreeListKey {
    match l {
        TreeList::Protect => 0,
        TreeList::Mask => 1,
    }
}

fn kind_of(meta: &fs::Metadata) -> EntryKind {
    let t = meta.file_type();
    if t.is_symlink() {
        EntryKind::Symlink
    } else if t.is_dir() {
        EntryKind::Dir
    } else if t.is_file() {
        EntryKind::File
    } else {
        EntryKind::Other
    }
}

fn kind_key(k: EntryKind) -> EntryKindKey {
    match k {
        EntryKind::File => 0,
        EntryKind::Dir => 1,
        EntryKind::Symlink => 2,
        EntryKind::Other => 3,
    }
}

fn kind_from_key(k: EntryKindKey) -> EntryKind {
    match k {
        0 => EntryKind::File,
        1 => EntryKind::Dir,
        2 => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

impl Walk<'_> {
    fn visit(
        &mut self,
        root: &Path,
        dir: &Path,
        rel: &mut Vec<String>,
    ) -> Result<(), HostTreeError> {
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| HostTreeError::Io { path, source }
        };
        let rel_strs: Vec<&str> = rel.iter().map(String::as_str).collect();
        let names: Vec<String> = match self.glob.step_into(&rel_strs) {
            Step::Name(n) => vec![n.to_string()],
            Step::List => {
                if *self.dirs_left == 0 {
                    return Err(HostTreeError::TooLarge {
                        pattern: self.glob.as_str().to_string(),
                        source_dir: root.display().to_string(),
                        limit: self.limit,
                    });
                }
                *self.dirs_left -= 1;
                let mut names = Vec::new();
                for entry in fs::read_dir(dir).map_err(io_err(dir))? {
                    let entry = entry.map_err(io_err(dir))?;
                    names.push(entry.file_name().to_string_lossy().into_owned());
                }
                names
            }
        };
        for name in names {
            let path = dir.join(&name);
            let meta = match fs::symlink_metadata(&path) {
                Ok(m) => m,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(&path)(e)),
            };
            rel.push(name);
            let segs: Vec<&str> = rel.iter().map(String::as_str).collect();
            let kind = kind_of(&meta);
            if self.glob.matches(&segs) {
                self.found
                    .insert((segs.join("/"), list_key(self.list), kind_key(kind)));
            }
            if kind == EntryKind::Dir && self.glob.may_match_below(&segs) {
                self.visit(root, &path, rel)?;
            }
            rel.pop();
        }
        Ok(())
    }
}

/// The sources of the spec's bind mounts that are directories on the host.
fn bind_dirs(spec: &Value) -> Vec<String> {
    let Some(mounts) = spec.get("mounts").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in mounts {
        let is_bind = policy_injector::is_bind_mount(m);
        let Some(source) = m.get("source").and_then(Value::as_str) else {
            continue;
        };
        // The bind follows a link at its source, so does the check.
        if is_bind
            && source.starts_with('/')
            && Path::new(source).is_dir()
            && !out.iter().any(|s| s == source)
        {
            out.push(source.to_string());
        }
    }
    out
}

/// Walks every directory bind of `spec` for the policy's protect and mask patterns. With masked
/// files found, writes the empty file into `bundle`.
pub fn scan(spec: &Value, policy: &Policy, bundle: &Path) -> Result<HostTree, HostTreeError> {
    scan_bounded(spec, policy, bundle, MAX_DIRS)
}

/// [`scan`] listing at most `max_dirs` directories (the tests use a small bound).
fn scan_bounded(
    spec: &Value,
    policy: &Policy,
    bundle: &Path,
    max_dirs: usize,
) -> Result<HostTree, HostTreeError> {
    let m = &policy.mounts;
    if m.protect.is_empty() && m.mask.is_empty() {
        return Ok(HostTree::default());
    }
    // The policy was validated when it was loaded: every pattern compiles.
    let globs: Vec<(TreeGlob, TreeList)> = m
        .protect
        .iter()
        .map(|p| (p, TreeList::Protect))
        .chain(m.mask.iter().map(|p| (p, TreeList::Mask)))
        .filter_map(|(p, l)| TreeGlob::new(p).ok().map(|g| (g, l)))
        .collect();
    let mut dirs_left = max_dirs;
    let mut tree = HostTree::default();
    let mut any_masked_file = false;
    for source in bind_dirs(spec) {
        let mut found = BTreeSet::new();
        for (glob, list) in &globs {
            let mut walk = Walk {
                glob,
                list: *list,
                dirs_left: &mut dirs_left,
                limit: max_dirs,
                found: &mut found,
            };
            walk.visit(Path::new(&source), Path::new(&source), &mut Vec::new())?;
        }
        if found.is_empty() {
            continue;
        }
        let entries: Vec<TreeEntry> = found
            .into_iter()
            .map(|(path, list, kind)| TreeEntry {
                path,
                kind: kind_from_key(kind),
                list: if list == 0 {
                    TreeList::Protect
                } else {
                    TreeList::Mask
                },
            })
            .collect();
        any_masked_file |= entries
            .iter()
            .any(|e| e.list == TreeList::Mask && e.kind == EntryKind::File);
        tree.found.insert(source, entries);
    }
    if any_masked_file {
        tree.empty_file = Some(empty_file(bundle)?.display().to_string());
    }
    Ok(tree)
}

/// An empty, read-only regular file in the bundle.
fn empty_file(bundle: &Path) -> Result<PathBuf, HostTreeError> {
    let path = bundle.join(EMPTY_FILE);
    let made = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o444)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path);
    made.map_err(|source| HostTreeError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(protect: &[&str], mask: &[&str]) -> Policy {
        let mut p = Policy::default();
        p.mounts.protect = protect.iter().map(|s| s.to_string()).collect();
        p.mounts.mask = mask.iter().map(|s| s.to_string()).collect();
        p
    }

    fn spec_binding(src: &Path) -> Value {
        serde_json::json!({"mounts": [
            {"destination": "/w", "type": "bind", "source": src.to_str().unwrap(), "options": ["rbind"]},
            {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["rbind"]}
        ]})
    }

    #[test]
    fn finds_protected_and_masked_entries_and_makes_the_empty_file() {
        let project = tempfile::tempdir().unwrap();
        let bundle = tempfile::tempdir().unwrap();
        let p = project.path();
        fs::create_dir_all(p.join(".git/hooks")).unwrap();
        fs::write(p.join(".git/config"), "[core]\n").unwrap();
        fs::create_dir_all(p.join("svc/deep")).unwrap();
        fs::write(p.join(".env"), "KEY=1").unwrap();
        fs::write(p.join("svc/deep/.env.local"), "KEY=2").unwrap();
        std::os::unix::fs::symlink("/etc", p.join("svc/.env")).unwrap();
        let tree = scan(
            &spec_binding(p),
            &policy(
                &[".git/hooks", ".git/config", ".envrc"],
                &["**/.env", "**/.env.*"],
            ),
            bundle.path(),
        )
        .unwrap();
        let entries = &tree.found[p.to_str().unwrap()];
        let got: Vec<(&str, EntryKind, TreeList)> = entries
            .iter()
            .map(|e| (e.path.as_str(), e.kind, e.list))
            .collect();
        assert!(
            got.contains(&(".git/hooks", EntryKind::Dir, TreeList::Protect)),
            "{got:?}"
        );
        assert!(
            got.contains(&(".git/config", EntryKind::File, TreeList::Protect)),
            "{got:?}"
        );
        assert!(
            got.contains(&(".env", EntryKind::File, TreeList::Mask)),
            "{got:?}"
        );
        assert!(
            got.contains(&("svc/deep/.env.local", EntryKind::File, TreeList::Mask)),
            "{got:?}"
        );
        assert!(
            got.contains(&("svc/.env", EntryKind::Symlink, TreeList::Mask)),
            "{got:?}"
        );
        assert_eq!(got.len(), 5, "{got:?}");
        let empty = tree.empty_file.as_deref().unwrap();
        assert_eq!(fs::metadata(empty).unwrap().len(), 0);
        // The /etc/hosts bind is a file: never walked.
        assert_eq!(tree.found.len(), 1);
    }

    #[test]
    fn no_patterns_means_no_walk_and_no_file() {
        let project = tempfile::tempdir().unwrap();
        let bundle = tempfile::tempdir().unwrap();
        let tree = scan(
            &spec_binding(project.path()),
            &policy(&[], &[]),
            bundle.path(),
        )
        .unwrap();
        assert_eq!(tree, HostTree::default());
        assert!(!bundle.path().join(EMPTY_FILE).exists());
    }

    #[test]
    fn a_tree_too_large_to_walk_fails_instead_of_passing_unchecked() {
        let project = tempfile::tempdir().unwrap();
        let bundle = tempfile::tempdir().unwrap();
        const BOUND: usize = 50;
        for i in 0..BOUND / 10 + 1 {
            for j in 0..10 {
                fs::create_dir_all(project.path().join(format!("d{i}/e{j}"))).unwrap();
            }
        }
        let err = scan_bounded(
            &spec_binding(project.path()),
            &policy(&[], &["**/.env"]),
            bundle.path(),
            BOUND,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("more than 50 directories"),
            "{err}"
        );
        assert!(err.to_string().contains("narrower"), "{err}");
    }
}
