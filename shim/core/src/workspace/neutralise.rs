//! Disarming at exit what a sandbox left in git directories: every git directory it created
//! or moved loses what makes a host git run code or look elsewhere (hooks, commondir,
//! config.worktree, rebase state, legacy remotes; its config cut to the safe keys), and no
//! symbolic link or other non-regular file stays where the host's git would follow or open it.
//! Each entry on its own: one that cannot be set aside is disarmed in place (`aside.rs`), and
//! the next is still done.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use policy_injector::workspace::QUARANTINED_IN_NEW_REPOS;

use super::aside::{disarm, set_aside};
use super::config;
use super::fsutil::{list_dir, read_regular, write_new};
use super::report::{GitLink, Moved, Neutralised};
use super::search::Stray;

/// Renames an entry aside and says where to (`aside::rename_aside`; a test's stand-in
/// makes it fail).
pub(super) type Rename = fn(&Path, &str) -> std::io::Result<std::path::PathBuf>;

/// What a neutralisation is told: the container (for quarantine names), whether to change
/// anything, how to rename, and where errors go.
pub(super) struct Disarm<'a> {
    pub container_id: &'a str,
    pub quarantine_on: bool,
    pub rename: Rename,
    pub errors: &'a mut Vec<String>,
}

impl Disarm<'_> {
    /// Sets `path` aside (or only names it in report mode), recording an error where that
    /// failed altogether.
    pub fn aside(&mut self, path: &Path, reason: &str) -> Moved {
        let outcome = self
            .quarantine_on
            .then(|| set_aside(path, self.container_id, self.rename));
        let (moved, error) = Moved::of(path.display().to_string(), reason.to_string(), outcome);
        self.errors.extend(error);
        moved
    }

    /// Neutralises the git directory `dir` the sandbox created or moved (its bind's root is
    /// `bind_root`). `None`: nothing in it could run code (a fresh `git init`'s sample hooks
    /// and plain config).
    pub fn git_dir(&mut self, dir: &Path, bind_root: &Path) -> Option<Neutralised> {
        let mut out = Neutralised {
            gitdir: dir.display().to_string(),
            ..Neutralised::default()
        };
        for name in QUARANTINED_IN_NEW_REPOS {
            let path = dir.join(name);
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if *name == "hooks" && meta.is_dir() && only_sample_hooks(&path) {
                continue;
            }
            // `git init` makes an empty `branches/`: nothing in it to define a remote.
            if matches!(*name, "branches" | "remotes")
                && meta.is_dir()
                && list_dir(&path).is_ok_and(|l| l.entries.is_empty())
            {
                continue;
            }
            out.moved.push(self.aside(&path, reason_for(name)));
        }
        self.config(dir, bind_root, &mut out);
        if out.moved.is_empty() && out.config_removed.is_empty() {
            return None;
        }
        Some(out)
    }

    /// The config of a git directory the sandbox made: cut to its safe keys, the original set
    /// aside; where it cannot be set aside, rewritten in place; where it cannot be read as a
    /// config, set aside whole.
    fn config(&mut self, dir: &Path, bind_root: &Path, out: &mut Neutralised) {
        let path = dir.join("config");
        let Ok(meta) = fs::symlink_metadata(&path) else {
            return;
        };
        let bytes = if meta.is_file() {
            read_regular(&path, config::MAX_CONFIG).ok().flatten()
        } else {
            None
        };
        let clean = match bytes.map(|b| config::sanitize_new(&b, dir, bind_root)) {
            Some(Ok(clean)) => clean,
            // Not a regular file, too large or not a config git can read: set aside whole.
            Some(Err(_)) | None => {
                let m = self.aside(&path, "config that is not a readable git config file");
                out.moved.push(m);
                return;
            }
        };
        if clean.removed.is_empty() {
            return;
        }
        out.config_removed = clean.removed.clone();
        let reason =
            "config with keys that run code or point elsewhere; its safe keys stay in config";
        if !self.quarantine_on {
            out.moved.push(self.aside(&path, reason));
            return;
        }
        let mut m = Moved {
            path: path.display().to_string(),
            reason: reason.into(),
            ..Moved::default()
        };
        match (self.rename)(&path, self.container_id) {
            Ok(to) => {
                m.to = Some(to.display().to_string());
                if let Err(e) = write_new(&path, &clean.bytes, Some(&meta)) {
                    // No config: git refuses the directory, which runs nothing either.
                    self.errors.push(format!(
                        "{}: writing its safe keys: {e} (the directory is left without a config)",
                        path.display()
                    ));
                }
            }
            Err(e) => {
                let why = format!("could not be renamed aside ({e})");
                match overwrite(&path, &clean.bytes) {
                    Ok(()) => {
                        m.disarmed = Some(format!(
                            "{why}: rewritten in place with its safe keys (what was taken out is in config_removed)"
                        ))
                    }
                    Err(e2) => {
                        let (d, error) =
                            Moved::of(m.path.clone(), m.reason.clone(), Some(disarm(&path, &format!("{why}; rewriting it in place failed ({e2})"))));
                        m = d;
                        self.errors.extend(error);
                    }
                }
            }
        }
        out.moved.push(m);
    }

    /// Links and special files in git directories (see [`super::search::Stray`]): removed (a
    /// link's target is kept in the record), or only named in report mode. In a repository the
    /// sandbox worked on through its staging copy only the data directories count: the rest
    /// of it the sandbox never reached.
    pub fn strays(&mut self, strays: &[Stray], staged: impl Fn(usize) -> bool) -> Vec<GitLink> {
        let mut out = Vec::new();
        for s in strays {
            let new_repo = !staged(s.gitdir);
            if !new_repo && !s.live {
                continue;
            }
            let target = fs::read_link(&s.path).ok().map(|t| t.display().to_string());
            let reason = if s.live {
                "in a git directory's data directory (objects, refs, logs...): the host's git would write or read through it"
            } else {
                "in a git directory the sandbox made or moved: the host's git would follow or open it"
            };
            let mut link = GitLink {
                path: s.path.display().to_string(),
                kind: s.kind,
                target,
                removed: false,
                reason: reason.into(),
            };
            if self.quarantine_on {
                match fs::remove_file(&s.path) {
                    Ok(()) => link.removed = true,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => link.removed = true,
                    Err(e) => self
                        .errors
                        .push(format!("{}: could not be removed: {e}", s.path.display())),
                }
            }
            out.push(link);
        }
        out
    }
}

/// Rewrites the regular file at `path` in place (never through a link, never blocking on a
/// fifo).
fn overwrite(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    f.write_all(bytes)?;
    f.sync_all()
}

fn reason_for(name: &str) -> &'static str {
    match name {
        "hooks" => "hooks: git runs them by name",
        "commondir" => "commondir: takes config and hooks from another directory",
        "config.worktree" => "config.worktree: a second config",
        "rebase-merge" | "rebase-apply" | "sequencer" => {
            "an operation in progress: its todo list can run commands on --continue"
        }
        _ => "legacy remote definitions",
    }
}

/// A hooks directory holding only `git init`'s `*.sample` files: git runs none of them.
fn only_sample_hooks(hooks: &Path) -> bool {
    match list_dir(hooks) {
        Ok(l) => l
            .entries
            .iter()
            .all(|e| e.is_file && e.name.to_string_lossy().ends_with(".sample")),
        Err(_) => false,
    }
}
