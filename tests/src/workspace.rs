//! What the `[mounts.workspace]` tests need: a project the way a developer has one (a
//! repository with a commit, a remote, a submodule, a nested repository, a branch to merge, a
//! husky-style hooks directory and a shared config file its config includes, editor tasks and
//! an .envrc), made by the host's git as the owner (uid 1000); the owner's git commands run on
//! it afterwards; and the attacks, each a shell script that a sandbox (or, for the baseline,
//! the owner directly on the host) runs in the project, with the owner's commands that would
//! run the planted code. Planted code writes to a canary file outside the project; a canary
//! that exists afterwards means the attack worked.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::process::{output_with_deadline, CommandOutput};

/// The developer's uid and gid: the project's owner, who runs git on the host.
pub const OWNER: u32 = 1000;

/// One attack: what the sandbox does, and what the owner runs afterwards.
pub struct Attack {
    pub name: &'static str,
    /// What the owner had set up before the sandbox ran (run on the project copy first).
    pub setup: &'static str,
    /// Shell run in the project's root. `$C` is the canary file, `evil FILE` writes a script
    /// there that appends to it.
    pub script: &'static str,
    /// The owner's commands, run in the project's root on the host after the sandbox ended.
    pub trigger: &'static str,
}

/// Every attack of issue 17, and the config keys it lists, each with a trigger that makes the
/// host's git run the planted code when nothing stops it.
pub const ATTACKS: &[Attack] = &[
    Attack { setup: "", name: "hook", script: "evil .git/hooks/pre-commit", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "hooks-path", script: "mkdir -p .evilhooks && evil .evilhooks/pre-commit && git config core.hooksPath .evilhooks", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "fsmonitor", script: "evil .evil && git config core.fsmonitor ./.evil", trigger: "git status" },
    Attack { setup: "", name: "ssh-command", script: "evil .evil && git config core.sshCommand ./.evil", trigger: "git ls-remote ssh://127.0.0.1:1/x" },
    Attack { setup: "", name: "editor", script: "evil .evil && git config core.editor ./.evil", trigger: "git commit -q --allow-empty" },
    Attack { setup: "", name: "pager", script: "evil .evil && git config core.pager ./.evil", trigger: "script -qec 'git -p log -1' /dev/null < /dev/null" },
    Attack { setup: "", name: "sequence-editor", script: "evil .evil && git config sequence.editor ./.evil", trigger: "git rebase -q -i HEAD~1" },
    Attack { setup: "", name: "textconv", script: "evil .evil && echo '*.txt diff=evil' >> .gitattributes && git config diff.evil.textconv ./.evil && echo changed >> notes.txt", trigger: "git diff notes.txt" },
    Attack { setup: "", name: "diff-external", script: "evil .evil && git config diff.external ./.evil && echo changed >> notes.txt", trigger: "git diff notes.txt" },
    Attack { setup: "", name: "filter", script: "evil .evil && echo '*.dat filter=evil' >> .gitattributes && git config filter.evil.clean ./.evil && echo new > y.dat", trigger: "git add y.dat" },
    Attack { setup: "", name: "merge-driver", script: "evil .evil && echo 'README merge=evil' >> .gitattributes && git config merge.evil.driver ./.evil", trigger: "git merge -q other -m m" },
    Attack { setup: "", name: "credential-helper", script: "evil .evil && git config credential.helper '!./.evil'", trigger: "printf 'protocol=https\\nhost=127.0.0.1\\n\\n' | git credential fill" },
    Attack { setup: "", name: "gpg-program", script: "evil .evil && git config gpg.program ./.evil", trigger: "git commit -q -S --allow-empty -m t" },
    Attack { setup: "", name: "alias", script: "evil .evil && git config alias.st '!./.evil'", trigger: "git st" },
    Attack { setup: "", name: "include", script: "evil .evil && printf '[core]\\n\\tfsmonitor = ./.evil\\n' > .evil.inc && git config include.path ../.evil.inc", trigger: "git status" },
    Attack { setup: "", name: "include-if", script: "evil .evil && printf '[core]\\n\\tfsmonitor = ./.evil\\n' > .evil.inc && git config 'includeIf.gitdir:/.path' ../.evil.inc", trigger: "git status" },
    Attack { setup: "", name: "uploadpack", script: "evil .evil && git config remote.origin.uploadpack ./.evil", trigger: "git fetch -q origin" },
    Attack { setup: "", name: "ext-transport", script: "evil .evil && git config protocol.ext.allow always && git remote add evil 'ext::sh -c ./.evil'", trigger: "git fetch -q evil" },
    Attack { setup: "", name: "commondir", script: "mkdir -p .evilcommon/objects .evilcommon/refs .evilcommon/hooks && evil .evilcommon/hooks/pre-commit && echo ../.evilcommon > .git/commondir", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "config-worktree", script: "evil .evil && git config core.repositoryformatversion 1 && git config extensions.worktreeConfig true && printf '[core]\\n\\tfsmonitor = ./.evil\\n' > .git/config.worktree", trigger: "git status" },
    Attack { setup: "", name: "worktrees", script: "mkdir -p .evilcommon/objects .evilcommon/refs .evilcommon/hooks .git/worktrees/wt wt && evil .evilcommon/hooks/pre-commit && echo 'ref: refs/heads/wt' > .git/worktrees/wt/HEAD && echo ../../../.evilcommon > .git/worktrees/wt/commondir && echo \"$PWD/wt/.git\" > .git/worktrees/wt/gitdir && echo 'gitdir: ../.git/worktrees/wt' > wt/.git", trigger: "git -C wt commit -q --allow-empty -m t" },
    Attack { setup: "", name: "rename-dot-git", script: "if mv .git .git-old; then cp -a .git-old .git; fi; evil .git/hooks/pre-commit", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "", name: "nested-hook", script: "evil vendor/lib/.git/hooks/pre-commit", trigger: "git -C vendor/lib commit -q --allow-empty -m t" },
    Attack { setup: "", name: "nested-hooks-path", script: "mkdir -p vendor/lib/.h && evil vendor/lib/.h/pre-commit && git -C vendor/lib config core.hooksPath .h", trigger: "git -C vendor/lib commit -q --allow-empty -m t" },
    Attack { setup: "", name: "nested-renamed", script: "mv vendor/lib vendor/lib-old && mkdir vendor/lib && cp -a vendor/lib-old/. vendor/lib/ && evil vendor/lib/.git/hooks/pre-commit", trigger: "git -C vendor/lib commit -q --allow-empty -m t" },
    Attack { setup: "", name: "new-repository", script: "git init -q newrepo && evil newrepo/.git/hooks/pre-commit", trigger: "git -C newrepo commit -q --allow-empty -m t" },
    Attack { setup: "", name: "submodule-hook", script: "evil .git/modules/sub/hooks/pre-commit", trigger: "git -C sub commit -q --allow-empty -m t" },
    Attack { setup: "", name: "submodule-fsmonitor", script: "evil .evil && git -C sub config core.fsmonitor ../.evil", trigger: "git status" },
    Attack { setup: "", name: "gitdir-file", script: "cp -a .git .evilgit && evil .evilgit/hooks/pre-commit && mkdir -p newdir && echo 'gitdir: ../.evilgit' > newdir/.git", trigger: "git -C newdir commit -q --allow-empty -m t" },
    Attack { setup: "", name: "bare-repository", script: "git clone -q --bare . evil.git && evil evil.git/hooks/reference-transaction", trigger: "git -C evil.git update-ref refs/heads/canary HEAD" },
    Attack { setup: "", name: "rebase-todo", script: "evil .evil && GIT_SEQUENCE_EDITOR='f() { printf \"break\\nexec ./.evil\\n\" > \"$1\"; }; f' git rebase -q -i HEAD", trigger: "git rebase --continue" },
    Attack { setup: "git config core.hooksPath .husky", name: "husky-hook", script: "evil .husky/pre-commit", trigger: "git commit -q --allow-empty -m t" },
    Attack { setup: "git config include.path ../.gitconfig.shared", name: "shared-config", script: "evil .evil && printf '[core]\\n\\tfsmonitor = ./.evil\\n' >> .gitconfig.shared", trigger: "git status" },
];

/// The shell functions and variables every attack script starts with.
pub fn prelude(canary: &Path) -> String {
    format!(
        "C={canary}\nevil() {{ printf '#!/bin/sh\\necho fired >> %s\\nexit 0\\n' \"$C\" > \"$1\" && chmod +x \"$1\"; }}\n\
         export GIT_AUTHOR_NAME=agent GIT_AUTHOR_EMAIL=agent@example.test GIT_COMMITTER_NAME=agent GIT_COMMITTER_EMAIL=agent@example.test\n",
        canary = sh_quote(&canary.display().to_string())
    )
}

pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A scratch area for one test: the owner's home and the fixture project, all owned by
/// [`OWNER`].
pub struct Workspace {
    root: PathBuf,
    home: PathBuf,
    template: PathBuf,
}

impl Workspace {
    /// Makes the owner's home and the template project in `root` (which must exist).
    pub fn create(root: &Path) -> Result<Workspace> {
        let ws = Workspace {
            root: root.to_path_buf(),
            home: root.join("home"),
            template: root.join("template/project"),
        };
        for dir in [
            root.join("home"),
            root.join("template"),
            root.join("canaries"),
        ] {
            fs::create_dir_all(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
        }
        fs::write(
            ws.home.join(".gitconfig"),
            "[user]\n\tname = Dev\n\temail = dev@example.test\n[init]\n\tdefaultBranch = main\n[protocol \"file\"]\n\tallow = always\n[advice]\n\tdetachedHead = false\n",
        )
        .map_err(|e| HarnessError::io("writing", &ws.home, e))?;
        chown_tree(root)?;
        ws.make_template()?;
        Ok(ws)
    }

    fn make_template(&self) -> Result<()> {
        let t = self.root.join("template");
        let script = r#"
set -e
git init -q --bare remotes/origin.git
git init -q --bare remotes/sub.git
git init -q seed-sub && cd seed-sub && echo sub > s && git add s && git commit -q -m sub && git push -q ../remotes/sub.git HEAD:main && cd ..
git clone -q remotes/origin.git project 2>/dev/null
cd project
echo hello > README && echo notes > notes.txt && echo data > x.dat && echo 'vendor/' > .gitignore
mkdir -p .husky .vscode && printf '#!/bin/sh\nexit 0\n' > .husky/pre-commit && chmod +x .husky/pre-commit
echo '{}' > .vscode/tasks.json && echo 'export A=1' > .envrc && echo '[core]' > .gitconfig.shared
git add -A && git commit -q -m initial
git submodule add -q "$(cd .. && pwd)/remotes/sub.git" sub && git commit -q -m 'add sub'
git checkout -q -b other && echo theirs > README && git commit -q -am theirs
git checkout -q main && echo ours > README && git commit -q -am ours
git push -q origin main
mkdir -p vendor && git init -q vendor/lib && cd vendor/lib && echo lib > l && git add l && git commit -q -m lib
"#;
        let out = self.owner_sh(&t, script)?;
        if !out.success() {
            return Err(HarnessError::CommandFailed {
                command: "making the template project".into(),
                status: out.code().to_string(),
                stdout: out.stdout.clone(),
                stderr: out.stderr.clone(),
            });
        }
        Ok(())
    }

    /// A fresh copy of the template project named `name`, owned by the owner, and the canary
    /// file its attack would write (not existing yet).
    pub fn project(&self, name: &str) -> Result<(PathBuf, PathBuf)> {
        let dir = self.root.join("projects").join(name);
        fs::create_dir_all(dir.parent().expect("has a parent"))
            .map_err(|e| HarnessError::io("creating", &dir, e))?;
        let status = Command::new("cp")
            .arg("-a")
            .arg(self.template.parent().expect("template/project"))
            .arg(&dir)
            .status()
            .map_err(|e| HarnessError::io("cp -a", &dir, e))?;
        if !status.success() {
            return Err(HarnessError::Image(format!("cp -a into {}", dir.display())));
        }
        let canary = self.root.join("canaries").join(name);
        Ok((dir.join("project"), canary))
    }

    /// Where projects are made: a policy's writable root.
    pub fn projects_root(&self) -> PathBuf {
        self.root.join("projects")
    }

    /// The remotes the template's origin and submodule point at (by absolute host path): a
    /// sandbox that fetches needs them bound at the same path.
    pub fn remotes(&self) -> PathBuf {
        self.root.join("template/remotes")
    }

    /// Runs the attack's setup as the owner in `project`.
    pub fn set_up(&self, project: &Path, attack: &Attack) -> Result<()> {
        if attack.setup.is_empty() {
            return Ok(());
        }
        self.owner_sh(project, attack.setup)?.checked().map(drop)
    }

    /// `sh -c SCRIPT` as the owner in `dir`, with the owner's home and a deadline. EDITOR and
    /// PAGER are harmless programs, so a command that would open one does not wait for a
    /// terminal, while the repository's own `core.editor`/`core.pager` (what the attacks set)
    /// still take precedence over them.
    pub fn owner_sh(&self, dir: &Path, script: &str) -> Result<CommandOutput> {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            &format!("--reuid={OWNER}"),
            &format!("--regid={OWNER}"),
            "--clear-groups",
            "env",
            "-i",
        ])
        .arg(format!("HOME={}", self.home.display()))
        .args([
            "PATH=/usr/bin:/bin",
            "EDITOR=false",
            "PAGER=cat",
            "GIT_TERMINAL_PROMPT=0",
            "LC_ALL=C",
            "sh",
            "-c",
        ])
        .arg(format!(
            "cd {} && {script}",
            sh_quote(&dir.display().to_string())
        ));
        output_with_deadline(&mut cmd, None, Duration::from_secs(60))
    }
}

fn chown_tree(root: &Path) -> Result<()> {
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{OWNER}:{OWNER}"))
        .arg(root)
        .status()
        .map_err(|e| HarnessError::io("chown -R", root, e))?;
    if !status.success() {
        return Err(HarnessError::Image(format!("chown -R {}", root.display())));
    }
    let mut p = root.to_path_buf();
    // The owner must reach the scratch area through the temp directory's parents.
    while let Some(parent) = p.parent() {
        if parent == Path::new("/") {
            break;
        }
        let mode = fs::metadata(parent)
            .map_err(|e| HarnessError::io("stat", parent, e))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            fs::set_permissions(parent, fs::Permissions::from_mode(mode | 0o001))
                .map_err(|e| HarnessError::io("chmod", parent, e))?;
        }
        p = parent.to_path_buf();
    }
    Ok(())
}
