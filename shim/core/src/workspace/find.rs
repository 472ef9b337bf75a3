//! The create-time search: every git directory and gitlink below a writable bind's source.
//!
//! A walk of the whole tree, since a repository can be anywhere (a vendored library, a test
//! fixture, a submodule). It never follows a symbolic link, stops below a git directory's data
//! directories (their contents are the repository's objects and refs, and they are bound live
//! anyway), and lists at most `max_dirs` directories over all binds: a larger tree fails the
//! create rather than leave a repository in it unprotected.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use policy_injector::policy::WorkspacePolicy;
use policy_injector::workspace::{is_git_dir, LIVE_DIRS, STAGING_DIR};
use policy_injector::{GitEntry, GitEntryKind, GitTree};
use sha2::{Digest, Sha256};

use super::fsutil::{list_dir, Listed, MAX_GIT_PATH};
use super::refs::{references, Refs};
use super::resolve::Binds;
use super::WorkspaceError;

/// Where a container's staging copy of `gitdir` lives.
pub fn staging_path(gitdir: &Path, container_id: &str) -> PathBuf {
    gitdir.join(STAGING_DIR).join(id_component(container_id))
}

/// A container id as one path component: as it is when it can be one (the shim's ids always
/// can), else a digest of it (runc's command line allows ids of any bytes but `/`-free ones
/// up to 1024 characters, which a file name cannot hold).
fn id_component(id: &str) -> String {
    let plain = crate::container_id::is_valid(id);
    if plain {
        id.to_string()
    } else {
        let digest = Sha256::digest(id.as_bytes());
        format!("id-{}", crate::artifacts::hex(&digest[..16]))
    }
}

struct Search<'a> {
    container_id: &'a str,
    dirs_left: u64,
    limit: u64,
    max_repos: usize,
    repos: usize,
    /// Directories that are mount points inside a bind (another filesystem), by identity: a
    /// bind mount of a directory into itself would otherwise be walked forever.
    mount_roots: HashSet<(u64, u64)>,
}

/// What the search found: the git directories and gitlinks for the mounts rule (with the
/// owner's hooks that run project files, for the create record), and per bind source what the
/// repositories' configs and hooks reach (see `refs.rs`): paths to protect, the links on the way
/// to them, and what is only reported.
#[derive(Debug, Default)]
pub struct Found {
    pub tree: GitTree,
    pub references: BTreeMap<String, Vec<String>>,
    pub links: BTreeMap<String, Vec<String>>,
    /// Per bind: the paths left writable that hooks read or run, with those hooks.
    pub reported: BTreeMap<String, Vec<(String, Vec<String>)>>,
}

impl Found {
    fn add(&mut self, refs: Refs) {
        let put = |map: &mut BTreeMap<String, Vec<String>>, items: Vec<(String, String)>| {
            for (bind, rel) in items {
                let list = map.entry(bind).or_default();
                if !list.contains(&rel) {
                    list.push(rel);
                }
            }
        };
        put(&mut self.references, refs.protect);
        put(&mut self.links, refs.links);
        for (bind, note) in refs.hooks {
            let inputs = self.reported.entry(bind.clone()).or_default();
            for rel in &note.reported {
                match inputs.iter_mut().find(|(r, _)| r == rel) {
                    Some((_, hooks)) => hooks.push(note.hook.clone()),
                    None => inputs.push((rel.clone(), vec![note.hook.clone()])),
                }
            }
            self.tree.hooks.entry(bind).or_default().push(note);
        }
    }
}

/// Searches each bind source (as the spec writes it) for git directories and gitlinks.
pub fn find(
    sources: &[String],
    policy: &WorkspacePolicy,
    container_id: &str,
) -> Result<Found, WorkspaceError> {
    let mut out = Found::default();
    if !policy.git {
        return Ok(out);
    }
    let mut search = Search {
        container_id,
        dirs_left: policy.max_dirs,
        limit: policy.max_dirs,
        max_repos: policy.max_repositories as usize,
        repos: 0,
        mount_roots: HashSet::new(),
    };
    let binds = Binds::new(sources);
    for source in sources {
        let root = Path::new(source);
        let meta = fs::metadata(root).map_err(WorkspaceError::io(root))?;
        if !meta.is_dir() {
            continue;
        }
        let mut found = Vec::new();
        search.walk(source, root, meta.dev(), &mut found)?;
        for e in &found {
            if matches!(e.kind, GitEntryKind::Dir { .. }) {
                out.add(references(&root.join(&e.path), &binds, source));
            }
        }
        if !found.is_empty() {
            out.tree.found.insert(source.clone(), found);
        }
    }
    for list in out.references.values_mut().chain(out.links.values_mut()) {
        list.sort();
    }
    Ok(out)
}

fn rel_string(source: &str, rel: &Path) -> Result<String, WorkspaceError> {
    rel.to_str()
        .map(str::to_string)
        .ok_or_else(|| WorkspaceError::Refused {
            path: Path::new(source).join(rel),
            reason: "a git directory or gitlink below a name that is not UTF-8 cannot be protected; rename it".into(),
        })
}

impl Search<'_> {
    fn walk(
        &mut self,
        source: &str,
        root: &Path,
        root_dev: u64,
        found: &mut Vec<GitEntry>,
    ) -> Result<(), WorkspaceError> {
        // Depth first, with an explicit stack: the tree is the developer's and can be deep.
        let mut stack: Vec<PathBuf> = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let path = root.join(&rel);
            if path.as_os_str().len() > MAX_GIT_PATH {
                // Beyond PATH_MAX git cannot open or enter a directory, and neither can a
                // developer's shell: nothing there is ever a repository of theirs.
                continue;
            }
            if self.dirs_left == 0 {
                return Err(WorkspaceError::TooManyDirs {
                    source_dir: source.to_string(),
                    limit: self.limit,
                });
            }
            self.dirs_left -= 1;
            let Listed { entries, dev, ino } = list_dir(&path)?;
            if dev != root_dev && !self.mount_roots.insert((dev, ino)) {
                continue;
            }
            let name: OsString = match rel.file_name() {
                Some(n) => n.to_os_string(),
                None => root
                    .file_name()
                    .map(|n| n.to_os_string())
                    .unwrap_or_default(),
            };
            let has = |n: &str| entries.iter().any(|e| e.name.as_bytes() == n.as_bytes());
            let git_dir = is_git_dir(&name.to_string_lossy(), has);
            if git_dir {
                self.repos += 1;
                if self.repos > self.max_repos {
                    return Err(WorkspaceError::Refused {
                        path: path.clone(),
                        reason: format!(
                            "more than {} git directories in writable binds (max_repositories)",
                            self.max_repos
                        ),
                    });
                }
                let live: Vec<String> = LIVE_DIRS
                    .iter()
                    .filter(|d| {
                        entries
                            .iter()
                            .any(|e| e.is_dir && e.name.as_bytes() == d.as_bytes())
                    })
                    .map(|d| d.to_string())
                    .collect();
                found.push(GitEntry {
                    path: rel_string(source, &rel)?,
                    kind: GitEntryKind::Dir {
                        staging: staging_path(&path, self.container_id).display().to_string(),
                        live,
                    },
                });
            }
            for e in &entries {
                let child = rel.join(&e.name);
                if e.name == ".git" && e.is_file {
                    found.push(GitEntry {
                        path: rel_string(source, &child)?,
                        kind: GitEntryKind::Link,
                    });
                    continue;
                }
                if !e.is_dir {
                    continue;
                }
                if git_dir {
                    let n = e.name.as_bytes();
                    if n == STAGING_DIR.as_bytes() || LIVE_DIRS.iter().any(|d| d.as_bytes() == n) {
                        continue;
                    }
                }
                stack.push(child);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> WorkspacePolicy {
        WorkspacePolicy::default()
    }

    fn git_dir(p: &Path) {
        fs::create_dir_all(p.join("objects/ab")).unwrap();
        fs::create_dir_all(p.join("refs/heads")).unwrap();
        fs::create_dir_all(p.join("hooks")).unwrap();
        fs::write(p.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    }

    fn paths(tree: &GitTree, source: &str) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = tree.found[source]
            .iter()
            .map(|e| (e.path.clone(), matches!(e.kind, GitEntryKind::Dir { .. })))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn finds_nested_repositories_submodules_bare_repositories_and_gitlinks() {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        git_dir(&p.join(".git"));
        git_dir(&p.join(".git/modules/sub"));
        fs::create_dir_all(p.join("sub")).unwrap();
        fs::write(p.join("sub/.git"), "gitdir: ../.git/modules/sub\n").unwrap();
        git_dir(&p.join("vendor/lib/.git"));
        git_dir(&p.join("tests/fixtures/remote.git"));
        fs::create_dir_all(p.join("src/deep/er")).unwrap();
        let source = p.to_str().unwrap().to_string();
        let tree = find(std::slice::from_ref(&source), &policy(), "c1")
            .unwrap()
            .tree;
        assert_eq!(
            paths(&tree, &source),
            [
                (".git".to_string(), true),
                (".git/modules/sub".to_string(), true),
                ("sub/.git".to_string(), false),
                ("tests/fixtures/remote.git".to_string(), true),
                ("vendor/lib/.git".to_string(), true),
            ]
        );
        let GitEntryKind::Dir { staging, live } = &tree.found[&source]
            .iter()
            .find(|e| e.path == ".git")
            .unwrap()
            .kind
        else {
            panic!()
        };
        assert_eq!(*staging, format!("{source}/.git/gvisor-hardened/c1"));
        assert_eq!(live, &["objects", "refs"]);
    }

    #[test]
    fn symbolic_links_are_never_followed() {
        let project = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        git_dir(&elsewhere.path().join("repo"));
        std::os::unix::fs::symlink(elsewhere.path(), project.path().join("link")).unwrap();
        let source = project.path().to_str().unwrap().to_string();
        let tree = find(&[source], &policy(), "c1").unwrap().tree;
        assert!(tree.found.is_empty());
    }

    #[test]
    fn a_tree_over_the_bound_fails_rather_than_stay_half_searched() {
        let project = tempfile::tempdir().unwrap();
        for i in 0..10 {
            fs::create_dir_all(project.path().join(format!("d{i}"))).unwrap();
        }
        let mut p = policy();
        p.max_dirs = 5;
        let source = project.path().to_str().unwrap().to_string();
        let e = find(&[source], &p, "c1").unwrap_err();
        assert!(e.to_string().contains("max_dirs"), "{e}");
    }

    #[test]
    fn more_repositories_than_the_bound_fail_the_search() {
        let project = tempfile::tempdir().unwrap();
        for i in 0..3 {
            git_dir(&project.path().join(format!("r{i}/.git")));
        }
        let mut p = policy();
        p.max_repositories = 2;
        let source = project.path().to_str().unwrap().to_string();
        let e = find(&[source], &p, "c1").unwrap_err();
        assert!(e.to_string().contains("max_repositories"), "{e}");
    }

    #[test]
    fn data_directories_and_staging_copies_are_not_searched() {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        git_dir(&p.join(".git"));
        // Shapes inside objects/ or another container's staging copy are not repositories of
        // the developer's.
        git_dir(&p.join(".git/objects/ab/x"));
        git_dir(&p.join(".git/gvisor-hardened/other"));
        let source = p.to_str().unwrap().to_string();
        let tree = find(std::slice::from_ref(&source), &policy(), "c1")
            .unwrap()
            .tree;
        assert_eq!(paths(&tree, &source), [(".git".to_string(), true)]);
    }

    #[test]
    fn ids_that_cannot_be_file_names_are_digested() {
        assert_eq!(id_component("job-1_a.b"), "job-1_a.b");
        let long = "x".repeat(300);
        assert!(id_component(&long).starts_with("id-"));
        assert!(id_component("a/b").starts_with("id-"));
        assert_ne!(id_component(".."), "..");
    }
}
