//! Manifest files next to the audit log: `<audit dir>/artifacts/<container id>-<phase>-<time>.json`,
//! written whole (temporary file, fsync, rename) so a reader never sees half a manifest, and
//! read back at exit with a check against the digest recorded at start.

use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::diff::ManifestDiff;
use super::walk::Manifest;
use super::{hex, ArtifactsError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Start,
    Exit,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Start => "start",
            Phase::Exit => "exit",
        }
    }
}

/// The file's JSON document.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Document {
    version: u32,
    container_id: String,
    phase: Phase,
    time: String,
    manifest: Manifest,
    /// Exit manifests: the sha256 of the start manifest file the diff was taken against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    start_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    diff: Option<ManifestDiff>,
}

/// A manifest file as written: where, and the sha256 of its exact bytes (what the audit record
/// carries; `sha256sum FILE` gives the same).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WrittenManifest {
    pub path: PathBuf,
    pub sha256: String,
    pub bytes: u64,
}

/// The id rule (`crate::container_id`): anything else could leave the directory or hide a file.
fn check_id(id: &str) -> Result<(), ArtifactsError> {
    if crate::container_id::is_valid(id) {
        Ok(())
    } else {
        Err(ArtifactsError::BadContainerId(id.to_string()))
    }
}

/// The directory manifests go to for an audit log at `audit_log`.
pub fn artifacts_dir(audit_log: &Path) -> PathBuf {
    audit_log
        .parent()
        .unwrap_or(Path::new("/"))
        .join("artifacts")
}

/// Writes `manifest` (and, at exit, the diff against the start manifest whose file had
/// `start_sha256`) to a new file in the artifacts directory beside `audit_log`.
pub fn write_manifest(
    audit_log: &Path,
    container_id: &str,
    phase: Phase,
    manifest: &Manifest,
    start: Option<(&str, &ManifestDiff)>,
) -> Result<WrittenManifest, ArtifactsError> {
    check_id(container_id)?;
    let dir = artifacts_dir(audit_log);
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ArtifactsError::Io { path, source }
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(io(&dir))?;
    let now = SystemTime::now();
    let doc = Document {
        version: 1,
        container_id: container_id.to_string(),
        phase,
        time: humantime::format_rfc3339_millis(now).to_string(),
        manifest: manifest.clone(),
        start_sha256: start.map(|(sha, _)| sha.to_string()),
        diff: start.map(|(_, d)| d.clone()),
    };
    let mut bytes = serde_json::to_vec(&doc).expect("manifests always serialise");
    bytes.push(b'\n');
    let stamp = doc.time.replace([':', '-'], "");
    let name = format!("{container_id}-{}-{stamp}.json", phase.as_str());
    let path = dir.join(&name);
    let options = crate::atomic_file::Options {
        mode: 0o600,
        durable: true,
    };
    crate::atomic_file::write(&path, &bytes, options).map_err(io(&path))?;
    Ok(WrittenManifest {
        path,
        sha256: hex(&Sha256::digest(&bytes)),
        bytes: bytes.len() as u64,
    })
}

/// Reads a manifest file back, refusing it unless its sha256 is `expected_sha256` (the digest
/// recorded when it was written): the start manifest sits on disk for the sandbox's lifetime.
pub fn read_manifest(path: &Path, expected_sha256: &str) -> Result<Manifest, ArtifactsError> {
    let bytes = std::fs::read(path).map_err(|source| ArtifactsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let actual = hex(&Sha256::digest(&bytes));
    if actual != expected_sha256 {
        return Err(ArtifactsError::DigestMismatch {
            path: path.to_path_buf(),
            expected: expected_sha256.to_string(),
            actual,
        });
    }
    let doc: Document = serde_json::from_slice(&bytes).map_err(|e| ArtifactsError::Malformed {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(doc.manifest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::artifacts::{build_manifest, diff, Bounds, WritableMount};
    use std::time::Duration;

    fn manifest_of(dir: &Path) -> Manifest {
        let m = WritableMount {
            source: dir.to_path_buf(),
            destination: "/data".into(),
        };
        build_manifest(&[m], &Bounds::new(100, 1 << 20, Duration::from_secs(10)))
    }

    #[test]
    fn a_manifest_is_written_beside_the_audit_log_and_read_back() {
        let logs = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        std::fs::write(data.path().join("a"), b"hello").unwrap();
        let audit = logs.path().join("audit.jsonl");
        let start = manifest_of(data.path());
        let w = write_manifest(&audit, "c1", Phase::Start, &start, None).unwrap();
        assert_eq!(w.path.parent().unwrap(), logs.path().join("artifacts"));
        let name = w.path.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("c1-start-") && name.ends_with(".json"),
            "{name}"
        );
        let bytes = std::fs::read(&w.path).unwrap();
        assert_eq!(hex(&Sha256::digest(&bytes)), w.sha256);
        assert_eq!(read_manifest(&w.path, &w.sha256).unwrap(), start);

        std::fs::write(data.path().join("b"), b"new").unwrap();
        let exit = manifest_of(data.path());
        let d = diff(&start, &exit);
        let we = write_manifest(&audit, "c1", Phase::Exit, &exit, Some((&w.sha256, &d))).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&we.path).unwrap()).unwrap();
        assert_eq!(v["phase"], "exit");
        assert_eq!(v["start_sha256"], w.sha256.as_str());
        assert_eq!(v["diff"]["added"][0]["path"], "b");
        // Nothing but the two manifests is left in the directory (no temporary files).
        assert_eq!(
            std::fs::read_dir(logs.path().join("artifacts"))
                .unwrap()
                .count(),
            2
        );
    }

    #[test]
    fn an_edited_start_manifest_is_refused() {
        let logs = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let audit = logs.path().join("audit.jsonl");
        let w =
            write_manifest(&audit, "c1", Phase::Start, &manifest_of(data.path()), None).unwrap();
        let text = std::fs::read_to_string(&w.path).unwrap();
        std::fs::write(
            &w.path,
            text.replace("\"complete\":true", "\"complete\":false"),
        )
        .unwrap();
        let e = read_manifest(&w.path, &w.sha256).unwrap_err();
        assert!(matches!(e, ArtifactsError::DigestMismatch { .. }), "{e}");
    }

    #[test]
    fn container_ids_that_could_escape_are_refused() {
        let logs = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let audit = logs.path().join("audit.jsonl");
        let m = manifest_of(data.path());
        for id in ["", "../x", "a/b", ".hidden", "a\nb"] {
            let e = write_manifest(&audit, id, Phase::Start, &m, None).unwrap_err();
            assert!(
                matches!(e, ArtifactsError::BadContainerId(_)),
                "{id:?}: {e}"
            );
        }
        assert!(
            !logs.path().join("artifacts").exists() || {
                std::fs::read_dir(logs.path().join("artifacts"))
                    .unwrap()
                    .count()
                    == 0
            }
        );
    }
}
