//! Git's on-disk layout, as far as `[mounts.workspace]` needs it: which entries of a git
//! directory are data (bound live into the sandbox), which are carried back at exit, which
//! make a host git run code or look elsewhere, and what makes a directory a git directory at
//! all. Pure: names in, answers out; the runtime does the walking.
//!
//! How a host git finds a repository (gitrepository-layout(5), setup.c's discovery): from the
//! working directory upwards, each directory is checked for a `.git` entry (a directory, or a
//! file saying `gitdir: PATH`), and then whether the directory itself is a git directory: it
//! holds `HEAD` and either `commondir` or both `objects` and `refs`. That second check is how
//! a bare repository planted anywhere in a project becomes the repository a developer's
//! `git status` uses once they `cd` into it, so the exit check looks for both shapes.

/// The directory inside a git directory that holds each container's staging copy
/// (`<gitdir>/gvisor-hardened/<container id>/`). It is on the same filesystem as the git
/// directory, so carrying a file back is a rename, and it is root's with mode 0700, so the
/// host's git never wanders into a sandbox's copy while it runs.
pub const STAGING_DIR: &str = "gvisor-hardened";

/// Data directories: bound from the host into the sandbox's copy, live. Git stores no command
/// and no path it would execute in them, and the agent's commits, branches and fetched objects
/// are its work: they reach the host as they are written.
pub const LIVE_DIRS: &[&str] = &["objects", "refs", "logs", "lfs", "rr-cache", "reftable"];

/// Files carried from the sandbox's copy back to the host's git directory at exit (when the
/// host's own did not change meanwhile): data git rewrites through lock files at the top of
/// the git directory, which a live bind could not serve (a rename onto a mount point fails).
pub const CARRIED_FILES: &[&str] = &[
    "HEAD",
    "index",
    "packed-refs",
    "ORIG_HEAD",
    "FETCH_HEAD",
    "shallow",
];

/// True for a file name carried back: [`CARRIED_FILES`] and the split index's
/// `sharedindex.<hash>` files, which `index` points to when `core.splitIndex` is on.
pub fn is_carried(name: &str) -> bool {
    CARRIED_FILES.contains(&name)
        || name
            .strip_prefix("sharedindex.")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Entries of a git directory the sandbox created that a host git would follow into code or
/// into another repository: `hooks` (run by name), `commondir` (config and hooks from
/// elsewhere), `config.worktree` (a second config), the sequencer's and rebase's state (a todo
/// list whose `exec` lines `git rebase --continue` runs), and the legacy `remotes`/`branches`
/// definitions. `config` itself is not renamed but replaced by its safe keys.
pub const QUARANTINED_IN_NEW_REPOS: &[&str] = &[
    "hooks",
    "commondir",
    "config.worktree",
    "rebase-merge",
    "rebase-apply",
    "sequencer",
    "remotes",
    "branches",
];

/// Whether a directory named `name` holding entries for which `has` answers true is a git
/// directory as a host git would take it (see the module's comment), or is named `.git`.
/// Names only: `objects` and `refs` may be anything git can `access()`, so their type is not
/// asked, which errs on the side of finding one too many.
pub fn is_git_dir(name: &str, has: impl Fn(&str) -> bool) -> bool {
    name == ".git" || (has("HEAD") && (has("commondir") || (has("objects") && has("refs"))))
}

/// The longest file name Linux file systems take (NAME_MAX).
const NAME_MAX: usize = 255;

/// The name a quarantined entry gets: `hooks` becomes `hooks.quarantine-<12 characters of
/// the id>-<nonce>`. Git, direnv and editors look entries up by their exact names, so the
/// renamed one is inert and stays beside the original place for the developer to read. The
/// nonce is the caller's random hex: a sandbox knows its own id (Docker makes its first 12
/// characters the hostname) and could otherwise create every name first and make the set-aside
/// fail. A long name is cut (at a character boundary) so that the whole stays a file name.
pub fn quarantine_name(name: &str, container_id: &str, nonce: &str) -> String {
    let short: String = container_id
        .chars()
        .take(12)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let suffix = format!(".quarantine-{short}-{nonce}");
    let mut keep = name.len().min(NAME_MAX.saturating_sub(suffix.len()));
    while !name.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{suffix}", &name[..keep])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(names: &'static [&'static str]) -> impl Fn(&str) -> bool {
        move |n| names.contains(&n)
    }

    #[test]
    fn a_bare_repository_is_a_git_directory_whatever_its_name() {
        assert!(is_git_dir("fixtures", has(&["HEAD", "objects", "refs"])));
        assert!(is_git_dir("wt", has(&["HEAD", "commondir"])));
        assert!(is_git_dir(".git", has(&[])));
    }

    #[test]
    fn a_head_alone_does_not_make_a_git_directory() {
        assert!(!is_git_dir("docs", has(&["HEAD", "objects"])));
        assert!(!is_git_dir("src", has(&["objects", "refs"])));
    }

    #[test]
    fn split_index_files_are_carried_but_arbitrary_names_are_not() {
        assert!(is_carried("index"));
        assert!(is_carried("sharedindex.0123abcd"));
        assert!(!is_carried("sharedindex."));
        assert!(!is_carried("sharedindex.x/../hooks"));
        assert!(!is_carried("config"));
        assert!(!is_carried("hooks"));
    }

    #[test]
    fn quarantine_names_carry_the_id_and_the_nonce() {
        assert_eq!(
            quarantine_name("hooks", "0123456789abcdef", "f00d"),
            "hooks.quarantine-0123456789ab-f00d"
        );
        assert_eq!(
            quarantine_name("config", "job1", "00aa"),
            "config.quarantine-job1-00aa"
        );
        // An id that is no file name (runc's command line takes any bytes) stays one name.
        assert_eq!(
            quarantine_name("hooks", "a/b", "1"),
            "hooks.quarantine-a_b-1"
        );
    }

    #[test]
    fn a_long_name_is_cut_to_stay_a_file_name() {
        let long = "é".repeat(200);
        let q = quarantine_name(&long, "0123456789abcdef", "0123456789abcdef");
        assert!(q.len() <= NAME_MAX, "{}", q.len());
        assert!(
            q.ends_with(".quarantine-0123456789ab-0123456789abcdef"),
            "{q}"
        );
        assert!(q.starts_with('é'));
    }
}
