//! What changed between the start and the exit manifest, keyed by (mount destination, path).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::entry::{Entry, EntryKind, RawPath};
use super::walk::Manifest;

/// One added, removed or modified entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The mount's destination in the container.
    pub mount: String,
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// Modified entries: the fields that differ ("type", "size", "mode", "sha256", "target",
    /// "mtime"). "mtime" is only compared for files one side could not hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
}

impl Change {
    fn new(mount: &str, e: &Entry, fields: Vec<&'static str>) -> Change {
        Change {
            mount: mount.to_string(),
            path: e.path.display(),
            path_hex: e.path.exact_hex(),
            kind: e.kind,
            fields: fields.into_iter().map(String::from).collect(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestDiff {
    /// Both manifests were complete: what is not listed did not change (as far as sha256,
    /// size, mode and, for unhashed files, mtime can tell). Otherwise entries past a bound may
    /// show up as added or removed.
    pub exact: bool,
    pub added: Vec<Change>,
    pub modified: Vec<Change>,
    pub removed: Vec<Change>,
}

/// Counts and the first `limit` changes of each kind, for the exit audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffSummary {
    pub exact: bool,
    pub added: usize,
    pub modified: usize,
    pub removed: usize,
    pub added_paths: Vec<Change>,
    pub modified_paths: Vec<Change>,
    pub removed_paths: Vec<Change>,
    /// Some list above was cut at `limit`; the exit manifest file has all of them.
    pub truncated: bool,
}

impl ManifestDiff {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    pub fn summary(&self, limit: usize) -> DiffSummary {
        let first = |v: &[Change]| v.iter().take(limit).cloned().collect();
        DiffSummary {
            exact: self.exact,
            added: self.added.len(),
            modified: self.modified.len(),
            removed: self.removed.len(),
            added_paths: first(&self.added),
            modified_paths: first(&self.modified),
            removed_paths: first(&self.removed),
            truncated: [&self.added, &self.modified, &self.removed]
                .iter()
                .any(|v| v.len() > limit),
        }
    }
}

fn index(m: &Manifest) -> BTreeMap<(&str, &RawPath), &Entry> {
    m.mounts
        .iter()
        .flat_map(|r| {
            r.entries
                .iter()
                .map(move |e| ((r.destination.as_str(), &e.path), e))
        })
        .collect()
}

fn changed_fields(a: &Entry, b: &Entry) -> Vec<&'static str> {
    let mut f = Vec::new();
    if a.kind != b.kind {
        f.push("type");
        return f;
    }
    if a.size != b.size && a.kind != EntryKind::Dir {
        f.push("size");
    }
    if a.mode != b.mode {
        f.push("mode");
    }
    match a.kind {
        EntryKind::File => match (&a.sha256, &b.sha256) {
            (Some(x), Some(y)) if x != y => f.push("sha256"),
            (Some(_), Some(_)) => {}
            // Without both hashes the content can only be judged by its mtime.
            _ if a.mtime_ns != b.mtime_ns => f.push("mtime"),
            _ => {}
        },
        EntryKind::Symlink if a.target != b.target => f.push("target"),
        EntryKind::Char | EntryKind::Block if a.rdev != b.rdev => f.push("rdev"),
        _ => {}
    }
    f
}

/// Added, modified and removed entries between two manifests of the same sandbox, each list in
/// (mount, path) order. A directory whose only change is its contents is not "modified": its
/// added and removed children are listed themselves.
pub fn diff(start: &Manifest, exit: &Manifest) -> ManifestDiff {
    let before = index(start);
    let after = index(exit);
    let mut out = ManifestDiff {
        exact: start.complete && exit.complete,
        ..ManifestDiff::default()
    };
    for (key, b) in &after {
        match before.get(key) {
            None => out.added.push(Change::new(key.0, b, Vec::new())),
            Some(a) => {
                let fields = changed_fields(a, b);
                if !fields.is_empty() {
                    out.modified.push(Change::new(key.0, b, fields));
                }
            }
        }
    }
    for (key, a) in &before {
        if !after.contains_key(key) {
            out.removed.push(Change::new(key.0, a, Vec::new()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::walk::{RootManifest, RootStats};

    fn file(path: &str, sha: &str, size: u64) -> Entry {
        Entry {
            path: RawPath(path.as_bytes().to_vec()),
            kind: EntryKind::File,
            size,
            mode: 0o644,
            mtime_ns: 1,
            sha256: Some(sha.into()),
            not_hashed: None,
            target: None,
            rdev: None,
            skipped: None,
        }
    }

    fn manifest(entries: Vec<Entry>) -> Manifest {
        Manifest {
            complete: true,
            all_hashed: true,
            stopped: None,
            max_files: 10,
            max_hashed_bytes: 10,
            elapsed_ms: 0,
            mounts: vec![RootManifest {
                destination: "/data".into(),
                source: "/src".into(),
                error: None,
                stopped: None,
                stats: RootStats::default(),
                entries,
            }],
        }
    }

    #[test]
    fn added_modified_and_removed_are_told_apart() {
        let start = manifest(vec![
            file("keep", "aa", 1),
            file("edit", "bb", 1),
            file("gone", "cc", 1),
        ]);
        let mut chmod = file("mode", "dd", 1);
        let start = {
            let mut s = start;
            s.mounts[0].entries.push(chmod.clone());
            s
        };
        chmod.mode = 0o755;
        let exit = manifest(vec![
            file("keep", "aa", 1),
            file("edit", "b2", 1),
            file("new", "ee", 3),
            chmod,
        ]);
        let d = diff(&start, &exit);
        let paths = |v: &[Change]| v.iter().map(|c| c.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&d.added), ["new"]);
        assert_eq!(paths(&d.removed), ["gone"]);
        assert_eq!(paths(&d.modified), ["edit", "mode"]);
        assert_eq!(d.modified[0].fields, ["sha256"]);
        assert_eq!(d.modified[1].fields, ["mode"]);
        assert!(d.exact);
    }

    #[test]
    fn unhashed_files_are_compared_by_size_and_mtime() {
        let mut a = file("big", "x", 5);
        a.sha256 = None;
        let mut b = a.clone();
        assert!(diff(&manifest(vec![a.clone()]), &manifest(vec![b.clone()])).is_empty());
        b.mtime_ns = 2;
        let d = diff(&manifest(vec![a]), &manifest(vec![b]));
        assert_eq!(d.modified[0].fields, ["mtime"]);
    }

    #[test]
    fn a_bounded_manifest_makes_the_diff_inexact() {
        let start = manifest(vec![]);
        let mut exit = manifest(vec![file("a", "aa", 1)]);
        exit.complete = false;
        assert!(!diff(&start, &exit).exact);
    }

    #[test]
    fn summary_cuts_long_lists_and_says_so() {
        let start = manifest(vec![]);
        let exit = manifest((0..5).map(|i| file(&format!("f{i}"), "aa", 1)).collect());
        let s = diff(&start, &exit).summary(2);
        assert_eq!(s.added, 5);
        assert_eq!(s.added_paths.len(), 2);
        assert!(s.truncated);
        assert!(!diff(&start, &exit).summary(5).truncated);
    }
}
