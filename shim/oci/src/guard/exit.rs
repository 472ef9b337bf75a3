//! The guard's account of the sandbox's end: the exit manifest of the writable volumes, the
//! classification (the sandbox core's, `gvisor_hardened_core::sandbox::exit`), the exit record the engine's
//! `state` and `delete` read, and the `exit` audit record.

use std::time::SystemTime;

use super::Guard;
use crate::state::ExitRecord;
use gvisor_hardened_core::artifacts::{self, ExitRecord as ManifestExit};
use gvisor_hardened_core::audit::{ArtifactsAudit, AuditEvent, AuditRecord};
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::reaper::ExitStatus;

impl Guard {
    /// The writable volumes' exit manifest and diff, when `start` took a start manifest.
    pub(super) async fn exit_manifest(&self) -> Option<std::result::Result<ManifestExit, String>> {
        let start = self.state.artifacts_start(&self.record.writable_binds)?;
        let result = artifacts::record_exit_bounded(
            start,
            self.artifacts.clone(),
            self.record.audit_path.clone(),
            self.record.id.clone(),
        )
        .await;
        if let Err(e) = &result {
            log::error!("container {}: {e}", self.record.id);
        }
        Some(result)
    }

    /// Classifies, records and audits the exit; returns the code to exit with, and the cause.
    /// Why the sandbox ended: read from its cgroups, so before `runsc delete` removes them.
    pub(super) fn classify(&self, status: ExitStatus) -> ExitCause {
        gvisor_hardened_core::sandbox::exit::classify(
            &self.record.id,
            status,
            self.stopped_for.get().copied(),
            self.probe.as_deref(),
        )
    }

    /// The line for the container's log when enforcement ended it.
    pub(super) fn why_enforcement_ended_it(&self, cause: ExitCause) -> Option<String> {
        gvisor_hardened_core::sandbox::termination_message::message(
            cause,
            self.record.lifetime.max_runtime,
            self.record.lifetime.idle_timeout,
        )
    }

    pub(super) fn conclude(
        &self,
        status: ExitStatus,
        cause: ExitCause,
        output: Option<&gvisor_hardened_core::output_limit::OutputReport>,
        artifacts: Option<&std::result::Result<ManifestExit, String>>,
        workspace: Option<&gvisor_hardened_core::workspace::WorkspaceReport>,
    ) -> u8 {
        let exit = Exit::new(status, cause, SystemTime::now());
        // A `start` still writing its record goes first (the workload may end at once).
        let _start = self.state.lock_start();
        if let Err(e) = self.state.set_exit(&ExitRecord::of(&exit)) {
            log::warn!("{e}");
        }
        let mut rec = AuditRecord::new(AuditEvent::Exit, &self.record.subject);
        rec.pid = Some(self.sandbox_pid as u32);
        rec.set_exit(&exit);
        if let Some(report) = output {
            rec.set_output(report);
        }
        rec.artifacts = artifacts.map(ArtifactsAudit::of_exit);
        rec.workspace = workspace;
        if let Err(e) = self.audit.append(&rec) {
            log::error!("container {}: {e}", self.record.id);
        }
        gvisor_hardened_core::sandbox::exit::log_exit(
            &format!("container {}", self.record.id),
            cause,
            status,
        );
        exit.status.min(255) as u8
    }
}
