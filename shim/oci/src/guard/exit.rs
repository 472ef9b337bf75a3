//! The guard's account of the sandbox's end: the classification (the sandbox core's,
//! `gvisor_hardened_core::sandbox::exit`), the exit record the engine's `state` and `delete`
//! read, and the `exit` audit record with what the end found (`sandbox::end`, the shim's too).

use std::time::SystemTime;

use super::Guard;
use crate::state::ExitRecord;
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord};
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::sandbox::end::ExitEvidence;

impl Guard {
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
        evidence: &ExitEvidence,
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
        evidence.annotate(&mut rec);
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
