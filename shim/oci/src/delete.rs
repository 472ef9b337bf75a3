//! `delete [--force] ID`: idempotent (an unknown id is already deleted: Docker runs `delete`
//! then `delete --force`, and conmon's cleanup may repeat it). Removes runsc's container (a
//! forced runsc delete kills a sandbox still running) unless the `runsc delete` the guard
//! started at the exit did, waits for the guard to finish its account of the exit, removes
//! cgroups runsc left, audits, and removes the state.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::cli::Global;
use super::error::{OciError, Result};
use super::runtime::{runsc_for, POLL};
use super::state::{Record, StateDir};
use super::trail::StateTrail;
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord, Signer};
use gvisor_hardened_core::bundle;
use gvisor_hardened_core::host::linux::LinuxHost;
use gvisor_hardened_core::host::Host;
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runtime::runsc::RunscRuntime;
use gvisor_hardened_core::runtime::SandboxRuntime;
use gvisor_hardened_core::sandbox::release::{self, ReleasePlan, ReleaseProblem, ReleaseSteps};

/// The container's runtime as `create` configured it, or why it cannot be had (then runsc's
/// part of the delete is reported, the rest still done).
type Runtime = std::result::Result<Arc<dyn SandboxRuntime>, String>;

/// How long `delete` waits for a guard to finish its account of the exit before killing it.
pub const GUARD_EXIT_WAIT: Duration = Duration::from_secs(10);

pub async fn run(g: &Global, id: &str, force: bool) -> Result<()> {
    let state = StateDir::new(g.root.as_deref(), id)?;
    let record = match state.record() {
        Ok(r) => r,
        Err(OciError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let guard = state.live_guard();
    // The engine's view decides what "running" means: the guard is the pid it waits on. A
    // sandbox that outlived its guard (killed) belongs to a stopped container and goes now.
    if !force && guard.is_some() {
        return Err(OciError::NotStopped(id.to_string()));
    }
    let reaper = Reaper::install()?;
    let policy = record.policy()?;
    let runtime = runsc_for(&record, &policy, &reaper)
        .map(|runsc| Arc::new(RunscRuntime::new(runsc, reaper)) as Arc<dyn SandboxRuntime>)
        .map_err(|e| e.to_string());
    remove(state, record, &policy, guard, runtime, &LinuxHost).await
}

/// Everything after the checks: runsc's container, a guard still there (forced), cgroups,
/// the final audit record, the state. `guard`: the live guard's pid.
pub(super) async fn remove(
    state: StateDir,
    record: Record,
    policy: &policy_injector::Policy,
    guard: Option<i32>,
    runtime: Runtime,
    host: &dyn Host,
) -> Result<()> {
    let id = &record.id;
    let mut problems: Vec<String> = Vec::new();
    let mut runsc_done = false;
    if let Some(pid) = guard {
        // Still running (forced): runsc's delete kills the sandbox, the guard accounts for it.
        // Waited on and killed through a pidfd, taken while the pid and start time match.
        let process = state.guard_process();
        runsc_done = runsc_delete(&runtime, id, &mut problems).await;
        if let Some(process) = process {
            let deadline = Instant::now() + GUARD_EXIT_WAIT;
            while process.is_running() && Instant::now() < deadline {
                tokio::time::sleep(POLL).await;
            }
            if process.is_running() {
                let _ = process.signal(libc::SIGKILL);
                problems.push(format!(
                    "the guard (pid {pid}) did not exit within {GUARD_EXIT_WAIT:?} and was killed"
                ));
            }
        }
    }
    // The guard started runsc's delete at the exit (`guard::runsc_delete`): let it end,
    // and run runsc here only when it did not succeed (or never ran: a killed guard).
    let deadline = Instant::now() + GUARD_EXIT_WAIT;
    if let Some(process) = state.runsc_delete_process() {
        while process.is_running() && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
    }
    let plan = ReleasePlan {
        id,
        runsc_id: id,
        cgroups_path: &record.cgroups_path,
        bundle: record.bundle.clone(),
        files: bundle::Files::Engine,
    };
    let steps = EngineRelease {
        runtime: &runtime,
        host,
        deleted: runsc_done || state.runsc_deleted(),
    };
    // The guard concludes the workspace at the exit; a guard that was killed first did not.
    let released = release::release(&steps, plan).await;
    problems.extend(released.problems.iter().map(ToString::to_string));
    let workspace = released.workspace;
    let exit = state.exit();
    let mut rec = AuditRecord::new(AuditEvent::Delete, &record.subject);
    rec.workspace = workspace.as_ref();
    rec.pid = state.sandbox_pid().map(|p| p as u32);
    rec.exit_status = exit.as_ref().map(|e| e.status);
    if exit.is_none() {
        problems
            .push("no exit was recorded: the guard did not see the sandbox end (killed?)".into());
    }
    if !problems.is_empty() {
        rec.error = Some(problems.join("; "));
    }
    // The final record, signed over the container's records when the policy names a key. A
    // key that went missing since `create` leaves it unsigned (verification then reports the
    // container), never unwritten.
    let signer = Signer::for_policy(&policy.audit).unwrap_or_else(|e| {
        record.log.warn(&format!(
            "container {id}: {e}; the final audit record is not signed"
        ));
        None
    });
    if let Err(e) = StateTrail::open(&record, &state).seal(&rec, signer.as_ref()) {
        record.log.warn(&format!("container {id}: {e}"));
    }
    state.remove()
}

/// `runsc delete --force`; whether runsc's container is gone (deleted now or already).
async fn runsc_delete(runtime: &Runtime, id: &str, problems: &mut Vec<String>) -> bool {
    match runtime {
        Ok(runtime) => match runtime.delete(id).await {
            Ok(()) => true,
            Err(e) if e.is_gone() => true,
            Err(e) => {
                problems.push(e.to_string());
                false
            }
        },
        Err(e) => {
            problems.push(e.clone());
            false
        }
    }
}

/// runsc-hardened's steps of the core's release sequence: the engine's runc shim holds the
/// streams and the rootfs, so nothing of them is ours to let go.
struct EngineRelease<'a> {
    runtime: &'a Runtime,
    host: &'a dyn Host,
    /// runsc's container is gone already (the guard's delete at the exit, or the forced one).
    deleted: bool,
}

#[async_trait]
impl ReleaseSteps for EngineRelease<'_> {
    fn runtime(&self) -> std::result::Result<&dyn SandboxRuntime, String> {
        self.runtime
            .as_ref()
            .map(|r| r.as_ref())
            .map_err(Clone::clone)
    }

    fn host(&self) -> &dyn Host {
        self.host
    }

    fn runsc_deleted(&self) -> bool {
        self.deleted
    }

    async fn let_go(&self, _problems: &mut Vec<ReleaseProblem>) {}
}
