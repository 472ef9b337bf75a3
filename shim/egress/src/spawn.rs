//! A [`ForwarderSpawner`] that runs the forwarder with `runsc exec`, attached (runsc 20221219's
//! `--detach` mangles arguments), stdin/stdout as pipes, under the process from
//! [`policy_injector::EgressPlan::forwarder_process`]. Measured facts it is built on:
//! `runsc exec` fails on a container that is created but not started; killing the host
//! `runsc exec` process leaves the process inside running, so `kill` uses `runsc kill --pid`
//! with the in-sandbox pid from `--internal-pid-file`.
//!
//! Inside the shim every child must be spawned through the [`Reaper`] (it is the only waiter;
//! `tokio::process` there would lose exits to it): set `reaper`. Without one (tests, tools
//! outside the shim) `tokio::process` waits for the child itself.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::supervisor::{ForwarderIo, ForwarderPipes, ForwarderSpawner, Kill};
use gvisor_hardened_proc::reaper::Reaper;

/// How to reach runsc and which container to exec in.
#[derive(Clone)]
pub struct RunscExec {
    /// The runsc binary.
    pub runsc: PathBuf,
    /// Global flags, exactly as for every other runsc call on this sandbox (`--root`,
    /// `--network=none`, `--platform`...): runsc re-reads them on each command.
    pub global_args: Vec<OsString>,
    /// The container to exec in: the pod's sandbox container, or the container itself.
    pub container_id: String,
    /// A private directory (0700) for the process JSON and pid file.
    pub state_dir: PathBuf,
    /// The forwarder's OCI process (`EgressPlan::forwarder_process`).
    pub process: serde_json::Value,
    /// The shim's reaper; `None` outside the shim.
    pub reaper: Option<Arc<Reaper>>,
}

impl RunscExec {
    fn exec_args(
        &self,
        process_json: &std::path::Path,
        pid_file: &std::path::Path,
    ) -> Vec<OsString> {
        let mut args = self.global_args.clone();
        args.extend(["exec".into(), "--process".into()]);
        args.push(process_json.into());
        args.push("--internal-pid-file".into());
        args.push(pid_file.into());
        args.push(self.container_id.clone().into());
        args
    }

    /// `runsc kill --pid PID ID KILL`, best effort: the forwarder and the sandbox may be gone.
    /// Resolves when runsc's process has exited (see [`crate::supervisor::Kill`]).
    fn kill_fn(&self, pid_file: PathBuf) -> Kill {
        let (runsc, global, id, reaper) = (
            self.runsc.clone(),
            self.global_args.clone(),
            self.container_id.clone(),
            self.reaper.clone(),
        );
        Box::new(move || {
            Box::pin(async move {
                let Some(pid) = std::fs::read_to_string(&pid_file)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                else {
                    return;
                };
                let mut cmd = std::process::Command::new(&runsc);
                cmd.args(&global)
                    .args(["kill", "--pid", &pid.to_string(), &id, "KILL"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                match reaper {
                    // The reaper is the only waiter of its children.
                    Some(r) => {
                        if let Ok(spawned) = r.spawn(cmd) {
                            spawned.exit.await;
                        }
                    }
                    None => {
                        let _ = Command::from(cmd).status().await;
                    }
                }
            })
        })
    }

    fn spawn_reaped(
        &self,
        reaper: &Reaper,
        args: Vec<OsString>,
        pid_file: PathBuf,
    ) -> io::Result<ForwarderIo> {
        let mut cmd = std::process::Command::new(&self.runsc);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let sp = reaper.spawn(cmd).map_err(io::Error::other)?;
        let exit = sp.exit;
        Ok(ForwarderIo {
            pipes: ForwarderPipes::Fds {
                stdin: OwnedFd::from(sp.stdin.expect("piped")),
                stdout: OwnedFd::from(sp.stdout.expect("piped")),
            },
            exited: Box::pin(async move { format!("runsc exec {:?}", exit.await) }),
            kill: self.kill_fn(pid_file),
        })
    }
}

#[async_trait]
impl ForwarderSpawner for RunscExec {
    async fn spawn(&self) -> io::Result<ForwarderIo> {
        let process_json = self.state_dir.join("forwarder-process.json");
        let pid_file = self.state_dir.join("forwarder.pid");
        let _ = std::fs::remove_file(&pid_file);
        std::fs::write(&process_json, serde_json::to_vec(&self.process)?)?;
        let args = self.exec_args(&process_json, &pid_file);
        if let Some(reaper) = &self.reaper {
            return self.spawn_reaped(reaper, args, pid_file);
        }
        let mut child = Command::new(&self.runsc)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let exited = Box::pin(async move {
            let status = child.wait().await;
            let mut err = String::new();
            let _ = (&mut stderr).take(4096).read_to_string(&mut err).await;
            let status = match status {
                Ok(s) => s.to_string(),
                Err(e) => format!("wait failed: {e}"),
            };
            let err = err.trim();
            if err.is_empty() {
                format!("runsc exec {status}")
            } else {
                format!("runsc exec {status}: {err}")
            }
        });
        let kill = self.kill_fn(pid_file);
        Ok(ForwarderIo {
            pipes: ForwarderPipes::Fds {
                stdin: stdin.into_owned_fd()?,
                stdout: stdout.into_owned_fd()?,
            },
            exited,
            kill,
        })
    }
}
