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
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::process::{output_with_deadline, CommandOutput};

/// The developer's uid and gid: the project's owner, who runs git on the host.
pub const OWNER: u32 = 1000;

mod attacks;

pub use attacks::{attacks, HOOK_TOOL_ATTACKS, REPOSITORY_ATTACKS};

/// One attack: what the sandbox does, and what the owner runs afterwards.
pub struct Attack {
    pub name: &'static str,
    /// What the owner had set up before the sandbox ran (run on the project copy first, with
    /// the hook tools' paths in `$HUSKY`, `$LEFTHOOK`, `$SGH` and `$PRE_COMMIT`).
    pub setup: &'static str,
    /// Shell run in the project's root. `$C` is the canary file, `evil FILE` writes a script
    /// there that appends to it, `$ID` is the first 12 characters of the container's id (the
    /// hostname under Docker, `GVH_ID` under ctr) and `guess NAME` makes every quarantine name
    /// of NAME a sandbox that knows its id can predict.
    pub script: &'static str,
    /// The owner's commands, run in the project's root on the host after the sandbox ended
    /// (with the hook tools' paths, as `setup`).
    pub trigger: &'static str,
}

/// The shell functions and variables every attack script starts with.
pub fn prelude(canary: &Path) -> String {
    format!(
        "C={canary}\nevil() {{ printf '#!/bin/sh\\necho fired >> %s\\nexit 0\\n' \"$C\" > \"$1\" && chmod +x \"$1\"; }}\n\
         ID=$(printf %s \"${{GVH_ID:-$(hostname)}}\" | cut -c1-12)\n\
         guess() {{ for n in '' $(seq 1 999); do mkdir -p \"$1.quarantine-$ID${{n:+-$n}}\"; done; mkdir -p \"$1.quarantine-$ID-0000000000000000\"; }}\n\
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
        let script = format!("{}{}", hook_tools_env()?, attack.setup);
        self.owner_sh(project, &script)?.checked().map(drop)
    }

    /// Runs the attack's trigger as the owner in `project` (the hook tools' paths set, as for
    /// the setup).
    pub fn trigger(&self, project: &Path, attack: &Attack) -> Result<CommandOutput> {
        let script = format!("{}{}", hook_tools_env()?, attack.trigger);
        self.owner_sh(project, &script)
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

/// `HUSKY=... LEFTHOOK=... SGH=... PRE_COMMIT=...` as shell assignments: the hook tools the
/// owner uses, from `hack/hook-tools.sh --print` (which hack/test.sh ran, installing them).
pub fn hook_tools_env() -> Result<&'static str> {
    static ENV: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let text = crate::stack::hack_print("hook-tools.sh")?;
        let mut env = String::new();
        for (name, var) in [
            ("husky", "HUSKY"),
            ("lefthook", "LEFTHOOK"),
            ("simple-git-hooks", "SGH"),
            ("pre-commit", "PRE_COMMIT"),
        ] {
            let path = text
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .ok_or_else(|| format!("hack/hook-tools.sh --print names no {name}"))?;
            env.push_str(&format!("{var}={}\n", sh_quote(path)));
        }
        Ok(env)
    })
    .as_deref()
    .map_err(|e| HarnessError::Config(e.clone()))
}
