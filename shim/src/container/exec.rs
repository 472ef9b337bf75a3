//! Exec: a second process in a running sandbox, hardened by the same policy as the init.
//!
//! The process spec containerd sends (`ctr task exec --user 0`, `kubectl exec`) goes through
//! `harden_process` like the init's did: user, capabilities, no-new-privileges, rlimits and
//! secret environment are enforced before runsc ever sees it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use containerd_shim_protos::api::{DeleteResponse, ExecProcessRequest};
use policy_injector::{harden_process, Context};
use serde_json::Value;

use super::runtime::ExecCall;
use super::{validate_id, Container};
use crate::audit::AuditEvent;
use crate::error::{Result, ShimError};
use crate::process::state::{Exit, ExitCause, State, StateError};
use crate::process::Process;
use crate::stdio::{self, ConsoleSocket, RunscStdio, StdioPaths};

const MAX_PROCESS_BYTES: usize = 1 << 20;
const CONSOLE_TIMEOUT: Duration = Duration::from_secs(10);

fn exec_file(exec_id: &str, suffix: &str) -> String {
    format!("exec-{exec_id}.{suffix}")
}

impl Container {
    pub async fn add_exec(&self, req: &ExecProcessRequest) -> Result<()> {
        validate_id("exec id", &req.exec_id)?;
        if !self.init.state().is_alive() {
            return Err(StateError::Invalid {
                op: "exec",
                current: self.init.state().name(),
            }
            .into());
        }
        let raw = req
            .spec
            .as_ref()
            .map(|a| a.value.as_slice())
            .ok_or_else(|| ShimError::InvalidArgument("exec without a process spec".into()))?;
        if raw.len() > MAX_PROCESS_BYTES {
            return Err(ShimError::InvalidArgument(
                "exec process spec is larger than 1 MiB".into(),
            ));
        }
        let mut process: Value = serde_json::from_slice(raw).map_err(|e| {
            ShimError::InvalidArgument(format!("exec process spec is not valid JSON: {e}"))
        })?;
        if let Some(obj) = process.as_object_mut() {
            // The request, not the spec, says whether containerd set up a terminal.
            obj.insert("terminal".into(), Value::Bool(req.terminal));
        }
        let ctx = Context {
            container_id: self.id.clone(),
            namespace: self.env.namespace.clone(),
            ..Default::default()
        };
        let hardened = match harden_process(&process, &self.policy.policy, &ctx) {
            Ok(h) => h,
            Err(e) => {
                let mut rec = self.record(AuditEvent::ExecRejected);
                rec.exec_id = Some(&req.exec_id);
                rec.error = Some(e.to_string());
                self.audit.append(&rec)?;
                return Err(ShimError::Rejected(e));
            }
        };
        let mut execs = self.execs.lock().await;
        if execs.contains_key(&req.exec_id) {
            return Err(ShimError::AlreadyExists(format!("exec {}", req.exec_id)));
        }
        // Audited when it is added, with what the policy changed; an exec that is never started
        // still shows up.
        let mut rec = self.record(AuditEvent::Exec);
        rec.exec_id = Some(&req.exec_id);
        rec.decisions = Some(&hardened.decisions);
        self.audit.append(&rec)?;
        let stdio = StdioPaths {
            stdin: req.stdin.clone(),
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
            terminal: req.terminal,
        };
        execs.insert(
            req.exec_id.clone(),
            Arc::new(Process::new(&req.exec_id, stdio, Some(hardened.process))),
        );
        drop(execs);
        self.events().exec_added(&self.id, &req.exec_id).await;
        Ok(())
    }

    pub async fn start_exec(self: &Arc<Self>, exec_id: &str) -> Result<u32> {
        let p = self.process(exec_id).await?;
        if p.state() != State::Pending {
            return Err(StateError::Invalid {
                op: "start",
                current: p.state().name(),
            }
            .into());
        }
        let spec = p.spec.as_ref().expect("execs carry their process spec");
        let process_file = self.bundle.join(exec_file(exec_id, "json"));
        let pid_file = self.bundle.join(exec_file(exec_id, "pid"));
        let internal_pid_file = self.bundle.join(exec_file(exec_id, "gpid"));
        stdio::write_file_atomic(&process_file, &serde_json::to_vec(spec).expect("json"))
            .map_err(|e| ShimError::Internal(format!("writing {}: {e}", process_file.display())))?;
        let console = if p.stdio.terminal {
            Some(ConsoleSocket::new()?)
        } else {
            None
        };
        let stdio = if p.stdio.terminal {
            RunscStdio::default()
        } else {
            p.io.open_pipes(&p.stdio)?
        };
        let exec = self
            .runtime
            .exec(ExecCall {
                id: &self.id,
                process_file: &process_file,
                pid_file: &pid_file,
                internal_pid_file: &internal_pid_file,
                console_socket: console.as_ref().map(|c| c.path()),
                stdio,
            })
            .await;
        let _ = std::fs::remove_file(&process_file);
        if let Err(e) = exec {
            p.io.close();
            return Err(ShimError::Runsc(format!(
                "runsc exec {} in {}: {e}",
                exec_id, self.id
            )));
        }
        if let Some(console) = console {
            let master = tokio::task::spawn_blocking(move || console.receive(CONSOLE_TIMEOUT))
                .await
                .map_err(|e| ShimError::Internal(e.to_string()))??;
            p.io.attach_console(master, &p.stdio)?;
        }
        let pid = crate::runsc::client::read_pid_file(&pid_file)
            .map_err(|e| ShimError::Runsc(format!("reading exec pid file: {e}")))?;
        if let Ok(guest) = crate::runsc::client::read_pid_file(&internal_pid_file) {
            p.set_guest_pid(guest);
        }
        let exit = self
            .env
            .reaper
            .watch(pid)
            .map_err(|e| ShimError::Internal(format!("watching exec pid {pid}: {e}")))?;
        p.transition(|s| s.started_exec(pid as u32))?;
        let me = self.clone();
        let proc_ = p.clone();
        tokio::spawn(async move {
            let status = exit.await;
            let waiter = proc_.clone();
            let _ = tokio::task::spawn_blocking(move || waiter.io.wait_output()).await;
            let exit = Exit {
                status: status.containerd_code(),
                at: SystemTime::now(),
                cause: ExitCause::Normal,
            };
            if proc_.record_exit(exit) {
                me.events()
                    .exit(&me.id, &proc_.exec_id, pid as u32, exit.status, exit.at)
                    .await;
            }
        });
        self.events()
            .exec_started(&self.id, exec_id, pid as u32)
            .await;
        Ok(pid as u32)
    }

    pub async fn delete_exec(&self, exec_id: &str) -> Result<DeleteResponse> {
        let p = self.process(exec_id).await?;
        let exit = p.transition(|s| s.delete())?;
        p.io.close();
        self.execs.lock().await.remove(exec_id);
        for suffix in ["pid", "gpid", "json"] {
            let _ = std::fs::remove_file(self.bundle.join(exec_file(exec_id, suffix)));
        }
        let mut resp = DeleteResponse::new();
        resp.pid = p.pid();
        if let Some(exit) = exit {
            resp.exit_status = exit.status;
            resp.exited_at = Some(crate::events::timestamp(exit.at)).into();
        }
        Ok(resp)
    }
}
