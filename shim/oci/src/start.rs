//! `start`: the writable volumes' start manifest (`[audit.artifacts]`), `runsc start`, then the
//! guard is told, which arms the lifetime and leaves the sandbox's cgroups.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::error::Result;
use super::guard::STARTED;
use crate::opened::{not_running, Opened};
use gvisor_hardened_core::artifacts::{self, StartRecord};
use gvisor_hardened_core::audit::{ArtifactsAudit, AuditEvent, AuditRecord};

pub async fn run(c: &Opened) -> Result<()> {
    let id = &c.record.id;
    // Until our record is written: the guard writes the exit record after it.
    let _start = c.state.lock_start()?;
    // The writable volumes' start manifest, before the workload runs: one that cannot be
    // written fails the start, as in the shim.
    let manifest = start_manifest(c)?;
    c.runtime
        .start(id, None)
        .await
        .map_err(|e| not_running(e, id))?;
    // Non-blocking: a guard that is gone (killed) must not hang the start.
    let told = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(c.state.notify_fifo())
        .and_then(|mut f| f.write_all(format!("{STARTED}\n").as_bytes()));
    if let Err(e) = told {
        c.record.log.warn(&format!(
            "container {id}: the guard did not take the start ({e}): no lifetime limit is enforced"
        ));
    }
    let mut rec = AuditRecord::new(AuditEvent::Start, &c.record.subject);
    rec.pid = c.state.sandbox_pid().map(|p| p as u32);
    rec.artifacts = manifest.as_ref().map(ArtifactsAudit::Start);
    c.audit_best_effort(&rec);
    Ok(())
}

fn start_manifest(c: &Opened) -> Result<Option<StartRecord>> {
    let start = artifacts::record_start_of(
        c.record.writable_binds.clone(),
        &c.policy.audit.artifacts,
        &c.record.audit_path,
        &c.record.id,
    )?;
    if let Some(start) = &start {
        c.state.set_artifacts_start(start)?;
    }
    Ok(start)
}
