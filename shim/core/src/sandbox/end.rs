//! What a sandbox's end leaves for its exit record, gathered the same way by both front ends:
//! what its processes wrote (the front end drains its own output copy), the exit manifest of
//! its writable volumes, and the workspace's conclusion.

use std::path::PathBuf;

use policy_injector::policy::ArtifactsPolicy;

use crate::artifacts::{self, ExitRecord, StartRecord};
use crate::audit::{ArtifactsAudit, AuditRecord};
use crate::output_limit::OutputReport;
use crate::workspace::{self, WorkspaceReport};

/// What the exit path found, for the exit record.
#[derive(Default)]
pub struct ExitEvidence {
    pub output: Option<OutputReport>,
    pub artifacts: Option<Result<ExitRecord, String>>,
    pub workspace: Option<WorkspaceReport>,
}

impl ExitEvidence {
    /// The workspace's one line for the user, when the exit changed or found anything.
    pub fn workspace_summary(&self) -> Option<String> {
        self.workspace.as_ref()?.summary()
    }

    /// The evidence in the exit record: the output's report, the manifest's diff, the
    /// workspace's conclusion.
    pub fn annotate<'a>(&'a self, rec: &mut AuditRecord<'a>) {
        if let Some(report) = &self.output {
            rec.set_output(report);
        }
        rec.artifacts = self.artifacts.as_ref().map(ArtifactsAudit::of_exit);
        rec.workspace = self.workspace.as_ref();
    }
}

/// A sandbox's volumes at its end.
pub struct Volumes {
    pub container_id: String,
    /// The start manifest, when Start took one.
    pub start: Option<StartRecord>,
    pub policy: ArtifactsPolicy,
    /// The audit log the manifests are kept beside.
    pub audit_log: PathBuf,
    pub bundle: PathBuf,
}

/// The exit manifest records what the sandbox left (bounded by `max_walk_time` +
/// [`artifacts::WALK_GRACE`]); then the workspace is concluded (what would run on the host is
/// neutralised), before the exit is announced. Failures are logged and carried in the result.
pub async fn volumes_at_exit(
    v: Volumes,
) -> (Option<Result<ExitRecord, String>>, Option<WorkspaceReport>) {
    let id = v.container_id;
    let artifacts = match v.start {
        Some(start) => {
            let result =
                artifacts::record_exit_bounded(start, v.policy, v.audit_log, id.clone()).await;
            if let Err(e) = &result {
                log::error!("container {id}: {e}");
            }
            Some(result)
        }
        None => None,
    };
    let bundle = v.bundle;
    let workspace =
        tokio::task::spawn_blocking(move || workspace::finish(&bundle, workspace::Ending::Ran))
            .await
            .unwrap_or_else(|e| {
                log::error!("container {id}: concluding the workspace: {e}");
                None
            });
    if let Some(report) = &workspace {
        for e in &report.errors {
            log::warn!("container {id}: workspace: {e}");
        }
        if let Some(line) = report.summary() {
            log::warn!("container {id}: {line}");
        }
    }
    (artifacts, workspace)
}
