//! A container a subcommand works on: what `create` left in its state directory, opened again
//! with the runtime and host seams over it. Every subcommand after `create` starts here.

use crate::cli::Global;
use crate::error::{OciError, Result};
use crate::state::{Record, StateDir};
use crate::{runtime, trail};
use gvisor_hardened_core::reaper::Reaper;

/// An existing container: its state, record, policy, and the sandbox core's runtime over a
/// runsc client configured as at create.
pub(crate) struct Opened {
    pub state: StateDir,
    pub record: Record,
    pub policy: policy_injector::Policy,
    /// The sandbox core's seam over the container's runsc.
    pub runtime: std::sync::Arc<dyn gvisor_hardened_core::runtime::SandboxRuntime>,
    /// The sandbox core's seam over the host's cgroups.
    pub host: std::sync::Arc<dyn gvisor_hardened_core::host::Host>,
}

impl Opened {
    pub(crate) async fn open(g: &Global, id: &str) -> Result<Opened> {
        Self::open_with(g, id, Reaper::install()?).await
    }

    /// For exec: `runsc exec --detach` leaves the exec's process behind for the engine to
    /// wait on, so this process must not be a subreaper that would inherit (and reap) it.
    pub(crate) async fn open_for_exec(g: &Global, id: &str) -> Result<Opened> {
        Self::open_with(g, id, Reaper::install_without_subreaper()?).await
    }

    pub(crate) async fn open_with(g: &Global, id: &str, reaper: Reaper) -> Result<Opened> {
        let state = StateDir::new(g.root.as_deref(), id)?;
        Ok(Self::from_state(state, reaper, None)?.0)
    }

    /// The container whose state directory is `state`, as `create` recorded it: its policy and
    /// the runtime over its runsc (which writes the sandbox's pid to `sandbox_pid_file` when
    /// given; `create`'s guard needs it). Also returns the runsc client, for the guard's own
    /// `runsc delete`.
    pub(crate) fn from_state(
        state: StateDir,
        reaper: Reaper,
        sandbox_pid_file: Option<std::path::PathBuf>,
    ) -> Result<(Opened, gvisor_hardened_core::runsc::client::Runsc)> {
        let record = state.record()?;
        let policy = record.policy()?;
        let runsc = runtime::runsc_for(&record, &policy, &reaper)?;
        // Execs without a terminal as one attached runsc process, as in the shim.
        let mut runtime =
            gvisor_hardened_core::runtime::runsc::RunscRuntime::new(runsc.clone(), reaper)
                .with_attached_exec();
        if let Some(path) = sandbox_pid_file {
            runtime = runtime.with_pid_file(path);
        }
        let c = Opened {
            state,
            record,
            policy,
            runtime: std::sync::Arc::new(runtime),
            host: std::sync::Arc::new(gvisor_hardened_core::host::linux::LinuxHost),
        };
        Ok((c, runsc))
    }

    /// The container's trail: its records, in the shared log, covered by `delete`'s signature.
    pub(crate) fn audit(&self) -> trail::StateTrail {
        trail::StateTrail::open(&self.record, &self.state)
    }

    /// Audits best effort: the call's own outcome is what the engine needs.
    pub(crate) fn audit_best_effort(&self, rec: &gvisor_hardened_core::audit::AuditRecord<'_>) {
        if let Err(e) = self.audit().append(rec) {
            self.record
                .log
                .warn(&format!("container {}: {e}", self.record.id));
        }
    }
}

pub(crate) fn not_running(e: gvisor_hardened_core::runsc::error::RunscError, id: &str) -> OciError {
    if e.is_gone() {
        OciError::NotRunning(id.to_string())
    } else {
        OciError::Runsc(e)
    }
}
