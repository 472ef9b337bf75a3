//! Paths in a writable bind that the developer's own git config and hooks make git run or
//! read: `core.hooksPath = .husky` (husky's setup), `include.path = ../.gitconfig` (a config
//! shared through the repository), `filter.x.clean = sh fmt.sh`, and what the hooks run
//! (`hooks.rs`). The sandbox can write those files, and the developer's next commit would run
//! them, so each is protected like a `[mounts] protect` path: read-only inside the sandbox,
//! quarantined at exit if the sandbox made a new one.
//!
//! Read for each repository: the system config, the global configs of the git directory's
//! owner (the developer who will run git there), the repository's config and config.worktree,
//! and every file they include, as the host's git would. A path counts when it ends inside a
//! bind once its symbolic links are followed (`resolve.rs`; the links on the way are watched);
//! `~/` is the owner's home. Values of keys the new-repository allowlist keeps (remote URLs,
//! branch names) are data and are not looked at; in every other value a word with a `/` that
//! is run (the command, or an interpreter's script) is taken for a path, there or not, and
//! every other word for a file when such a file is there (relative ones from the top of the
//! working tree, where git runs hooks, filters and aliases), which errs on the side of
//! protecting one file too many; a directory an argument names stays writable.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use policy_injector::git_config::{self, ConfigFile, KeyClass};
use policy_injector::git_hooks::words;
use policy_injector::HookNote;

use super::config::normalise;
use super::fsutil::read_regular;
use super::hooks::{self, HookRuns};
use super::resolve::{resolve, Binds};

/// Config files read per repository (includes included).
const MAX_FILES: usize = 32;
const MAX_INCLUDE_DEPTH: usize = 10;

/// What one repository's configs and hooks reach in the writable binds, each path as (bind
/// source as written, path relative to it).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Refs {
    /// Protected: read-only inside where they exist, quarantined at exit when new or replaced.
    pub protect: Vec<(String, String)>,
    /// Symbolic links on the way to those (a bind cannot cover a link without following it),
    /// and what a hook tool's `PATH` would find: each must be what it was at exit, or is
    /// quarantined.
    pub links: Vec<(String, String)>,
    /// The hooks that run project files, per bind, for the create record.
    pub hooks: Vec<(String, HookNote)>,
}

/// What the configs and hooks of the repository at `gitdir`, found in the bind `bind`, reach
/// in `binds`.
pub(super) fn references(gitdir: &Path, binds: &Binds, bind: &str) -> Refs {
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
    let mut places = Places::new(gitdir, binds, bind);
    for f in &reader.files {
        places.protect(f);
    }
    let mut hooks_dir = gitdir.join("hooks");
    for (_, config) in &reader.configs {
        for entry in &config.entries {
            let Some(value) = entry.value.as_deref() else {
                continue;
            };
            if entry.key.to_string() == "core.hookspath" {
                if let Some(p) = reader.resolve(value, &worktree) {
                    places.protect(&p);
                    hooks_dir = p;
                }
                continue;
            }
            if git_config::allowed(KeyClass::NewRepo, entry).is_ok() {
                continue;
            }
            // A command git runs from the top of the working tree: its path words, and its
            // bare words that name a file there (`sh fmt.sh`).
            let text = String::from_utf8_lossy(value);
            let w = words(&text);
            for word in &w.paths {
                let Some(p) = reader.resolve(word.as_bytes(), &worktree) else {
                    continue;
                };
                if hooks::counts(&w, word, &p) {
                    places.protect(&p);
                }
            }
            for name in &w.names {
                let p = worktree.join(name);
                if fs::metadata(&p).is_ok_and(|m| m.is_file()) {
                    places.protect(&p);
                }
            }
        }
    }
    // A hooks directory that is (or leads into) the project is protected as a whole.
    places.protect(&hooks_dir);
    for runs in hooks::analyse(&hooks_dir, &worktree) {
        places.hook(runs);
    }
    places.finish()
}

/// Turns absolute paths into bind-relative ones through [`resolve`], leaving out what is
/// inside the git directory itself (its staging copy stands in for it) or outside every bind.
struct Places<'a> {
    gitdir: PathBuf,
    binds: &'a Binds,
    /// The bind the repository is in: its hooks are named under it.
    bind: String,
    out: Refs,
}

impl<'a> Places<'a> {
    fn new(gitdir: &Path, binds: &'a Binds, bind: &str) -> Places<'a> {
        Places {
            gitdir: resolve(gitdir).target,
            binds,
            bind: bind.to_string(),
            out: Refs::default(),
        }
    }

    /// Where `path` is in a bind once its links are followed, the links on the way recorded.
    fn place(&mut self, path: &Path) -> Option<(String, String)> {
        let r = resolve(path);
        for link in &r.links {
            if link.starts_with(&self.gitdir) {
                continue;
            }
            if let Some((bind, rel)) = self.binds.locate(link) {
                push(&mut self.out.links, (bind.to_string(), rel));
            }
        }
        if r.target.starts_with(&self.gitdir) {
            return None;
        }
        self.binds
            .locate(&r.target)
            .map(|(b, rel)| (b.to_string(), rel))
    }

    /// Protects what `path` leads to; inside a dependency directory (`node_modules`), where
    /// the agent's installs must keep working, watches it instead. Returns the relative path
    /// and whether it is protected (true) or watched.
    fn protect(&mut self, path: &Path) -> Option<(String, bool)> {
        let placed = self.place(path)?;
        let rel = placed.1.clone();
        if Path::new(&rel)
            .components()
            .any(|c| c.as_os_str() == "node_modules")
        {
            push(&mut self.out.links, placed);
            return Some((rel, false));
        }
        push(&mut self.out.protect, placed);
        Some((rel, true))
    }

    fn hook(&mut self, runs: HookRuns) {
        let mut note = HookNote {
            hook: match self.binds.locate(&runs.hook) {
                Some((_, rel)) => rel,
                None => runs.hook.display().to_string(),
            },
            tool: runs.tool.to_string(),
            unread: runs.unread,
            ..HookNote::default()
        };
        for p in &runs.protect {
            match self.protect(p) {
                Some((rel, true)) => push(&mut note.protected, rel),
                Some((rel, false)) => push(&mut note.watched, rel),
                None => {}
            }
        }
        for p in &runs.watch {
            let (Some(dir), Some(name)) = (p.parent(), p.file_name()) else {
                continue;
            };
            if let Some((b, rel)) = self.binds.locate(&resolve(dir).target.join(name)) {
                push(&mut self.out.links, (b.to_string(), rel.clone()));
                push(&mut note.watched, rel);
            }
        }
        for p in &runs.reported {
            // Named under the repository's own bind (where the hook's relative names are).
            match self.binds.locate(&resolve(p).target) {
                Some((b, rel)) if b == self.bind => push(&mut note.reported, rel),
                _ => {}
            }
        }
        if !note.protected.is_empty()
            || !note.reported.is_empty()
            || !note.watched.is_empty()
            || note.unread.is_some()
        {
            self.out.hooks.push((self.bind.clone(), note));
        }
    }

    /// The result, each list sorted, a path inside another protected path left out (the
    /// parent's bind covers it).
    fn finish(mut self) -> Refs {
        self.out.protect.sort();
        let all = self.out.protect.clone();
        self.out.protect.retain(|(b, rel)| {
            !all.iter()
                .any(|(ob, orel)| ob == b && rel.starts_with(&format!("{orel}/")))
        });
        self.out.links.sort();
        self.out
    }
}

fn push<T: PartialEq>(v: &mut Vec<T>, item: T) {
    if !v.contains(&item) {
        v.push(item);
    }
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
    use std::os::unix::fs::symlink;

    fn repo(root: &Path, config: &str) -> PathBuf {
        let git = root.join(".git");
        fs::create_dir_all(git.join("hooks")).unwrap();
        fs::write(git.join("config"), config).unwrap();
        git
    }

    fn project() -> (tempfile::TempDir, PathBuf, String) {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        let source = root.display().to_string();
        (dir, root, source)
    }

    fn protected(refs: &Refs) -> Vec<&str> {
        refs.protect.iter().map(|(_, r)| r.as_str()).collect()
    }

    fn refs_of(git: &Path, source: &str) -> Refs {
        references(git, &Binds::new(&[source.to_string()]), source)
    }

    #[test]
    fn a_hooks_path_in_the_working_tree_is_a_reference() {
        let (_d, root, source) = project();
        let git = repo(&root, "[core]\n\thooksPath = .husky\n");
        assert_eq!(protected(&refs_of(&git, &source)), [".husky"]);
    }

    #[test]
    fn an_included_file_in_the_tree_and_what_it_names_are_references() {
        let (_d, root, source) = project();
        let git = repo(&root, "[include]\n\tpath = ../tools/gitconfig\n");
        fs::create_dir_all(root.join("tools")).unwrap();
        fs::write(
            root.join("tools/gitconfig"),
            "[filter \"fmt\"]\n\tclean = ./tools/fmt.sh %f\n",
        )
        .unwrap();
        let refs = refs_of(&git, &source);
        assert_eq!(protected(&refs), ["tools/fmt.sh", "tools/gitconfig"]);
    }

    #[test]
    fn a_bare_file_name_in_a_command_is_a_reference_where_the_file_exists() {
        let (_d, root, source) = project();
        let git = repo(
            &root,
            "[filter \"fmt\"]\n\tclean = sh fmt.sh\n[alias]\n\tt = !sh tool.sh\n[diff \"x\"]\n\ttextconv = python3 conv.py\n",
        );
        for f in ["fmt.sh", "tool.sh"] {
            fs::write(root.join(f), "true\n").unwrap();
        }
        // conv.py does not exist: `python3 conv.py` would fail, and a new one is not looked
        // for (only paths with a `/` are watched for creation).
        assert_eq!(protected(&refs_of(&git, &source)), ["fmt.sh", "tool.sh"]);
    }

    #[test]
    fn commands_from_path_and_urls_are_not_references() {
        let (_d, root, source) = project();
        let git = repo(
            &root,
            "[core]\n\tfsmonitor = watchman-hook\n[remote \"o\"]\n\turl = ../other/repo\n[diff \"x\"]\n\ttextconv = /usr/bin/strings\n",
        );
        assert!(refs_of(&git, &source).protect.is_empty());
    }

    #[test]
    fn paths_outside_the_bind_are_not_references() {
        let (_d, root, _) = project();
        let project = root.join("p");
        let git = repo(&project, "[core]\n\thooksPath = ../../shared-hooks\n");
        assert!(refs_of(&git, &project.display().to_string())
            .protect
            .is_empty());
    }

    #[test]
    fn a_hooks_path_that_is_a_link_protects_its_target_and_watches_the_link() {
        let (_d, root, source) = project();
        let git = repo(&root, "[core]\n\thooksPath = .githooks\n");
        fs::create_dir_all(root.join("tools/hooks")).unwrap();
        symlink("tools/hooks", root.join(".githooks")).unwrap();
        let refs = refs_of(&git, &source);
        assert_eq!(protected(&refs), ["tools/hooks"]);
        assert_eq!(refs.links, [(source.clone(), ".githooks".to_string())]);
    }

    #[test]
    fn a_hooks_directory_linked_into_the_project_is_protected() {
        let (_d, root, source) = project();
        let git = repo(&root, "");
        fs::remove_dir(git.join("hooks")).unwrap();
        fs::create_dir_all(root.join("scripts/hooks")).unwrap();
        fs::write(root.join("scripts/hooks/pre-commit"), "#!/bin/sh\ntrue\n").unwrap();
        symlink("../scripts/hooks", git.join("hooks")).unwrap();
        let refs = refs_of(&git, &source);
        assert!(protected(&refs).contains(&"scripts/hooks"), "{refs:?}");
        assert_eq!(refs.hooks.len(), 1, "{refs:?}");
        assert_eq!(refs.hooks[0].1.hook, "scripts/hooks/pre-commit");
    }

    #[test]
    fn a_path_inside_a_protected_directory_is_covered_by_it() {
        let (_d, root, source) = project();
        let git = repo(&root, "[core]\n\thooksPath = .husky/_\n");
        fs::create_dir_all(root.join(".husky/_")).unwrap();
        fs::write(
            root.join(".husky/_/pre-commit"),
            "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"",
        )
        .unwrap();
        fs::write(root.join(".husky/pre-commit"), "npx lint-staged\n").unwrap();
        let refs = refs_of(&git, &source);
        let p = protected(&refs);
        assert!(p.contains(&".husky"), "{p:?}");
        assert!(!p.iter().any(|r| r.starts_with(".husky/")), "{p:?}");
        let note = &refs.hooks[0].1;
        assert_eq!(note.tool, "husky 9");
        assert!(
            note.reported.contains(&"package.json".to_string()),
            "{note:?}"
        );
    }
}
