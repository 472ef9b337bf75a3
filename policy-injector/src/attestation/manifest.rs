//! The subjects of a run: the regular files the sandbox added or modified in its writable
//! volumes, read from the exit manifest the shim wrote beside the audit log (its `diff` says
//! what changed, its entries carry each file's sha256). Only the fields used here are read, so
//! this crate needs none of the shim's types.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::statement::ResourceDescriptor;
use crate::audit_chain::Digest;

#[derive(Deserialize)]
struct Document {
    phase: String,
    container_id: String,
    manifest: Manifest,
    diff: Option<Diff>,
}

#[derive(Deserialize)]
struct Manifest {
    mounts: Vec<Mount>,
}

#[derive(Deserialize)]
struct Mount {
    destination: String,
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    path: String,
    #[serde(default)]
    path_hex: Option<String>,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    sha256: Option<String>,
    #[serde(default)]
    not_hashed: Option<String>,
}

#[derive(Deserialize)]
struct Diff {
    exact: bool,
    added: Vec<Change>,
    modified: Vec<Change>,
}

#[derive(Deserialize)]
struct Change {
    mount: String,
    path: String,
    #[serde(default)]
    path_hex: Option<String>,
    #[serde(rename = "type")]
    kind: String,
}

/// A written file that cannot be a subject, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unattested {
    pub name: String,
    pub reason: String,
}

/// What the exit manifest gives the statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// One per regular file added or modified, with its sha256; sorted by name.
    pub subjects: Vec<ResourceDescriptor>,
    /// Written files without a digest (over `max_hashed_bytes`, changing while hashed) or with
    /// a name that is not UTF-8.
    pub unattested: Vec<Unattested>,
    /// Both manifests were complete: nothing written is missing from the subjects.
    pub exact: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("the exit manifest's sha256 is {actual}, the exit record says {expected}")]
    DigestMismatch { expected: String, actual: String },
    #[error("the exit manifest is not one the shim writes: {0}")]
    Malformed(String),
    #[error("the manifest is the {phase} manifest of {container_id}, not the exit manifest of {expected}")]
    NotThisExit {
        phase: String,
        container_id: String,
        expected: String,
    },
}

/// The container path of an entry: the mount's destination joined with the path under it.
pub fn subject_name(destination: &str, path: &str) -> String {
    let dest = destination.trim_end_matches('/');
    if path.is_empty() {
        dest.to_string()
    } else {
        format!("{dest}/{path}")
    }
}

/// Reads the exit manifest `bytes`, refused unless its sha256 is `expected_sha256` (the exit
/// record's) and it is `container_id`'s exit manifest.
pub fn written_files(
    bytes: &[u8],
    expected_sha256: &str,
    container_id: &str,
) -> Result<Written, ManifestError> {
    let actual = Digest::of(bytes).to_string();
    if actual != expected_sha256 {
        return Err(ManifestError::DigestMismatch {
            expected: expected_sha256.to_string(),
            actual,
        });
    }
    let doc: Document =
        serde_json::from_slice(bytes).map_err(|e| ManifestError::Malformed(e.to_string()))?;
    let Some(diff) = doc
        .diff
        .filter(|_| doc.phase == "exit" && doc.container_id == container_id)
    else {
        return Err(ManifestError::NotThisExit {
            phase: doc.phase,
            container_id: doc.container_id,
            expected: container_id.to_string(),
        });
    };
    let mut entries: BTreeMap<(&str, &str), &Entry> = BTreeMap::new();
    for m in &doc.manifest.mounts {
        for e in &m.entries {
            entries.insert((m.destination.as_str(), e.path.as_str()), e);
        }
    }
    let mut subjects = Vec::new();
    let mut unattested = Vec::new();
    for c in diff.added.iter().chain(&diff.modified) {
        if c.kind != "file" {
            continue;
        }
        let name = subject_name(&c.mount, &c.path);
        let refuse = |reason: &str| Unattested {
            name: name.clone(),
            reason: reason.to_string(),
        };
        if c.path_hex.is_some() {
            // The readable form is lossy: a name that is not the file's could not be checked.
            unattested.push(refuse("the name is not UTF-8"));
            continue;
        }
        let entry = entries
            .get(&(c.mount.as_str(), c.path.as_str()))
            .filter(|e| e.kind == "file" && e.path_hex.is_none());
        match entry.and_then(|e| e.sha256.as_deref()) {
            Some(sha) if Digest::from_hex(sha).is_some() => subjects.push(ResourceDescriptor {
                name,
                digest: BTreeMap::from([("sha256".to_string(), sha.to_string())]),
            }),
            Some(_) => return Err(ManifestError::Malformed(format!("{name}: bad sha256"))),
            None => {
                let why = entry
                    .and_then(|e| e.not_hashed.clone())
                    .map(|r| format!("not hashed ({r})"))
                    .unwrap_or_else(|| "not in the exit manifest's entries".to_string());
                unattested.push(refuse(&why));
            }
        }
    }
    subjects.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Written {
        subjects,
        unattested,
        exact: diff.exact,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const A: &str = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824";

    fn doc(diff: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "version": 1, "container_id": "c1", "phase": "exit", "time": "t",
            "manifest": {"complete": true, "all_hashed": false, "mounts": [{
                "destination": "/data", "source": "/v", "stats": {},
                "entries": [
                    {"path": "", "type": "dir", "size": 0, "mode": "0755", "mtime_ns": 0},
                    {"path": "out", "type": "dir", "size": 0, "mode": "0755", "mtime_ns": 0},
                    {"path": "out/a.txt", "type": "file", "size": 5, "mode": "0644", "mtime_ns": 0, "sha256": A},
                    {"path": "big", "type": "file", "size": 9, "mode": "0644", "mtime_ns": 0, "not_hashed": "max_hashed_bytes"},
                    {"path": "kept", "type": "file", "size": 5, "mode": "0644", "mtime_ns": 0, "sha256": A}
                ]}]},
            "start_sha256": A,
            "diff": diff,
        }))
        .unwrap()
    }

    fn written(bytes: &[u8]) -> Result<Written, ManifestError> {
        written_files(bytes, &Digest::of(bytes).to_string(), "c1")
    }

    #[test]
    fn added_and_modified_files_are_the_subjects_and_unchanged_ones_are_not() {
        let bytes = doc(json!({"exact": true,
            "added": [{"mount": "/data", "path": "out", "type": "dir"},
                      {"mount": "/data", "path": "out/a.txt", "type": "file"}],
            "modified": [{"mount": "/data", "path": "big", "type": "file", "fields": ["size"]}],
            "removed": [{"mount": "/data", "path": "gone", "type": "file"}]}));
        let w = written(&bytes).unwrap();
        assert_eq!(w.subjects.len(), 1);
        assert_eq!(w.subjects[0].name, "/data/out/a.txt");
        assert_eq!(w.subjects[0].digest["sha256"], A);
        assert_eq!(
            w.unattested,
            [Unattested {
                name: "/data/big".into(),
                reason: "not hashed (max_hashed_bytes)".into()
            }]
        );
        assert!(w.exact);
    }

    #[test]
    fn a_manifest_that_is_not_the_recorded_one_is_refused() {
        let bytes = doc(json!({"exact": true, "added": [], "modified": [], "removed": []}));
        let e = written_files(&bytes, A, "c1").unwrap_err();
        assert!(matches!(e, ManifestError::DigestMismatch { .. }), "{e}");
        let e = written_files(&bytes, &Digest::of(&bytes).to_string(), "c2").unwrap_err();
        assert!(matches!(e, ManifestError::NotThisExit { .. }), "{e}");
    }

    #[test]
    fn a_name_that_is_not_utf8_is_named_but_not_a_subject() {
        let bytes = doc(json!({"exact": true,
            "added": [{"mount": "/data", "path": "\u{fffd}", "path_hex": "ff", "type": "file"}],
            "modified": [], "removed": []}));
        let w = written(&bytes).unwrap();
        assert!(w.subjects.is_empty());
        assert_eq!(w.unattested[0].reason, "the name is not UTF-8");
    }
}
