//! `exec --process FILE [--detach] [--pid-file P] [--console-socket S] [--tty] ID`: the process
//! goes through `harden_process` like the shim's exec (user, capabilities, no-new-privileges,
//! rlimits, secret environment), is audited with what the policy changed, and runs through
//! `runsc exec`. `--tty` is dropped: runsc 20221219 refuses it, and the process file's
//! `terminal` says the same.
//!
//! With `--detach` (both engines) the pid the engine waits on is an exec guard's, forked at the
//! start of the call (`fork.rs`, `exec_guard.rs`). Without `--detach` this call lasts as long
//! as the process and audits its exit.

use std::path::Path;

use super::error::{OciError, Result};
use super::exec_guard::{exec_id_of, read_process, ExecGuard};
use super::fork::Forked;
use super::guard::{container_stdio, EngineStdio, Forwarded};
use super::state::write_pid_file;
use crate::opened::Opened;
use gvisor_hardened_core::atomic_file;
use gvisor_hardened_core::sandbox::exec_gate::{admit, ExecGateError, ExecRequest};

pub struct ExecArgs<'a> {
    pub process: &'a Path,
    pub detach: bool,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub preserve_fds: u32,
}

/// Runs the exec; the exit code is the process's when not detached. `guard`: the exec guard
/// forked for a detached exec.
pub async fn run(c: Opened, a: ExecArgs<'_>, guard: Option<Forked>) -> Result<u8> {
    if a.preserve_fds > 0 {
        return Err(OciError::PreserveFds(a.preserve_fds));
    }
    let id = &c.record.id;
    let process = read_process(a.process)?;
    let exec_id = exec_id_of(a.pid_file);
    let request = ExecRequest {
        exec_id: &exec_id,
        process: &process,
        subject: &c.record.subject,
        namespace: &c.record.namespace,
        container_id: id,
    };
    let hardened = match admit(&c.audit(), &c.policy, request).await {
        Ok(h) => h,
        Err(ExecGateError::Refused { error, unrecorded }) => {
            if let Some(audit) = unrecorded {
                c.record.log.warn(&format!(
                    "container {id}: the exec-rejected record was not written: {audit}"
                ));
            }
            return Err(error.into());
        }
        Err(ExecGateError::Unrecorded(audit)) => return Err(audit.into()),
    };

    if !a.detach {
        // This call is the exec's guard: it lasts as long as the process, passes the signals
        // it gets to it and exits with its status, through the same operations as a detached
        // exec's guard (the runtime's exec, the output copy, `exec-start` and `exec-exit`).
        let guard = ExecGuard::launch(
            c,
            &exec_id,
            &hardened.process,
            a.console_socket,
            &CallerStdio,
        )
        .await?;
        if let Some(pid_file) = a.pid_file {
            write_pid_file(pid_file, guard.started.pid as i32)?;
        }
        return Ok(guard.watch(Forwarded::new()).await);
    }
    let unique = format!("exec-{}-{}", std::process::id(), exec_id);
    let process_file = c.state.path().join(format!("{unique}.json"));
    let bytes = serde_json::to_vec(&hardened.process).expect("a JSON value serialises");
    atomic_file::write(&process_file, &bytes, atomic_file::Options::PRIVATE)
        .map_err(OciError::io("writing", &process_file))?;
    let mut guard = guard.ok_or_else(|| OciError::Guard("no exec guard was forked".into()))?;
    let guard_pid = guard.pid();
    let answer = guard.go(&process_file.display().to_string(), c.state.path());
    let _ = std::fs::remove_file(&process_file);
    // The guard wrote `exec-start` (before the exec could end and it wrote `exec-exit`).
    answer?;
    if let Some(pid_file) = a.pid_file {
        write_pid_file(pid_file, guard_pid)?;
    }
    Ok(0)
}

/// The caller's own streams, kept: a non-detached exec's caller reads them to their end, which
/// comes when the process's end and this call's exit close them.
struct CallerStdio;

impl EngineStdio for CallerStdio {
    fn stdio(&self) -> Result<gvisor_hardened_core::runsc::client::ProcessIo> {
        container_stdio()
    }

    fn let_go_of_stdio(&self) {}
}
