//! The fake as runsc: the factory and the runtime of every container.

use std::path::Path;
use std::sync::Arc;

use policy_injector::{Policy, RunscFlags};
use serde_json::Value;
use tokio::sync::watch;

use super::{failure, gone, joins, missing, Fake, FakeContainer, FakeExec, Step};
use crate::reaper::{ExitStatus, ReaperError};
use crate::runsc::error::RunscError;
use crate::runtime::RunscStdio;
use crate::runtime::{
    CreateCall, ExecCall, ExecStarted, ExitWatch, KillTarget, RunscConfigError, RuntimeFactory,
    SandboxRuntime,
};

/// What runsc does with `--console-socket`: makes a terminal and sends its master over the
/// socket. The slave end is dropped (nothing inside writes to it).
fn send_terminal(socket: &Path) {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::os::fd::AsRawFd;
    let pty = nix::pty::openpty(None, None).expect("openpty");
    let stream = std::os::unix::net::UnixStream::connect(socket).expect("console socket");
    let fds = [pty.master.as_raw_fd()];
    let iov = [std::io::IoSlice::new(b"pty")];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .expect("sending the terminal");
}

#[async_trait::async_trait]
impl RuntimeFactory for Fake {
    async fn runtime(
        &self,
        policy: &Policy,
        _flags: &RunscFlags,
        _namespace: &str,
        _bundle: &Path,
    ) -> Result<Arc<dyn SandboxRuntime>, RunscConfigError> {
        self.call("configure".into());
        if self.world().fails(Step::Configure) {
            return Err(RunscConfigError::Detect {
                binary: policy.runsc.path.clone(),
                source: RunscError::from_failure(
                    "flags",
                    None,
                    ExitStatus::Exited(128),
                    "injected failure",
                ),
            });
        }
        Ok(Arc::new(self.clone()))
    }
}

#[async_trait::async_trait]
impl SandboxRuntime for Fake {
    fn global_args(&self) -> Vec<String> {
        vec!["--network=none".into(), "--oci-seccomp".into()]
    }

    async fn create(&self, call: CreateCall<'_>) -> Result<u32, RunscError> {
        let stdio = call.stdio;
        self.call(format!("create {}", call.id));
        if let Some(socket) = call.console_socket {
            send_terminal(socket);
        }
        let sandbox = joins(call.bundle, call.id);
        let mut w = self.world();
        if w.fails(Step::Create) {
            return Err(failure("create", call.id));
        }
        if w.containers.contains_key(call.id) {
            return Err(RunscError::from_failure(
                "create",
                Some(call.id),
                ExitStatus::Exited(128),
                "container already exists",
            ));
        }
        let (pid, sandbox) = match sandbox {
            Some(sb) => match w.containers.get(&sb) {
                Some(c) if w.alive(c.pid) => (c.pid, sb),
                _ => return Err(failure("create", call.id)),
            },
            None => {
                let pid = w.spawn();
                w.cgroups.insert(call.id.to_string());
                w.stdio.insert(pid, stdio);
                (pid, call.id.to_string())
            }
        };
        w.containers.insert(
            call.id.to_string(),
            FakeContainer {
                pid,
                sandbox,
                started: false,
                member_exit: watch::channel(None).0,
            },
        );
        Ok(pid)
    }

    fn watch(&self, pid: u32) -> Result<ExitWatch, ReaperError> {
        let mut w = self.world();
        if w.fails(Step::Watch) {
            return Err(ReaperError::NotAChild(pid as i32));
        }
        let mut rx = w
            .processes
            .get(&pid)
            .ok_or(ReaperError::NotAChild(pid as i32))?
            .exit
            .subscribe();
        Ok(Box::pin(async move {
            loop {
                if let Some(status) = *rx.borrow_and_update() {
                    return status;
                }
                // The sender lives in the world as long as the fake does.
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }))
    }

    async fn start(&self, id: &str, stdio: Option<RunscStdio>) -> Result<(), RunscError> {
        drop(stdio);
        self.call(format!("start {id}"));
        let mut w = self.world();
        if w.fails(Step::Start) {
            return Err(failure("start", id));
        }
        if !w.container_alive(id) {
            return Err(missing("start", id));
        }
        if let Some(c) = w.containers.get_mut(id) {
            c.started = true;
        }
        if let Some(status) = w.exit_on_start {
            w.end_container(id, status);
        }
        Ok(())
    }

    async fn exec(&self, call: ExecCall<'_>) -> Result<ExecStarted, RunscError> {
        let stdio = call.stdio;
        self.call(format!("exec {} {}", call.id, call.exec_id));
        if let Some(socket) = call.console_socket {
            send_terminal(socket);
        }
        let mut w = self.world();
        if w.fails(Step::Exec) {
            return Err(failure("exec", call.id));
        }
        if !w.container_alive(call.id) {
            return Err(failure("exec", call.id));
        }
        let pid = w.spawn();
        w.stdio.insert(pid, stdio);
        let guest_pid = 100 + w.execs.len() as i32;
        w.execs.push(FakeExec {
            container: call.id.to_string(),
            exec_id: call.exec_id.to_string(),
            pid,
            guest_pid,
        });
        Ok(ExecStarted { pid, guest_pid })
    }

    async fn kill(&self, id: &str, signal: u32, target: KillTarget) -> Result<(), RunscError> {
        let what = match target {
            KillTarget::Init => "init".to_string(),
            KillTarget::All => "all".to_string(),
            KillTarget::Guest(p) => format!("pid {p}"),
        };
        self.call(format!("kill {id} {signal} {what}"));
        let mut w = self.world();
        if w.fails(Step::Kill) {
            return Err(failure("kill", id));
        }
        if !w.containers.contains_key(id) {
            return Err(missing("kill", id));
        }
        let status = ExitStatus::Signaled {
            signal: signal as i32,
            core_dumped: false,
        };
        match target {
            KillTarget::Guest(guest) => {
                let pid = w
                    .execs
                    .iter()
                    .find(|e| e.container == id && e.guest_pid == guest)
                    .map(|e| e.pid);
                match pid {
                    Some(pid) if w.alive(pid) => w.end(pid, status),
                    _ => return Err(gone("kill", id)),
                }
            }
            KillTarget::Init | KillTarget::All => {
                if !w.container_alive(id) {
                    return Err(gone("kill", id));
                }
                if !(signal == libc::SIGTERM as u32 && w.sigterm_ignored) {
                    w.end_container(id, status);
                }
            }
        }
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), RunscError> {
        self.call(format!("delete {id}"));
        let mut w = self.world();
        if w.fails(Step::Delete) {
            return Err(failure("delete", id));
        }
        let Some(c) = w.containers.get(id) else {
            return Err(missing("delete", id));
        };
        if c.sandbox == id {
            w.end_sandbox(id, ExitStatus::killed());
            w.cgroups.remove(id);
        } else {
            w.end_container(id, ExitStatus::killed());
        }
        w.containers.remove(id);
        Ok(())
    }

    async fn pause(&self, id: &str) -> Result<(), RunscError> {
        self.call(format!("pause {id}"));
        if self.world().fails(Step::Pause) {
            return Err(failure("pause", id));
        }
        Ok(())
    }

    async fn resume(&self, id: &str) -> Result<(), RunscError> {
        self.call(format!("resume {id}"));
        Ok(())
    }

    async fn wait(&self, id: &str) -> Result<ExitStatus, RunscError> {
        self.call(format!("wait {id}"));
        let mut rx = match self.world().containers.get(id) {
            Some(c) => c.member_exit.subscribe(),
            None => return Err(missing("wait", id)),
        };
        loop {
            if let Some(result) = *rx.borrow_and_update() {
                return result.map_err(|()| failure("wait", id));
            }
            if rx.changed().await.is_err() {
                // Deleted from runsc's state while waited for.
                return Err(missing("wait", id));
            }
        }
    }

    async fn stats(&self, id: &str) -> Result<Value, RunscError> {
        self.call(format!("stats {id}"));
        Ok(serde_json::json!({}))
    }

    async fn update(&self, id: &str, _resources: &[u8]) -> Result<bool, RunscError> {
        self.call(format!("update {id}"));
        if self.world().fails(Step::Update) {
            return Err(failure("update", id));
        }
        // Like runsc 20221219: no `update`, the shim writes the cgroups.
        Ok(false)
    }

    fn egress_confinement(
        &self,
        _sandbox_pid: Option<i32>,
    ) -> Result<Option<crate::egress::confined::Confinement>, String> {
        if self.world().fails(Step::Confine) {
            return Err("injected failure: the sandbox's cgroups".into());
        }
        // Served in this process: the fake's forwarders have no pipes to hand over.
        Ok(None)
    }

    fn forwarder(
        &self,
        id: &str,
        _state_dir: &Path,
        process: Value,
    ) -> Arc<dyn crate::egress::ForwarderSpawner> {
        Arc::new(FakeForwarder {
            fake: self.clone(),
            id: id.to_string(),
            listen: process["args"][2].as_str().unwrap_or_default().to_string(),
        })
    }
}

/// A forwarder that says HELLO and then serves nothing until its stdin closes, as the real one
/// does when the shim stops it. Counted alive in the fake's world while it runs.
struct FakeForwarder {
    fake: Fake,
    id: String,
    listen: String,
}

#[async_trait::async_trait]
impl crate::egress::ForwarderSpawner for FakeForwarder {
    async fn spawn(&self) -> std::io::Result<crate::egress::supervisor::ForwarderIo> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        self.fake
            .call(format!("forwarder {} {}", self.id, self.listen));
        let (host, inside) = tokio::io::duplex(64 * 1024);
        let (host_r, host_w) = tokio::io::split(host);
        let (mut in_r, mut in_w) = tokio::io::split(inside);
        let (exited_tx, exited) = tokio::sync::oneshot::channel::<String>();
        let hello = gvisor_hardened_forwarder::Frame::Hello {
            version: gvisor_hardened_forwarder::VERSION,
            listen: self.listen.clone(),
        }
        .to_bytes();
        let fake = self.fake.clone();
        fake.world().forwarders += 1;
        tokio::spawn(async move {
            let _ = in_w.write_all(&hello).await;
            let mut sink = Vec::new();
            let _ = in_r.read_to_end(&mut sink).await;
            fake.world().forwarders -= 1;
            let _ = exited_tx.send("exited 0".into());
        });
        Ok(crate::egress::supervisor::ForwarderIo {
            pipes: crate::egress::supervisor::ForwarderPipes::Streams {
                stdin: Box::new(host_w),
                stdout: Box::new(host_r),
            },
            exited: Box::pin(async move { exited.await.unwrap_or_else(|_| "gone".into()) }),
            kill: Box::new(|| Box::pin(async {})),
        })
    }
}
