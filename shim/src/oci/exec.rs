//! `exec --process FILE [--detach] [--pid-file P] [--console-socket S] [--tty] ID`: the process
//! goes through `harden_process` like the shim's exec (user, capabilities, no-new-privileges,
//! rlimits, secret environment), is audited with what the policy changed, and runs through
//! `runsc exec`. `--tty` is dropped: runsc 20221219 refuses it, and the process file's
//! `terminal` says the same. With `--detach` the pid file names runsc's process that lives as
//! long as the exec and exits with its status: the engine waits on that one.

use std::io::Read;
use std::path::{Path, PathBuf};

use policy_injector::{harden_process, Context};
use serde_json::Value;

use super::error::{OciError, Result};
use super::guard::container_stdio;
use super::{not_running, Opened};
use crate::audit::{AuditEvent, AuditRecord};
use crate::bundle::write_file_atomic;
use crate::runsc::client::{read_pid_file, ExecOpts};
use crate::runsc::error::RunscError;

/// An exec's process spec beyond this size is refused before parsing (as in the shim).
const MAX_PROCESS_BYTES: u64 = 1 << 20;

pub struct ExecArgs<'a> {
    pub process: &'a Path,
    pub detach: bool,
    pub pid_file: Option<&'a Path>,
    pub console_socket: Option<&'a Path>,
    pub preserve_fds: u32,
}

fn read_process(path: &Path) -> Result<Value> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PROCESS_BYTES + 1).read_to_end(&mut bytes))
        .map_err(OciError::io("reading the process file", path))?;
    if bytes.len() as u64 > MAX_PROCESS_BYTES {
        return Err(OciError::Invalid {
            what: "exec",
            reason: format!("{} is larger than 1 MiB", path.display()),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| OciError::Invalid {
        what: "exec",
        reason: format!("{} is not valid JSON: {e}", path.display()),
    })
}

/// Runs the exec; the exit code is the process's when not detached.
pub async fn run(c: &Opened, a: ExecArgs<'_>) -> Result<u8> {
    if a.preserve_fds > 0 {
        return Err(OciError::PreserveFds(a.preserve_fds));
    }
    let id = &c.record.id;
    let process = read_process(a.process)?;
    // The engine names the exec only through its pid file (`<exec id>.pid` for Docker).
    let exec_id = a
        .pid_file
        .and_then(Path::file_stem)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "exec".to_string());
    let ctx = Context {
        container_id: id.clone(),
        namespace: c.record.namespace.clone(),
        ..Default::default()
    };
    let hardened = match harden_process(&process, &c.policy, &ctx) {
        Ok(h) => h,
        Err(e) => {
            let mut rec = AuditRecord::new(AuditEvent::ExecRejected, &c.record.subject);
            rec.exec_id = Some(&exec_id);
            rec.error = Some(e.to_string());
            c.audit_best_effort(&rec);
            return Err(e.into());
        }
    };
    let mut rec = AuditRecord::new(AuditEvent::Exec, &c.record.subject);
    rec.exec_id = Some(&exec_id);
    rec.decisions = Some(&hardened.decisions);
    c.audit().append(&rec)?;

    let unique = format!("exec-{}-{}", std::process::id(), exec_id);
    let process_file = c.state.path().join(format!("{unique}.json"));
    let bytes = serde_json::to_vec(&hardened.process).expect("a JSON value serialises");
    write_file_atomic(&process_file, &bytes).map_err(OciError::io("writing", &process_file))?;
    let pid_file = a
        .pid_file
        .map(Path::to_path_buf)
        .unwrap_or_else(|| c.state.path().join(format!("{unique}.pid")));
    let opts = ExecOpts {
        process_json: process_file.clone(),
        pid_file: pid_file.clone(),
        internal_pid_file: None,
        detach: a.detach,
        console_socket: a.console_socket.map(Path::to_path_buf),
    };
    let ran = match container_stdio() {
        Ok(io) => c.runsc.exec(id, &opts, io).await,
        Err(e) => {
            let _ = std::fs::remove_file(&process_file);
            return Err(e);
        }
    };
    let _ = std::fs::remove_file(&process_file);
    let code = match ran {
        Ok(()) => 0,
        // Not detached, runsc exec lasts as long as the process and exits with its status.
        Err(RunscError::Failed { status, .. }) if !a.detach => {
            status.containerd_code().min(255) as u8
        }
        Err(e) => return Err(not_running(e, id)),
    };
    if a.detach {
        let mut rec = AuditRecord::new(AuditEvent::ExecStart, &c.record.subject);
        rec.exec_id = Some(&exec_id);
        rec.pid = read_pid_file(&pid_file).ok().map(|p| p as u32);
        c.audit_best_effort(&rec);
    }
    if a.pid_file.is_none() {
        let _ = std::fs::remove_file(PathBuf::from(&pid_file));
    }
    Ok(code)
}
