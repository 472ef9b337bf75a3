//! The git config side of the exit, over `policy_injector::git_config` (the pure parser and
//! the two allowlists): what a sandbox's repository config may keep, what its changes to a
//! staged repository's config may bring back.

use std::path::{Path, PathBuf};

use policy_injector::git_config::{self, KeyClass};

/// The largest config read (git's own configs are a few KiB).
pub(super) const MAX_CONFIG: u64 = 4 << 20;

pub(super) struct Clean {
    pub bytes: Vec<u8>,
    /// `section.key` names taken out, with why.
    pub removed: Vec<String>,
}

pub(super) struct Carried {
    pub bytes: Vec<u8>,
    pub applied: Vec<String>,
    pub refused: Vec<String>,
}

/// A repository the sandbox created keeps only the keys that cannot run code, and a
/// `core.worktree` only where it stays inside `bind_root` (a submodule's `../../../sub`):
/// elsewhere it would make the developer's `git checkout` there write outside the project.
pub(super) fn sanitize_new(bytes: &[u8], gitdir: &Path, bind_root: &Path) -> Result<Clean, String> {
    let s = git_config::sanitize(bytes, KeyClass::NewRepo).map_err(|e| e.to_string())?;
    let mut removed: Vec<String> = s.removed.iter().map(|r| r.to_string()).collect();
    let clean = git_config::parse(&s.bytes).map_err(|e| e.to_string())?;
    let escapes = |v: Option<&[u8]>| {
        let Some(text) = v.and_then(|v| std::str::from_utf8(v).ok()) else {
            return true;
        };
        !normalise(&gitdir.join(text)).starts_with(bind_root)
    };
    let outside: Vec<usize> = clean
        .entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.key.to_string() == "core.worktree" && escapes(e.value.as_deref()))
        .map(|(i, _)| i)
        .collect();
    if outside.is_empty() {
        return Ok(Clean {
            bytes: s.bytes,
            removed,
        });
    }
    removed.push("core.worktree points outside the project".into());
    let kept = clean
        .entries
        .iter()
        .enumerate()
        .filter(|(i, _)| !outside.contains(i))
        .map(|(_, e)| (&e.key, e.value.as_deref()));
    let bytes = git_config::serialize(kept).map_err(|e| e.to_string())?;
    Ok(Clean { bytes, removed })
}

/// A path with `.` and `..` taken out lexically (the disk is not asked: a link is not followed).
pub(super) fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The sandbox's changes to the carry allowlist's keys, applied to the host's config.
pub(super) fn carry(seed: &[u8], sandbox: &[u8], host: &[u8]) -> Result<Carried, String> {
    let c = git_config::carry(seed, sandbox, host).map_err(|e| e.to_string())?;
    Ok(Carried {
        bytes: c.bytes,
        applied: c
            .applied
            .iter()
            .map(|change| change.key.to_string())
            .collect(),
        refused: c.refused.iter().map(|(_, why)| why.to_string()).collect(),
    })
}

/// `ref: refs/...` or an object name (40 or 64 hex digits), one line: what git writes to HEAD.
pub(super) fn is_valid_head(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let line = text.strip_suffix('\n').unwrap_or(text);
    if line.contains('\n') {
        return false;
    }
    if let Some(r) = line.strip_prefix("ref: ") {
        return r.starts_with("refs/")
            && !r.contains("..")
            && r.bytes()
                .all(|b| b > b' ' && b != 0x7f && !b"~^:?*[\\".contains(&b));
    }
    (line.len() == 40 || line.len() == 64) && line.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worktree_inside_the_project_is_kept_and_one_outside_is_removed() {
        let root = Path::new("/srv/p");
        let gitdir = root.join(".git/modules/sub");
        let inside = sanitize_new(b"[core]\n\tworktree = ../../../sub\n", &gitdir, root).unwrap();
        assert!(inside.removed.is_empty());
        let outside = sanitize_new(
            b"[core]\n\tworktree = /home/dev\n\tbare = false\n",
            &gitdir,
            root,
        )
        .unwrap();
        let text = String::from_utf8(outside.bytes).unwrap();
        assert!(
            !text.contains("worktree") && text.contains("bare"),
            "{text}"
        );
        let escaping =
            sanitize_new(b"[core]\n\tworktree = ../../../../../etc\n", &gitdir, root).unwrap();
        assert_eq!(escaping.removed.len(), 1);
    }

    #[test]
    fn head_is_a_ref_or_an_object_name() {
        assert!(is_valid_head(b"ref: refs/heads/main\n"));
        assert!(is_valid_head(b"0123456789abcdef0123456789abcdef01234567\n"));
        assert!(!is_valid_head(b"ref: ../../etc/passwd\n"));
        assert!(!is_valid_head(b"ref: refs/heads/a\nextra\n"));
        assert!(!is_valid_head(b"ref: refs/../x\n"));
        assert!(!is_valid_head(b"\xff"));
        assert!(!is_valid_head(b"0123"));
    }
}
