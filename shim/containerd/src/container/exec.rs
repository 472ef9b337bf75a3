//! Exec: a second process in a running sandbox, hardened by the same policy as the init.
//!
//! The process spec containerd sends (`ctr task exec --user 0`, `kubectl exec`) goes through
//! `harden_process` like the init's did: user, capabilities, no-new-privileges, rlimits and
//! secret environment are enforced before runsc ever sees it. Each exec is audited when it is
//! added (what the policy changed), when it starts, and when it exits.

use std::sync::Arc;
use std::time::SystemTime;

use containerd_shim_protos::api::{DeleteResponse, ExecProcessRequest};
use serde_json::Value;

use super::{validate_id, Container};
use crate::error::{Result, ShimError};
use crate::process::state::Op;
use crate::process::Process;
use crate::stdio::{self, StdioPaths};
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::bundle::MAX_PROCESS_BYTES;
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::runtime::{ExecCall, KillTarget};
use gvisor_hardened_core::sandbox::exec_gate::{admit, ExecGateError, ExecRequest};

/// runc's status for an exec that could not be started; containerd shows it the same way.
const EXEC_FAILED: u32 = 255;

/// The gate's answer as the task API's: a refusal names the rule (a refusal whose record could
/// not be written is still a refusal, and the failure is logged); an admitted exec that could
/// not be recorded is an audit error.
fn exec_gate_error(id: &str, e: ExecGateError) -> ShimError {
    match e {
        ExecGateError::Refused { error, unrecorded } => {
            if let Some(audit) = unrecorded {
                log::error!("container {id}: the exec-rejected record was not written: {audit}");
            }
            ShimError::Rejected(error)
        }
        ExecGateError::Unrecorded(audit) => ShimError::Audit(audit),
    }
}

impl Container {
    pub async fn add_exec(&self, req: &ExecProcessRequest) -> Result<()> {
        validate_id("exec id", &req.exec_id)?;
        self.init
            .check(Op::AddExec)
            .map_err(|e| self.state_error(&self.init, e))?;
        let raw = req
            .spec
            .as_ref()
            .map(|a| a.value.as_slice())
            .ok_or_else(|| ShimError::InvalidArgument("exec without a process spec".into()))?;
        if raw.len() as u64 > MAX_PROCESS_BYTES {
            return Err(ShimError::InvalidArgument(format!(
                "exec process spec is larger than {} MiB",
                MAX_PROCESS_BYTES >> 20
            )));
        }
        let mut process: Value = serde_json::from_slice(raw).map_err(|e| {
            ShimError::InvalidArgument(format!("exec process spec is not valid JSON: {e}"))
        })?;
        if let Some(obj) = process.as_object_mut() {
            // The request, not the spec, says whether containerd set up a terminal.
            obj.insert("terminal".into(), Value::Bool(req.terminal));
        }
        let request = ExecRequest {
            exec_id: &req.exec_id,
            process: &process,
            subject: &self.subject,
            namespace: &self.env.namespace,
            container_id: &self.id,
        };
        // Held until the exec is in the table: a second exec with the same id waits, then is
        // refused before it gets a record of its own.
        let mut execs = self.execs.lock().await;
        if execs.contains_key(&req.exec_id) {
            return Err(ShimError::AlreadyExists(format!(
                "exec {} of container {}",
                req.exec_id, self.id
            )));
        }
        // Audited when it is added, with what the policy changed: an exec that is never
        // started still shows up.
        let hardened = admit(&self.audit, &self.policy.policy, request)
            .await
            .map_err(|e| exec_gate_error(&self.id, e))?;
        let stdio = StdioPaths {
            stdin: req.stdin.clone(),
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
            terminal: req.terminal,
        };
        let process = Process::exec(&req.exec_id, stdio, hardened);
        process.io.bound_by(self.evidence.output.as_ref());
        execs.insert(req.exec_id.clone(), Arc::new(process));
        drop(execs);
        self.events().exec_added(&self.id, &req.exec_id).await;
        Ok(())
    }

    pub async fn start_exec(self: &Arc<Self>, exec_id: &str) -> Result<u32> {
        let p = self.process(exec_id).await?;
        p.check(Op::StartExec)
            .map_err(|e| self.state_error(&p, e))?;
        match self.spawn_exec(&p).await {
            Ok(pid) => Ok(pid),
            Err(e) => {
                // Nothing runs; a Wait already pending must not hang.
                p.io.close();
                let exit = Exit {
                    status: EXEC_FAILED,
                    at: SystemTime::now(),
                    cause: ExitCause::Exited,
                };
                if p.record_exit(exit) {
                    p.announce_exit(exit);
                }
                Err(e)
            }
        }
    }

    async fn spawn_exec(self: &Arc<Self>, p: &Arc<Process>) -> Result<u32> {
        let hardened = p
            .hardened
            .as_ref()
            .ok_or_else(|| ShimError::Internal(format!("{} has no process", self.name_of(p))))?;
        let (console, streams) = stdio::for_runsc(&p.io, &p.stdio, &self.env.console_dir, true)?;
        let started = self
            .runtime
            .exec(ExecCall {
                id: self.runsc_id(),
                exec_id: &p.exec_id,
                bundle: &self.bundle,
                process: &hardened.process,
                console_socket: console.as_ref().map(|c| c.path()),
                stdio: streams,
            })
            .await?;
        let watched = async {
            stdio::take_console(console, &p.io, &p.stdio).await?;
            self.runtime
                .watch(started.pid)
                .map_err(|source| ShimError::Reaper {
                    what: self.name_of(p),
                    source,
                })
        }
        .await;
        let exit = match watched {
            Ok(exit) => exit,
            Err(e) => {
                // It runs, unsupervised: stop it rather than leave it.
                let _ = self
                    .runtime
                    .kill(
                        &self.id,
                        libc::SIGKILL as u32,
                        KillTarget::Guest(started.guest_pid),
                    )
                    .await;
                return Err(e);
            }
        };
        p.set_pid(started.pid);
        p.set_guest_pid(started.guest_pid);
        p.apply(Op::StartExec).map_err(|e| self.state_error(p, e))?;
        let (me, proc_) = (self.clone(), p.clone());
        tokio::spawn(async move {
            let status = exit.await;
            me.on_exit(&proc_, status).await;
        });
        self.events()
            .exec_started(&self.id, &p.exec_id, started.pid)
            .await;
        let mut rec = self.record(AuditEvent::ExecStart);
        rec.exec_id = Some(&p.exec_id);
        rec.pid = Some(started.pid);
        rec.decisions = Some(&hardened.decisions);
        self.audit_best_effort(&rec).await;
        Ok(started.pid)
    }

    pub async fn delete_exec(&self, exec_id: &str) -> Result<DeleteResponse> {
        let p = self.process(exec_id).await?;
        p.check(Op::Delete).map_err(|e| self.state_error(&p, e))?;
        // Its exit is published and audited before Delete answers.
        if p.state().exit().is_some() {
            p.wait().await;
        }
        let state = p.apply(Op::Delete).map_err(|e| self.state_error(&p, e))?;
        p.io.close();
        self.execs.lock().await.remove(exec_id);
        let mut resp = DeleteResponse::new();
        resp.pid = p.pid();
        match state.exit() {
            Some(exit) => {
                resp.exit_status = exit.status;
                resp.exited_at = Some(crate::events::timestamp(exit.at)).into();
            }
            // Deleted before it ever started: release a Wait that may be pending.
            None => p.announce_exit(Exit::killed(SystemTime::now())),
        }
        Ok(resp)
    }
}
