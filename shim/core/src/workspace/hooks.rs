//! What the owner's hooks run from the project (see `policy_injector::git_hooks` for why):
//! each hook in the repository's hooks directory is read, its tool recognised, and the project
//! files it names (directly, through its tool's config, or through a script it runs, a few
//! levels deep) become candidates to protect; what it reaches through a package manager or a
//! build tool is only reported. Every file is read without following a link at its last
//! component, bounded, and never executed.

use std::collections::VecDeque;
use std::fs;
use std::path::{Path, PathBuf};

use policy_injector::git_hooks::{recognise, tool_files, words, HookTool, Words};

use super::fsutil::read_regular;
use super::resolve::resolve;

/// Hook files read per repository.
const MAX_HOOKS: usize = 64;
/// Scripts and configs read per repository, the hooks included.
const MAX_FILES: usize = 128;
/// The largest script read; a larger one is not understood and said so.
const MAX_SCRIPT: u64 = 256 << 10;
/// Files read below a protected directory of a hook tool (`.husky`, `.lefthook`).
const MAX_DIR_FILES: usize = 64;

/// One hook and what it runs from the project, for the create record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct HookRuns {
    /// The hook file (absolute, as the host's git finds it).
    pub hook: PathBuf,
    pub tool: &'static str,
    /// Absolute paths it runs or reads that decide what runs.
    pub protect: Vec<PathBuf>,
    /// Absolute paths it reads or runs that are the agent's ordinary work.
    pub reported: Vec<PathBuf>,
    /// Absolute paths it would run if they appeared or changed, watched without a bind
    /// (husky 9 puts `node_modules/.bin` first on `PATH`: a command of the hook's there).
    pub watch: Vec<PathBuf>,
    /// Why it is not fully understood, when it is not.
    pub unread: Option<String>,
}

/// Reads the hooks in `hooks_dir` (as git takes it: the repository's `hooks` or its
/// `core.hooksPath`); relative names in them are taken from `worktree`.
pub(super) fn analyse(hooks_dir: &Path, worktree: &Path) -> Vec<HookRuns> {
    let dir = resolve(hooks_dir).target;
    let worktree_real = resolve(worktree).target;
    let rel_dir = dir
        .strip_prefix(&worktree_real)
        .ok()
        .and_then(Path::to_str)
        .map(str::to_string);
    let Ok(listing) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = listing
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".sample"))
        .collect();
    names.sort();
    names.truncate(MAX_HOOKS);
    let mut budget = MAX_FILES;
    names
        .into_iter()
        .map(|name| {
            let reader = Reader {
                worktree: worktree.to_path_buf(),
                budget: &mut budget,
            };
            reader.hook(&dir.join(&name), rel_dir.as_deref())
        })
        .collect()
}

struct Reader<'a> {
    worktree: PathBuf,
    budget: &'a mut usize,
}

impl Reader<'_> {
    fn hook(mut self, hook: &Path, rel_dir: Option<&str>) -> HookRuns {
        let mut out = HookRuns {
            hook: hook.to_path_buf(),
            tool: "script",
            ..HookRuns::default()
        };
        // The hook itself, when it is a project file (a hooks directory in the working tree,
        // or a link to a script there); one in the git directory is the staging copy's.
        let target = resolve(hook).target;
        out.protect.push(hook.to_path_buf());
        let text = match self.text(&target) {
            Ok(t) => t,
            Err(why) => {
                out.unread = Some(why);
                return out;
            }
        };
        let tool = recognise(&text, rel_dir);
        out.tool = tool_name(&tool);
        let shadowing =
            matches!(tool, HookTool::Husky9).then(|| self.worktree.join("node_modules/.bin"));
        let files = tool_files(&tool, rel_dir);
        out.protect
            .extend(files.protected.iter().map(|p| self.worktree.join(p)));
        out.reported
            .extend(files.reported.iter().map(|p| self.worktree.join(p)));
        // Scripts, configs and the files in the tool's directories, breadth first.
        let mut queue: VecDeque<PathBuf> = VecDeque::new();
        self.take_words(&words(&text), &mut out, &mut queue, shadowing.as_deref());
        for p in &files.protected {
            self.queue_tree(&self.worktree.join(p), &mut queue);
        }
        let mut read: Vec<PathBuf> = vec![target];
        while let Some(next) = queue.pop_front() {
            let real = resolve(&next).target;
            if read.contains(&real) || *self.budget == 0 {
                continue;
            }
            read.push(real.clone());
            if let Ok(text) = self.text(&real) {
                self.take_words(&words(&text), &mut out, &mut queue, shadowing.as_deref());
            }
        }
        if *self.budget == 0 {
            out.unread = Some(format!(
                "more than {MAX_FILES} scripts and configs: the rest was not read"
            ));
        }
        dedup(&mut out.protect);
        dedup(&mut out.reported);
        dedup(&mut out.watch);
        out
    }

    /// The text of a regular file within the bound, counted against the budget.
    fn text(&mut self, path: &Path) -> Result<String, String> {
        if *self.budget == 0 {
            return Err("not read: the bound on files read was reached".into());
        }
        *self.budget -= 1;
        match read_regular(path, MAX_SCRIPT) {
            Ok(Some(bytes)) if !bytes.contains(&0) => {
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Ok(Some(_)) => Err("a binary program: what it runs cannot be read".into()),
            Ok(None) => Err("its target does not exist".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The paths `w` names become protected (and queued to be read); its runners' files are
    /// protected or reported; with a project directory first on `PATH` (`shadowing`), each
    /// command's name there is watched.
    fn take_words(
        &self,
        w: &Words,
        out: &mut HookRuns,
        queue: &mut VecDeque<PathBuf>,
        shadowing: Option<&Path>,
    ) {
        if let Some(dir) = shadowing {
            out.watch.extend(w.commands.iter().map(|c| dir.join(c)));
        }
        // `~/` is the shell's home, never the project.
        for p in w.paths.iter().filter(|p| !p.starts_with('~')) {
            let path = self.path_of(p);
            if counts(w, p, &path) {
                queue.push_back(path.clone());
                out.protect.push(path);
            }
        }
        for name in &w.names {
            let path = self.worktree.join(name);
            if fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                queue.push_back(path.clone());
                out.protect.push(path);
            }
        }
        for r in &w.runners {
            for p in r.protected {
                let path = self.worktree.join(p);
                queue.push_back(path.clone());
                out.protect.push(path);
            }
            out.reported
                .extend(r.reported.iter().map(|p| self.worktree.join(p)));
        }
        for p in w.paths.iter().map(|p| self.path_of(p)) {
            if let Some(venv) = venv_of(&p, &self.worktree) {
                out.reported.push(venv.join("lib"));
            }
        }
    }

    /// A word as a path: absolute as written, `~/` is not the project, relative from the top
    /// of the working tree.
    fn path_of(&self, word: &str) -> PathBuf {
        let joined = if word.starts_with('/') {
            PathBuf::from(word)
        } else {
            self.worktree.join(word)
        };
        // `.` components out; `..` stays for the resolution to take after any link.
        joined.components().collect()
    }

    /// A hook tool's protected file, or the files of its protected directory (bounded): read
    /// too.
    fn queue_tree(&self, dir: &Path, queue: &mut VecDeque<PathBuf>) {
        if fs::metadata(dir).is_ok_and(|m| m.is_file()) {
            queue.push_back(dir.to_path_buf());
            return;
        }
        let mut stack = vec![(dir.to_path_buf(), 0)];
        let mut files = 0;
        while let Some((d, depth)) = stack.pop() {
            let Ok(entries) = fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let Ok(t) = e.file_type() else { continue };
                if t.is_dir() && depth < 3 {
                    stack.push((e.path(), depth + 1));
                } else if t.is_file() && files < MAX_DIR_FILES {
                    files += 1;
                    queue.push_back(e.path());
                }
            }
        }
    }
}

/// Whether the path word `word` (at `path`) is something a hook runs: a script it runs,
/// there or not (a new one would run), or an existing file an argument names (a config the
/// command reads, often code). A directory an argument names (`eslint src/`) is what the
/// command works on: protecting it would stop the agent's work, so it is not.
pub(super) fn counts(w: &Words, word: &str, path: &Path) -> bool {
    w.run_paths.iter().any(|r| r == word) || fs::metadata(path).is_ok_and(|m| m.is_file())
}

/// A path inside a Python virtual environment of the project (`.venv/bin/python3`, which a
/// pre-commit stub names when pre-commit was installed there): the environment's packages are
/// code the hook runs.
fn venv_of(path: &Path, worktree: &Path) -> Option<PathBuf> {
    let mut dir = path.parent()?;
    while dir.starts_with(worktree) && dir != worktree {
        if fs::symlink_metadata(dir.join("pyvenv.cfg")).is_ok_and(|m| m.is_file()) {
            return Some(dir.to_path_buf());
        }
        dir = dir.parent()?;
    }
    None
}

fn tool_name(tool: &HookTool) -> &'static str {
    match tool {
        HookTool::Husky9 => "husky 9",
        HookTool::Husky4 => "husky 4",
        HookTool::PreCommit { .. } => "pre-commit",
        HookTool::Lefthook => "lefthook",
        HookTool::Overcommit => "overcommit",
        HookTool::SimpleGitHooks => "simple-git-hooks",
        HookTool::Script => "script",
    }
}

fn dedup(v: &mut Vec<PathBuf>) {
    let mut seen = Vec::new();
    v.retain(|p| {
        let new = !seen.contains(p);
        if new {
            seen.push(p.clone());
        }
        new
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join(".git/hooks")).unwrap();
        (dir, root)
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn a_hook_that_runs_a_project_script_protects_it_and_what_it_sources() {
        let (_d, root) = project();
        write(
            &root.join(".git/hooks/pre-commit"),
            "#!/bin/sh\nexec sh scripts/pre-commit.sh \"$@\"\n",
        );
        write(
            &root.join("scripts/pre-commit.sh"),
            ". ./scripts/lib.sh\ncheck\n",
        );
        write(&root.join("scripts/lib.sh"), "check() { :; }\n");
        let runs = analyse(&root.join(".git/hooks"), &root);
        assert_eq!(runs.len(), 1);
        let p = &runs[0].protect;
        assert!(p.contains(&root.join("scripts/pre-commit.sh")), "{p:?}");
        assert!(p.contains(&root.join("scripts/lib.sh")), "{p:?}");
    }

    #[test]
    fn a_hook_that_is_a_link_protects_the_link_and_its_target() {
        let (_d, root) = project();
        write(&root.join("scripts/hook.sh"), "#!/bin/sh\ntrue\n");
        symlink("../../scripts/hook.sh", root.join(".git/hooks/pre-commit")).unwrap();
        let runs = analyse(&root.join(".git/hooks"), &root);
        let p = &runs[0].protect;
        assert!(p.contains(&root.join(".git/hooks/pre-commit")), "{p:?}");
    }

    #[test]
    fn a_directory_a_hook_works_on_stays_writable_and_a_script_it_runs_does_not() {
        let (_d, root) = project();
        write(
            &root.join(".git/hooks/pre-commit"),
            "#!/bin/sh\neslint --config cfg/eslint.cjs src/ && sh scripts/new.sh && cat dist/out.js\n",
        );
        write(&root.join("cfg/eslint.cjs"), "module.exports = {}\n");
        fs::create_dir_all(root.join("src")).unwrap();
        let p = &analyse(&root.join(".git/hooks"), &root)[0].protect;
        assert!(p.contains(&root.join("cfg/eslint.cjs")), "{p:?}");
        assert!(
            p.contains(&root.join("scripts/new.sh")),
            "a script it would run: {p:?}"
        );
        assert!(!p.contains(&root.join("src")), "{p:?}");
        assert!(!p.contains(&root.join("dist/out.js")), "{p:?}");
    }

    #[test]
    fn a_bare_file_name_counts_only_where_the_file_exists() {
        let (_d, root) = project();
        write(
            &root.join(".git/hooks/pre-commit"),
            "sh fmt.sh && sh gone.sh\n",
        );
        write(&root.join("fmt.sh"), "true\n");
        let p = &analyse(&root.join(".git/hooks"), &root)[0].protect;
        assert!(p.contains(&root.join("fmt.sh")), "{p:?}");
        assert!(!p.contains(&root.join("gone.sh")), "{p:?}");
    }

    #[test]
    fn husky_9_protects_its_directory_and_reads_the_user_hooks_in_it() {
        let (_d, root) = project();
        write(
            &root.join(".husky/_/pre-commit"),
            "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"",
        );
        write(&root.join(".husky/_/h"), "#!/usr/bin/env sh\n");
        write(
            &root.join(".husky/pre-commit"),
            "sh tools/check.sh\nnpx lint-staged\n",
        );
        let runs = analyse(&root.join(".husky/_"), &root);
        let pre = runs
            .iter()
            .find(|r| r.hook.ends_with("pre-commit"))
            .unwrap();
        assert_eq!(pre.tool, "husky 9");
        for p in [".husky", "tools/check.sh", ".lintstagedrc"] {
            assert!(
                pre.protect.contains(&root.join(p)),
                "{p}: {:?}",
                pre.protect
            );
        }
        for p in ["node_modules/.bin", "package.json"] {
            assert!(
                pre.reported.contains(&root.join(p)),
                "{p}: {:?}",
                pre.reported
            );
        }
    }

    #[test]
    fn pre_commit_protects_its_config_and_the_local_scripts_it_names() {
        let (_d, root) = project();
        write(
            &root.join(".git/hooks/pre-commit"),
            "# File generated by pre-commit\nINSTALL_PYTHON=/usr/bin/python3\nARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)\n",
        );
        write(
            &root.join(".pre-commit-config.yaml"),
            "repos:\n- repo: local\n  hooks:\n  - id: lint\n    entry: ./scripts/lint.sh\n    language: script\n",
        );
        let pre = &analyse(&root.join(".git/hooks"), &root)[0];
        assert_eq!(pre.tool, "pre-commit");
        assert!(pre.protect.contains(&root.join(".pre-commit-config.yaml")));
        assert!(
            pre.protect.contains(&root.join("scripts/lint.sh")),
            "{:?}",
            pre.protect
        );
    }

    #[test]
    fn lefthook_protects_the_scripts_its_config_names() {
        let (_d, root) = project();
        write(
            &root.join(".git/hooks/pre-commit"),
            "#!/bin/sh\ncall_lefthook()\n{\n  lefthook \"$@\"\n}\ncall_lefthook run \"pre-commit\"\n",
        );
        write(
            &root.join("lefthook.yml"),
            "pre-commit:\n  commands:\n    lint:\n      run: sh scripts/lint.sh\n",
        );
        let pre = &analyse(&root.join(".git/hooks"), &root)[0];
        assert_eq!(pre.tool, "lefthook");
        assert!(
            pre.protect.contains(&root.join("scripts/lint.sh")),
            "{:?}",
            pre.protect
        );
    }

    #[test]
    fn a_venv_the_hook_runs_python_from_is_reported() {
        let (_d, root) = project();
        write(&root.join(".venv/pyvenv.cfg"), "home = /usr/bin\n");
        write(
            &root.join(".git/hooks/pre-commit"),
            &format!("INSTALL_PYTHON={}/.venv/bin/python3\n", root.display()),
        );
        let pre = &analyse(&root.join(".git/hooks"), &root)[0];
        assert!(pre.reported.contains(&root.join(".venv/lib")), "{pre:?}");
    }

    #[test]
    fn a_binary_hook_is_said_to_be_not_understood() {
        let (_d, root) = project();
        write(&root.join(".git/hooks/pre-commit"), "\x7fELF\0\0\0");
        let pre = &analyse(&root.join(".git/hooks"), &root)[0];
        assert!(pre.unread.as_deref().unwrap().contains("binary"), "{pre:?}");
    }
}
