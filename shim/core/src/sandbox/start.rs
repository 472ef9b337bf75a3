//! The one start sequence of a created container's init, for both front ends (the shim's
//! Start; runsc-hardened's `start`, whose guard takes over from the notify fifo). The front
//! end holds its start lock around [`start`]: the exit sequence waits for it, so a workload
//! that ends at once is announced after its start.
//!
//! In order: the start manifest of the writable volumes, before the workload runs (one that
//! cannot be written fails the start: the policy asks for evidence that could not be
//! recorded), kept for the exit's; the workload started; the front end's "it runs" (state,
//! time limits, the engine's event or the guard's word); the `start` record with the manifest.

use std::path::PathBuf;

use async_trait::async_trait;
use policy_injector::policy::ArtifactsPolicy;

use crate::artifacts::{self, ArtifactsError, StartRecord, WritableMount};
use crate::audit::{ArtifactsAudit, AuditEvent, AuditRecord, Subject};

/// What the start manifest covers.
pub struct StartPlan<'a> {
    pub id: &'a str,
    pub subject: &'a Subject,
    pub mounts: Vec<WritableMount>,
    pub policy: ArtifactsPolicy,
    /// The audit log the manifests are kept beside.
    pub audit_log: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    #[error("the start manifest's walk failed: {0}")]
    Walk(String),
}

/// What a front end does at each step of [`start`].
#[async_trait]
pub trait StartSteps: Send + Sync {
    type Error: From<StartError> + Send + Sync;
    /// Keeps the start manifest where the exit sequence finds it.
    fn keep_manifest(&self, start: &StartRecord) -> Result<(), Self::Error>;
    /// Starts the workload (`runsc start`). Returns the pid the `start` record names.
    async fn run(&self) -> Result<Option<u32>, Self::Error>;
    /// The workload runs: the front end's state, its time limits, its engine told.
    async fn running(&self, pid: Option<u32>);
    /// Writes a record; a failure is the front end's to log.
    async fn append(&self, record: &AuditRecord<'_>);
}

/// Starts the init of `plan.id` through `steps`; returns the pid its record names.
pub async fn start<S: StartSteps + ?Sized>(
    steps: &S,
    plan: StartPlan<'_>,
) -> Result<Option<u32>, S::Error> {
    let StartPlan {
        id,
        subject,
        mounts,
        policy,
        audit_log,
    } = plan;
    let manifest = if policy.enabled && !mounts.is_empty() {
        let id = id.to_string();
        // A walk of the volumes: off the async threads.
        tokio::task::spawn_blocking(move || {
            artifacts::record_start_of(mounts, &policy, &audit_log, &id)
        })
        .await
        .map_err(|e| StartError::Walk(e.to_string()))?
        .map_err(StartError::from)?
    } else {
        None
    };
    if let Some(start) = &manifest {
        steps.keep_manifest(start)?;
    }
    let pid = steps.run().await?;
    steps.running(pid).await;
    let mut rec = AuditRecord::new(AuditEvent::Start, subject);
    rec.pid = pid;
    rec.artifacts = manifest.as_ref().map(ArtifactsAudit::Start);
    steps.append(&rec).await;
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::audit::test_support::subject;

    struct Steps {
        fail_run: bool,
        seen: Mutex<Vec<String>>,
    }

    impl Steps {
        fn new(fail_run: bool) -> Steps {
            Steps {
                fail_run,
                seen: Mutex::new(Vec::new()),
            }
        }
        fn saw(&self, what: String) {
            self.seen.lock().unwrap().push(what);
        }
        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl StartSteps for Steps {
        type Error = String;
        fn keep_manifest(&self, start: &StartRecord) -> Result<(), String> {
            self.saw(format!("keep manifest of {} mounts", start.mounts.len()));
            Ok(())
        }
        async fn run(&self) -> Result<Option<u32>, String> {
            self.saw("run".into());
            if self.fail_run {
                return Err("runsc start failed".into());
            }
            Ok(Some(42))
        }
        async fn running(&self, pid: Option<u32>) {
            self.saw(format!("running {pid:?}"));
        }
        async fn append(&self, record: &AuditRecord<'_>) {
            let line = serde_json::to_value(record).unwrap();
            self.saw(format!(
                "record {} pid {} artifacts {}",
                line["event"],
                line["pid"],
                line.get("artifacts").is_some()
            ));
        }
    }

    impl From<StartError> for String {
        fn from(e: StartError) -> String {
            e.to_string()
        }
    }

    fn plan<'a>(subject: &'a Subject, dir: &std::path::Path, enabled: bool) -> StartPlan<'a> {
        let volume = dir.join("volume");
        std::fs::create_dir_all(&volume).unwrap();
        std::fs::write(volume.join("a.txt"), b"hello").unwrap();
        StartPlan {
            id: "c1",
            subject,
            mounts: vec![WritableMount {
                source: volume,
                destination: "/work".into(),
            }],
            policy: ArtifactsPolicy {
                enabled,
                ..Default::default()
            },
            audit_log: dir.join("audit.jsonl"),
        }
    }

    fn run(steps: &Steps, plan: StartPlan<'_>) -> Result<Option<u32>, String> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(start(steps, plan))
    }

    #[test]
    fn the_manifest_is_kept_before_the_workload_runs_and_named_in_the_start_record() {
        let dir = tempfile::tempdir().unwrap();
        let subject = subject("c1");
        let steps = Steps::new(false);
        assert_eq!(run(&steps, plan(&subject, dir.path(), true)), Ok(Some(42)));
        assert_eq!(
            steps.seen(),
            [
                "keep manifest of 1 mounts",
                "run",
                "running Some(42)",
                "record \"start\" pid 42 artifacts true",
            ]
        );
    }

    #[test]
    fn without_manifests_the_start_record_carries_none() {
        let dir = tempfile::tempdir().unwrap();
        let subject = subject("c1");
        let steps = Steps::new(false);
        run(&steps, plan(&subject, dir.path(), false)).unwrap();
        assert_eq!(
            steps.seen(),
            [
                "run",
                "running Some(42)",
                "record \"start\" pid 42 artifacts false"
            ]
        );
    }

    #[test]
    fn a_manifest_that_cannot_be_written_fails_the_start_before_the_workload_runs() {
        let dir = tempfile::tempdir().unwrap();
        let subject = subject("c1");
        let steps = Steps::new(false);
        let mut plan = plan(&subject, dir.path(), true);
        // The manifests go beside the audit log: a log under a file cannot have them.
        std::fs::write(dir.path().join("not-a-dir"), b"").unwrap();
        plan.audit_log = dir.path().join("not-a-dir/audit.jsonl");
        assert!(run(&steps, plan).is_err());
        assert!(steps.seen().is_empty(), "{:?}", steps.seen());
    }

    #[test]
    fn a_workload_that_does_not_start_is_neither_running_nor_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let subject = subject("c1");
        let steps = Steps::new(true);
        assert!(run(&steps, plan(&subject, dir.path(), true)).is_err());
        assert_eq!(steps.seen(), ["keep manifest of 1 mounts", "run"]);
    }
}
