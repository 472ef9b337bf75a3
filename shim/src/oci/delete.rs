//! `delete [--force] ID`: idempotent (an unknown id is already deleted: Docker runs `delete`
//! then `delete --force`, and conmon's cleanup may repeat it). Removes runsc's container (a
//! forced runsc delete kills a sandbox still running), waits for the guard to finish its
//! account of the exit, removes cgroups runsc left, audits, and removes the state.

use std::time::{Duration, Instant};

use super::cli::Global;
use super::error::{OciError, Result};
use super::guard::{runsc_for, GUARD_EXIT_WAIT};
use super::state::{alive, is_guard_of, StateDir};
use super::trail::StateTrail;
use crate::audit::{AuditEvent, AuditRecord, Signer};
use crate::bundle::BUNDLE_STATE;
use crate::cgroup::SandboxCgroup;
use crate::host_tree::EMPTY_FILE;
use crate::reaper::Reaper;

/// After a SIGKILL the kernel refuses rmdir of a cgroup for a moment (threads still exiting).
const CGROUP_RMDIR_WAIT: Duration = Duration::from_secs(5);
/// Both waits below usually end within a few milliseconds (the engine calls `delete` once the
/// guard's pid has exited): a coarse poll would add most of its period to every `run --rm`.
const POLL: Duration = Duration::from_millis(2);

pub async fn run(g: &Global, id: &str, force: bool) -> Result<()> {
    let state = StateDir::new(g.root.as_deref(), id)?;
    let record = match state.record() {
        Ok(r) => r,
        Err(OciError::NotFound(_)) => return Ok(()),
        Err(e) => return Err(e),
    };
    let guard = state
        .guard_pid()
        .filter(|p| alive(*p) && is_guard_of(*p, state.path()));
    // The engine's view decides what "running" means: the guard is the pid it waits on. A
    // sandbox that outlived its guard (killed) belongs to a stopped container and goes now.
    if !force && guard.is_some() {
        return Err(OciError::NotStopped(id.to_string()));
    }
    let mut problems: Vec<String> = Vec::new();
    let reaper = Reaper::install()?;
    let policy = record.policy()?;
    match runsc_for(&record, &policy, &reaper) {
        Ok(runsc) => {
            if let Err(e) = runsc.delete(id, true).await {
                if !e.is_gone() {
                    problems.push(e.to_string());
                }
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    if let Some(pid) = guard {
        let deadline = Instant::now() + GUARD_EXIT_WAIT;
        while alive(pid) && Instant::now() < deadline {
            tokio::time::sleep(POLL).await;
        }
        if alive(pid) && is_guard_of(pid, state.path()) {
            // SAFETY: plain kill(2) of the guard, checked by its command line just now.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            problems.push(format!(
                "the guard (pid {pid}) did not exit within {GUARD_EXIT_WAIT:?} and was killed"
            ));
        }
    }
    if let Ok(cg) = SandboxCgroup::for_spec(&record.cgroups_path, id) {
        let deadline = Instant::now() + CGROUP_RMDIR_WAIT;
        loop {
            match cg.remove_empty() {
                Ok(()) => break,
                Err(_) if Instant::now() < deadline => tokio::time::sleep(POLL).await,
                Err(e) => {
                    problems.push(e.to_string());
                    break;
                }
            }
        }
    }
    let exit = state.exit();
    let mut rec = AuditRecord::new(AuditEvent::Delete, &record.subject);
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
    for name in [BUNDLE_STATE, EMPTY_FILE] {
        let _ = std::fs::remove_file(record.bundle.join(name));
    }
    state.remove()
}
