//! The two calls the container lifecycle makes: [`record_start`] before the sandbox runs and
//! [`record_exit`] after it ended, before the exit is announced. Both block (they walk the
//! volumes): call them from a blocking thread.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use policy_injector::policy::ArtifactsPolicy;

use super::diff::{diff, DiffSummary};
use super::store::{read_manifest, write_manifest, Phase, WrittenManifest};
use super::walk::build_manifest;
use super::{writable_binds, ArtifactsError, Bounds, WritableMount, DIFF_PATHS_IN_RECORD};

/// What the start leaves for the exit, and what the start's audit record can carry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StartRecord {
    #[serde(skip)]
    pub mounts: Vec<WritableMount>,
    pub manifest: WrittenManifest,
    /// Every mount walked to the end within the bounds.
    pub complete: bool,
}

/// What the exit audit record carries (`artifacts` field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExitRecord {
    /// The exit manifest file and its sha256; the file holds the full diff too.
    pub manifest: WrittenManifest,
    pub start_sha256: String,
    pub complete: bool,
    pub all_hashed: bool,
    pub diff: DiffSummary,
}

/// Walks the writable bind mounts of the hardened `spec` and writes the start manifest beside
/// `audit_log`. `Ok(None)`: manifests are off, or the spec has no writable bind mount. An error
/// means the manifest could not be written: fail the start, as for an audit record.
pub fn record_start(
    spec: &Value,
    policy: &ArtifactsPolicy,
    audit_log: &Path,
    container_id: &str,
) -> Result<Option<StartRecord>, ArtifactsError> {
    record_start_of(writable_binds(spec), policy, audit_log, container_id)
}

/// [`record_start`] for mounts already found in the spec (the shim finds them at Create and
/// walks them at Start).
pub fn record_start_of(
    mounts: Vec<WritableMount>,
    policy: &ArtifactsPolicy,
    audit_log: &Path,
    container_id: &str,
) -> Result<Option<StartRecord>, ArtifactsError> {
    if !policy.enabled || mounts.is_empty() {
        return Ok(None);
    }
    let manifest = build_manifest(&mounts, &Bounds::from_policy(policy));
    let written = write_manifest(audit_log, container_id, Phase::Start, &manifest, None)?;
    Ok(Some(StartRecord {
        mounts,
        manifest: written,
        complete: manifest.complete,
    }))
}

/// Walks the same mounts again, diffs against the start manifest (read back and checked
/// against its recorded sha256), and writes the exit manifest with the full diff.
pub fn record_exit(
    start: &StartRecord,
    policy: &ArtifactsPolicy,
    audit_log: &Path,
    container_id: &str,
) -> Result<ExitRecord, ArtifactsError> {
    let exit = build_manifest(&start.mounts, &Bounds::from_policy(policy));
    let before = read_manifest(&start.manifest.path, &start.manifest.sha256)?;
    let d = diff(&before, &exit);
    let written = write_manifest(
        audit_log,
        container_id,
        Phase::Exit,
        &exit,
        Some((&start.manifest.sha256, &d)),
    )?;
    Ok(ExitRecord {
        manifest: written,
        start_sha256: start.manifest.sha256.clone(),
        complete: exit.complete,
        all_hashed: exit.all_hashed,
        diff: d.summary(DIFF_PATHS_IN_RECORD),
    })
}

/// Allowed beyond `max_walk_time` for the exit manifest: the walk checks its deadline between
/// entries and reads, but a single system call on a hung filesystem can outlast it.
pub const WALK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// [`record_exit`] on a blocking thread, given at most `max_walk_time` + [`WALK_GRACE`]: the
/// exit record waits for it, so a hostile volume delays it by a bounded time, never forever.
/// The error says why there is no exit manifest.
pub async fn record_exit_bounded(
    start: StartRecord,
    policy: ArtifactsPolicy,
    audit_log: std::path::PathBuf,
    container_id: String,
) -> Result<ExitRecord, String> {
    let bound = policy.max_walk_time.0 + WALK_GRACE;
    let walk = tokio::task::spawn_blocking(move || {
        record_exit(&start, &policy, &audit_log, &container_id)
    });
    match tokio::time::timeout(bound, walk).await {
        Ok(Ok(Ok(record))) => Ok(record),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(e)) => Err(format!("the exit manifest's walk failed: {e}")),
        Err(_) => Err(format!("the exit manifest was not done within {bound:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec_with(volume: &Path) -> Value {
        json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/data", "type": "bind", "source": volume, "options": ["rbind", "rw"]},
            {"destination": "/etc/hosts", "type": "bind", "source": "/etc/hosts", "options": ["rbind", "ro"]}
        ]})
    }

    #[test]
    fn start_and_exit_record_what_the_sandbox_changed() {
        let logs = tempfile::tempdir().unwrap();
        let vol = tempfile::tempdir().unwrap();
        std::fs::write(vol.path().join("kept"), b"same").unwrap();
        std::fs::write(vol.path().join("edited"), b"before").unwrap();
        std::fs::write(vol.path().join("deleted"), b"x").unwrap();
        let audit = logs.path().join("audit.jsonl");
        let policy = ArtifactsPolicy::default();
        let start = record_start(&spec_with(vol.path()), &policy, &audit, "c1")
            .unwrap()
            .expect("one writable bind");
        assert_eq!(start.mounts.len(), 1, "the read-only bind is not walked");
        // What the sandbox does.
        std::fs::write(vol.path().join("edited"), b"after!").unwrap();
        std::fs::remove_file(vol.path().join("deleted")).unwrap();
        std::fs::write(vol.path().join("created"), b"new").unwrap();
        let exit = record_exit(&start, &policy, &audit, "c1").unwrap();
        let paths =
            |v: &[super::super::Change]| v.iter().map(|c| c.path.clone()).collect::<Vec<_>>();
        assert_eq!(paths(&exit.diff.added_paths), ["created"]);
        assert_eq!(paths(&exit.diff.modified_paths), ["edited"]);
        assert_eq!(paths(&exit.diff.removed_paths), ["deleted"]);
        assert!(exit.diff.exact && exit.complete);
        assert_eq!(exit.start_sha256, start.manifest.sha256);
        assert_eq!(
            exit.manifest.path.parent().unwrap(),
            crate::artifacts::artifacts_dir(&audit)
        );
        let record = serde_json::to_value(&exit).unwrap();
        assert_eq!(record["diff"]["added"], 1);
        assert_eq!(record["manifest"]["sha256"], exit.manifest.sha256.as_str());
    }

    #[test]
    fn no_writable_bind_or_manifests_off_records_nothing() {
        let logs = tempfile::tempdir().unwrap();
        let audit = logs.path().join("audit.jsonl");
        let policy = ArtifactsPolicy::default();
        assert!(record_start(&json!({"mounts": []}), &policy, &audit, "c1")
            .unwrap()
            .is_none());
        let vol = tempfile::tempdir().unwrap();
        let off = ArtifactsPolicy {
            enabled: false,
            ..ArtifactsPolicy::default()
        };
        assert!(record_start(&spec_with(vol.path()), &off, &audit, "c1")
            .unwrap()
            .is_none());
        assert!(!crate::artifacts::artifacts_dir(&audit).exists());
    }

    #[test]
    fn a_start_manifest_edited_on_disk_fails_the_exit_record() {
        let logs = tempfile::tempdir().unwrap();
        let vol = tempfile::tempdir().unwrap();
        let audit = logs.path().join("audit.jsonl");
        let policy = ArtifactsPolicy::default();
        let start = record_start(&spec_with(vol.path()), &policy, &audit, "c1")
            .unwrap()
            .unwrap();
        let mut text = std::fs::read_to_string(&start.manifest.path).unwrap();
        text.push(' ');
        std::fs::write(&start.manifest.path, text).unwrap();
        let e = record_exit(&start, &policy, &audit, "c1").unwrap_err();
        assert!(matches!(e, ArtifactsError::DigestMismatch { .. }), "{e}");
    }
}
