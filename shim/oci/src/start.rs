//! `start`: the core's start sequence (`gvisor_hardened_core::sandbox::start`, the shim's
//! too) under the start lock: the writable volumes' start manifest (`[audit.artifacts]`),
//! `runsc start`, then the guard is told, which arms the lifetime, starts the egress and
//! leaves the sandbox's cgroups; the `start` record last.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use async_trait::async_trait;

use super::error::{OciError, Result};
use super::guard::STARTED;
use crate::opened::{not_running, Opened};
use gvisor_hardened_core::artifacts::StartRecord;
use gvisor_hardened_core::audit::AuditRecord;
use gvisor_hardened_core::sandbox::start::{self, StartPlan, StartSteps};

pub async fn run(c: &Opened) -> Result<()> {
    // Until our record is written: the guard writes the exit record after it.
    let _start = c.state.lock_start()?;
    let plan = StartPlan {
        id: &c.record.id,
        subject: &c.record.subject,
        mounts: c.record.writable_binds.clone(),
        policy: c.policy.audit.artifacts.clone(),
        audit_log: c.record.audit_path.clone(),
    };
    start::start(&Start(c), plan).await?;
    Ok(())
}

/// runsc-hardened's steps of the core's start sequence.
struct Start<'a>(&'a Opened);

#[async_trait]
impl StartSteps for Start<'_> {
    type Error = OciError;

    /// In the state directory, where the guard's exit sequence reads it.
    fn keep_manifest(&self, start: &StartRecord) -> Result<()> {
        self.0.state.set_artifacts_start(start)
    }

    async fn run(&self) -> Result<Option<u32>> {
        let id = &self.0.record.id;
        self.0
            .runtime
            .start(id, None)
            .await
            .map_err(|e| not_running(e, id))?;
        Ok(self.0.state.sandbox_pid().map(|p| p as u32))
    }

    /// The guard is told. Non-blocking: a guard that is gone (killed) must not hang the start.
    async fn running(&self, _pid: Option<u32>) {
        let told = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(self.0.state.notify_fifo())
            .and_then(|mut f| f.write_all(format!("{STARTED}\n").as_bytes()));
        if let Err(e) = told {
            self.0.record.log.warn(&format!(
                "container {}: the guard did not take the start ({e}): no lifetime limit is enforced",
                self.0.record.id
            ));
        }
    }

    async fn append(&self, record: &AuditRecord<'_>) {
        self.0.audit_best_effort(record);
    }
}
