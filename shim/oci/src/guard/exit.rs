//! The guard's part of the one exit sequence (`gvisor_hardened_core::sandbox::ending`, the
//! shim's too): the sandbox's egress stops with it, a `start` still writing its record goes
//! first, the output is drained with the enforcement line after it, the volumes' evidence is
//! taken (`sandbox::end`), and the exit is kept in the state directory, where the engine's
//! `state` and `delete` read it, before its record. The engines take no events: they wait on
//! the guard's pid and read its exit code.

use std::sync::Mutex;

use async_trait::async_trait;
use policy_injector::policy::ArtifactsPolicy;
use policy_injector::Lifetime;

use super::stdio;
use crate::state::{ExitRecord, Record, StateDir};
use crate::trail::StateTrail;
use gvisor_hardened_core::audit::{AuditRecord, Subject};
use gvisor_hardened_core::egress::EgressSupervisor;
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::sandbox::end::{self, ExitEvidence};
use gvisor_hardened_core::sandbox::ending::ExitSteps;

/// The sandbox, at its end, as the guard holds it.
pub(super) struct SandboxEnd<'a> {
    pub state: &'a StateDir,
    pub record: &'a Record,
    pub audit: &'a StateTrail,
    pub probe: Option<&'a dyn SandboxCgroups>,
    pub stopped_for: Option<ExitCause>,
    pub artifacts: &'a ArtifactsPolicy,
    /// Taken by the sandbox's end.
    pub egress: Mutex<Option<EgressSupervisor>>,
    /// The init's output copy, drained by the evidence step.
    pub streams: tokio::sync::Mutex<&'a mut stdio::Guarded>,
}

#[async_trait]
impl ExitSteps for SandboxEnd<'_> {
    fn who(&self) -> String {
        format!("container {}", self.record.id)
    }

    fn subject(&self) -> &Subject {
        &self.record.subject
    }

    fn lifetime(&self) -> Lifetime {
        self.record.lifetime
    }

    fn stopped_for(&self) -> Option<ExitCause> {
        self.stopped_for
    }

    fn cgroups(&self) -> Option<&dyn SandboxCgroups> {
        self.probe
    }

    // Still in the sandbox's cgroups under Podman: no need to move out now, the exit that
    // follows takes the guard out of them, and moving between v1 hierarchies costs ~7 ms on
    // the path from the sandbox's exit to the engine seeing it.
    async fn sandbox_ended(&self) {
        let egress = self.egress.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(egress) = egress {
            egress.stop().await;
        }
        gvisor_hardened_core::egress::credentials::forget_sandbox(
            &self.record.namespace,
            &self.record.id,
        );
    }

    /// `start` holds the lock until its record is written (and its start manifest, which the
    /// exit manifest is taken against).
    async fn after_start(&self) {
        match self.state.lock_start() {
            Ok(lock) => drop(lock),
            Err(e) => log::warn!("container {}: {e}", self.record.id),
        }
    }

    async fn evidence(&self, note: Option<String>) -> ExitEvidence {
        let output = self.streams.lock().await.report(&self.who(), note).await;
        // Before the engine sees the exit: the developer's next git command runs on what this
        // leaves (see gvisor_hardened_core::workspace).
        let (artifacts, workspace) = end::volumes_at_exit(end::Volumes {
            container_id: self.record.id.clone(),
            start: self.state.artifacts_start(&self.record.writable_binds),
            policy: self.artifacts.clone(),
            audit_log: self.record.audit_path.clone(),
            bundle: self.record.bundle.clone(),
        })
        .await;
        ExitEvidence {
            output,
            artifacts,
            workspace,
        }
    }

    /// Always kept: the guard is the one path to the sandbox's exit status.
    async fn keep(&self, exit: &Exit) -> bool {
        let _start = self.state.lock_start();
        if let Err(e) = self.state.set_exit(&ExitRecord::of(exit)) {
            log::warn!("{e}");
        }
        true
    }

    async fn append(&self, record: &AuditRecord<'_>) {
        if let Err(e) = self.audit.append(record) {
            log::error!("container {}: {e}", self.record.id);
        }
    }
}
