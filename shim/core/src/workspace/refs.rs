//! Paths in a writable bind that the developer's own git config makes git run or read:
//! `core.hooksPath = .husky` (husky's setup), `include.path = ../.gitconfig` (a config shared
//! through the repository), `filter.x.clean = ./tools/clean.sh`. The sandbox can write those
//! files, and the developer's next commit would run them, so each is protected like a
//! `[mounts] protect` path: read-only inside the sandbox, quarantined at exit if the sandbox
//! made a new one.
//!
//! Read for each repository: the system config, the global configs of the git directory's
//! owner (the developer who will run git there), the repository's config and config.worktree,
//! and every file they include, as the host's git would. A path counts when it names something
//! inside the bind; `~/` is the owner's home. Values of keys the new-repository allowlist keeps
//! (remote URLs, branch names) are data and are not looked at; in every other value each token
//! with a `/` is taken for a path (relative ones from the top of the working tree, where git
//! runs hooks, filters and aliases), which errs on the side of protecting one path too many.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use policy_injector::git_config::{self, ConfigFile, KeyClass};

use super::config::normalise;
use super::fsutil::read_regular;

/// Config files read per repository (includes included).
const MAX_FILES: usize = 32;
const MAX_INCLUDE_DEPTH: usize = 10;

/// What a repository's configs point at inside `bind_root`, relative to it.
pub(super) fn config_references(gitdir: &Path, bind_root: &Path) -> Vec<String> {
    let owner_home = fs::metadata(gitdir).ok().and_then(|m| home_of(m.uid()));
    let mut reader = Reader {
        home: owner_home.clone(),
        files: Vec::new(),
        configs: Vec::new(),
    };
    reader.read(Path::new("/etc/gitconfig"), 0);
    if let Some(home) = &owner_home {
        reader.read(&home.join(".gitconfig"), 0);
        reader.read(&home.join(".config/git/config"), 0);
    }
    reader.read(&gitdir.join("config"), 0);
    reader.read(&gitdir.join("config.worktree"), 0);
    let worktree = worktree_of(gitdir, &reader.configs);
    let mut paths: Vec<PathBuf> = reader.files.clone();
    for (_, config) in &reader.configs {
        for entry in &config.entries {
            let Some(value) = entry.value.as_deref() else {
                continue;
            };
            let key = entry.key.to_string();
            if key == "core.hookspath" {
                if let Some(p) = reader.resolve(value, &worktree) {
                    paths.push(p);
                }
                continue;
            }
            if git_config::allowed(KeyClass::NewRepo, entry).is_ok() {
                continue;
            }
            for token in value
                .split(|b| b" \t;|&()<>'\"`".contains(b))
                .filter(|t| t.contains(&b'/'))
            {
                if let Some(p) = reader.resolve(token, &worktree) {
                    paths.push(p);
                }
            }
        }
    }
    // What is inside the git directory is in its staging copy: the host's own never reaches
    // the sandbox.
    let mut out: Vec<String> = paths
        .into_iter()
        .filter(|p| !p.starts_with(gitdir))
        .filter_map(|p| {
            let rel = p.strip_prefix(bind_root).ok()?;
            (!rel.as_os_str().is_empty()).then(|| rel.to_str().map(str::to_string))?
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

struct Reader {
    home: Option<PathBuf>,
    /// Every config file read (an included one inside the bind is itself a reference).
    files: Vec<PathBuf>,
    configs: Vec<(PathBuf, ConfigFile)>,
}

impl Reader {
    fn read(&mut self, path: &Path, depth: usize) {
        if depth > MAX_INCLUDE_DEPTH
            || self.files.len() >= MAX_FILES
            || self.files.iter().any(|f| f == path)
        {
            return;
        }
        self.files.push(path.to_path_buf());
        let Ok(Some(bytes)) = read_regular(path, super::config::MAX_CONFIG) else {
            return;
        };
        // A config git cannot read makes the host's git fail before it runs anything.
        let Ok(config) = git_config::parse(&bytes) else {
            return;
        };
        let dir = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let includes: Vec<PathBuf> = config
            .entries
            .iter()
            .filter(|e| {
                let s = e.key.section();
                (s == "include" || s == "includeif") && e.key.name() == "path"
            })
            .filter_map(|e| e.value.as_deref().and_then(|v| self.resolve(v, &dir)))
            .collect();
        self.configs.push((path.to_path_buf(), config));
        for inc in includes {
            self.read(&inc, depth + 1);
        }
    }

    /// A path as git takes it from a config value: `~/` from the owner's home, relative from
    /// `base`; normalised without touching the disk.
    fn resolve(&self, value: &[u8], base: &Path) -> Option<PathBuf> {
        let text = std::str::from_utf8(value).ok()?.trim();
        if text.is_empty() {
            return None;
        }
        let joined = if let Some(rest) = text.strip_prefix("~/") {
            self.home.as_ref()?.join(rest)
        } else if text.starts_with('~') {
            return None;
        } else {
            base.join(text)
        };
        Some(normalise(&joined))
    }
}

/// The working tree whose root relative paths start from: the parent of a `.git` directory,
/// `core.worktree` when set (a submodule's git directory), else the git directory (bare).
fn worktree_of(gitdir: &Path, configs: &[(PathBuf, ConfigFile)]) -> PathBuf {
    let from_config = configs
        .iter()
        .filter(|(p, _)| p.starts_with(gitdir))
        .flat_map(|(_, c)| c.entries.iter())
        .filter(|e| e.key.to_string() == "core.worktree")
        .filter_map(|e| e.value.as_deref())
        .filter_map(|v| std::str::from_utf8(v).ok())
        .next_back()
        .map(|v| normalise(&gitdir.join(v)));
    if let Some(w) = from_config {
        return w;
    }
    if gitdir.file_name().map(|n| n.as_bytes()) == Some(b".git") {
        gitdir.parent().unwrap_or(gitdir).to_path_buf()
    } else {
        gitdir.to_path_buf()
    }
}

/// The home directory of `uid` from the host's passwd file.
fn home_of(uid: u32) -> Option<PathBuf> {
    let passwd = read_regular(Path::new("/etc/passwd"), 4 << 20).ok()??;
    passwd.split(|b| *b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|b| *b == b':').collect();
        let entry_uid: u32 = std::str::from_utf8(fields.get(2)?).ok()?.parse().ok()?;
        let home = fields.get(5)?;
        (entry_uid == uid).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(home)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(root: &Path, config: &str) -> PathBuf {
        let git = root.join(".git");
        fs::create_dir_all(&git).unwrap();
        fs::write(git.join("config"), config).unwrap();
        git
    }

    #[test]
    fn a_hooks_path_in_the_working_tree_is_a_reference() {
        let dir = tempfile::tempdir().unwrap();
        let git = repo(dir.path(), "[core]\n\thooksPath = .husky\n");
        assert_eq!(config_references(&git, dir.path()), [".husky"]);
    }

    #[test]
    fn an_included_file_in_the_tree_and_what_it_names_are_references() {
        let dir = tempfile::tempdir().unwrap();
        let git = repo(dir.path(), "[include]\n\tpath = ../tools/gitconfig\n");
        fs::create_dir_all(dir.path().join("tools")).unwrap();
        fs::write(
            dir.path().join("tools/gitconfig"),
            "[filter \"fmt\"]\n\tclean = ./tools/fmt.sh %f\n",
        )
        .unwrap();
        let refs = config_references(&git, dir.path());
        assert!(refs.contains(&"tools/gitconfig".to_string()), "{refs:?}");
        assert!(refs.contains(&"tools/fmt.sh".to_string()), "{refs:?}");
    }

    #[test]
    fn commands_from_path_and_urls_are_not_references() {
        let dir = tempfile::tempdir().unwrap();
        let git = repo(
            dir.path(),
            "[core]\n\tfsmonitor = watchman-hook\n[remote \"o\"]\n\turl = ../other/repo\n[diff \"x\"]\n\ttextconv = /usr/bin/strings\n",
        );
        assert!(config_references(&git, dir.path()).is_empty());
    }

    #[test]
    fn paths_outside_the_bind_are_not_references() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        let git = repo(&project, "[core]\n\thooksPath = ../../shared-hooks\n");
        assert!(config_references(&git, &project).is_empty());
    }
}
