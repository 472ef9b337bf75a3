//! What the owner's hooks read or run that stays writable (`package.json`, `node_modules/.bin`,
//! a `Makefile`): a print of each at create, compared at exit, so the exit record says which of
//! them the sandbox changed before the developer's next commit runs them.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::fsutil::Fingerprint;

/// Entries a directory's print covers; a larger tree is named, not compared.
const MAX_ENTRIES: u64 = 20_000;

/// A path as it was: a file (and, for a link, the file it leads to), a directory tree as a
/// digest of its entries' names, identities, sizes and times, or nothing there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Print {
    Missing,
    File {
        entry: Fingerprint,
        target: Option<Fingerprint>,
    },
    Tree {
        sha256: String,
        entries: u64,
    },
    TooLarge,
}

impl Print {
    /// The print of `path` now (links followed only for a file's target).
    pub fn of(path: &Path) -> Print {
        let Ok(meta) = fs::symlink_metadata(path) else {
            return Print::Missing;
        };
        if meta.is_dir() {
            return tree(path);
        }
        Print::File {
            entry: Fingerprint::of(&meta),
            target: fs::metadata(path).ok().map(|m| Fingerprint::of(&m)),
        }
    }

    /// How `now` differs from `self`; `None` when it does not.
    pub fn change(&self, now: &Print) -> Option<String> {
        if self == now {
            return None;
        }
        Some(match (self, now) {
            (Print::Missing, _) => "created".into(),
            (_, Print::Missing) => "removed".into(),
            (Print::TooLarge, _) | (_, Print::TooLarge) => format!(
                "not compared: more than {MAX_ENTRIES} entries below it (named, not checked)"
            ),
            _ => "changed".into(),
        })
    }
}

/// A digest of the tree below `dir`, never through a link; `TooLarge` past [`MAX_ENTRIES`].
fn tree(dir: &Path) -> Print {
    let mut h = Sha256::new();
    let mut entries = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(listing) = fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<_> = listing.flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            entries += 1;
            if entries > MAX_ENTRIES {
                return Print::TooLarge;
            }
            let Ok(m) = e.metadata() else { continue };
            let rel = e.path();
            h.update(rel.as_os_str().as_encoded_bytes());
            for n in [
                m.ino(),
                m.size(),
                m.mtime() as u64,
                m.mtime_nsec() as u64,
                m.mode() as u64,
            ] {
                h.update(n.to_le_bytes());
            }
            if m.is_dir() {
                stack.push(rel);
            }
        }
    }
    Print::Tree {
        sha256: crate::artifacts::hex(&h.finalize()),
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_changed_or_removed_input_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("package.json");
        let before = Print::of(&f);
        fs::write(&f, "{}").unwrap();
        assert_eq!(before.change(&Print::of(&f)).as_deref(), Some("created"));
        let written = Print::of(&f);
        fs::write(&f, "{\"scripts\": {}}").unwrap();
        assert_eq!(written.change(&Print::of(&f)).as_deref(), Some("changed"));
        let again = Print::of(&f);
        assert_eq!(again.change(&Print::of(&f)), None);
        fs::remove_file(&f).unwrap();
        assert_eq!(again.change(&Print::of(&f)).as_deref(), Some("removed"));
    }

    #[test]
    fn a_new_entry_in_a_directory_changes_its_print() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("node_modules/.bin");
        fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink("../x/cli.js", bin.join("lint-staged")).unwrap();
        let before = Print::of(&bin);
        std::os::unix::fs::symlink("/tmp/evil", bin.join("git")).unwrap();
        assert_eq!(before.change(&Print::of(&bin)).as_deref(), Some("changed"));
    }

    #[test]
    fn a_link_retargeted_in_place_changes_the_print() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("tool");
        fs::write(dir.path().join("a"), "a").unwrap();
        fs::write(dir.path().join("b"), "bb").unwrap();
        std::os::unix::fs::symlink("a", &link).unwrap();
        let before = Print::of(&link);
        fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink("b", &link).unwrap();
        assert!(before.change(&Print::of(&link)).is_some());
    }
}
