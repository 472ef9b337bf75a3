//! A [`ForwarderSpawner`] that runs the forwarder with `runsc exec`, attached (runsc 20221219's
//! `--detach` mangles arguments), stdin/stdout as pipes, under the process from
//! [`policy_injector::EgressPlan::forwarder_process`]. Measured facts it is built on:
//! `runsc exec` fails on a container that is created but not started; killing the host
//! `runsc exec` process leaves the process inside running, so `kill` uses `runsc kill --pid`
//! with the in-sandbox pid from `--internal-pid-file`.

use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::process::Stdio;

use async_trait::async_trait;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::supervisor::{ForwarderIo, ForwarderSpawner};

/// How to reach runsc and which container to exec in.
#[derive(Debug, Clone)]
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
}

#[async_trait]
impl ForwarderSpawner for RunscExec {
    async fn spawn(&self) -> io::Result<ForwarderIo> {
        let process_json = self.state_dir.join("forwarder-process.json");
        let pid_file = self.state_dir.join("forwarder.pid");
        let _ = std::fs::remove_file(&pid_file);
        std::fs::write(&process_json, serde_json::to_vec(&self.process)?)?;
        let mut child = Command::new(&self.runsc)
            .args(&self.global_args)
            .arg("exec")
            .arg("--process")
            .arg(&process_json)
            .arg("--internal-pid-file")
            .arg(&pid_file)
            .arg(&self.container_id)
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
        let (runsc, global, id) = (
            self.runsc.clone(),
            self.global_args.clone(),
            self.container_id.clone(),
        );
        let kill = Box::new(move || {
            let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            else {
                return;
            };
            // Best effort: the forwarder may already be gone, and so may the sandbox.
            let _ = std::process::Command::new(&runsc)
                .args(&global)
                .args(["kill", "--pid", &pid.to_string(), &id, "KILL"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        });
        Ok(ForwarderIo {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            exited,
            kill,
        })
    }
}
