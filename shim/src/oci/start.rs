//! `start`: `runsc start`, then the guard is told, which arms the lifetime and leaves the
//! sandbox's cgroups.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::error::Result;
use super::guard::STARTED;
use super::{not_running, Opened};
use crate::audit::{AuditEvent, AuditRecord};

pub async fn run(c: &Opened) -> Result<()> {
    let id = &c.record.id;
    c.runsc
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
    c.audit_best_effort(&rec);
    Ok(())
}
