//! The real [`SandboxRuntime`]: each call is one runsc command, run through the shim's reaper.
//!
//! Every command of a container gets the same global flags: runsc re-reads its configuration
//! per invocation, and `start` without `--network=none` tries to set up networking that
//! `create` never asked for. runsc's own messages go to a JSON log in the bundle (`--log`), not
//! to its stderr: for create/exec/start its stdio *is* the container's, so an error from runsc
//! would otherwise land in the container's stderr and nowhere the shim can read it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use policy_injector::{NetworkMode, Policy, RunscFlags};

use super::runtime::{CreateCall, ExecCall, KillTarget, RuntimeError, SandboxRuntime};
use crate::reaper::Reaper;
use crate::runsc::command::{
    argv, ExtraFlag, GlobalFlags, HostUds, LogFormat, Network, Overlay, Platform, Subcommand,
};
use crate::service::ShimEnv;
use crate::stdio::RunscStdio;

/// No runsc command the shim issues legitimately takes this long; one that does is stuck.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
const LOG_FILE: &str = "runsc.log.json";

#[derive(Debug, thiserror::Error)]
pub enum RunscConfigError {
    #[error(
        "policy runsc.platform {0:?} is not a platform this shim knows (ptrace, kvm, systrap)"
    )]
    Platform(String),
    #[error("policy runsc overlay {0:?} is not one of none, root:memory, all:memory, root:self")]
    Overlay(String),
    #[error("{0}")]
    Flag(#[from] crate::runsc::command::FlagError),
}

pub struct RunscRuntime {
    binary: String,
    global: GlobalFlags,
    reaper: Reaper,
    log: PathBuf,
}

impl RunscRuntime {
    /// `<policy runsc.root>/<namespace>`: containers of different namespaces never share state.
    pub fn root_for(policy: &Policy, namespace: &str) -> String {
        Path::new(&policy.runsc.root)
            .join(namespace)
            .display()
            .to_string()
    }

    pub fn new(
        policy: &Policy,
        flags: &RunscFlags,
        env: &ShimEnv,
        bundle: &Path,
    ) -> Result<Self, RunscConfigError> {
        let log = bundle.join(LOG_FILE);
        let mut global = GlobalFlags::new(Self::root_for(policy, &env.namespace));
        global.platform = match flags.platform.as_deref() {
            None | Some("") => None,
            Some(p) => {
                Some(Platform::parse(p).ok_or_else(|| RunscConfigError::Platform(p.into()))?)
            }
        };
        global.network = Some(match flags.network {
            NetworkMode::None => Network::None,
            NetworkMode::Sandbox => Network::Sandbox,
            NetworkMode::Host => Network::Host,
        });
        global.oci_seccomp = flags.oci_seccomp;
        global.net_raw = flags.net_raw;
        global.host_uds = Some(match flags.host_uds.as_str() {
            "none" => HostUds::None,
            // The policy core never asks for more; refuse rather than widen silently.
            other => {
                return Err(RunscConfigError::Flag(
                    crate::runsc::command::FlagError::BadValue {
                        name: "host-uds".into(),
                        value: other.into(),
                    },
                ))
            }
        });
        global.overlay = match flags.overlay.as_deref() {
            None => None,
            Some("none") => Some(Overlay::Off),
            Some("root:memory") => Some(Overlay::RootMemory),
            Some("all:memory") => Some(Overlay::AllMemory),
            Some("root:self") => Some(Overlay::RootSelf),
            Some(other) => return Err(RunscConfigError::Overlay(other.into())),
        };
        global.log = Some(log.clone());
        global.log_format = Some(LogFormat::Json);
        if policy.runsc.debug {
            global.debug = true;
            let dir =
                Path::new(&policy.runsc.debug_log_dir).join(bundle.file_name().unwrap_or_default());
            // A trailing slash makes runsc create one file per command inside the directory.
            global.debug_log = Some(PathBuf::from(format!("{}/", dir.display())));
        }
        for (name, value) in &flags.extra {
            global.extra.push(ExtraFlag::parse(name, value)?);
        }
        Ok(RunscRuntime {
            binary: policy.runsc.path.clone(),
            global,
            reaper: env.reaper.clone(),
            log,
        })
    }

    /// The last error runsc logged, if any: the reason behind a failed command.
    fn last_logged_error(&self) -> Option<String> {
        let mut text = String::new();
        std::fs::File::open(&self.log)
            .ok()?
            .read_to_string(&mut text)
            .ok()?;
        text.lines().rev().find_map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).ok()?;
            (v.get("level")?.as_str()? == "error" || v.get("level")?.as_str()? == "warning")
                .then(|| v.get("msg")?.as_str().map(str::to_string))
                .flatten()
        })
    }

    async fn run(
        &self,
        sub: Subcommand,
        stdio: Option<RunscStdio>,
    ) -> Result<String, RuntimeError> {
        let name = sub.name();
        let mut cmd = Command::new(&self.binary);
        cmd.args(argv(&self.global, &sub));
        let capture = stdio.is_none();
        match stdio {
            Some(s) => {
                let (i, o, e) = s.into_stdio();
                cmd.stdin(i).stdout(o).stderr(e);
            }
            None => {
                cmd.stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
        }
        let log_len = std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0);
        let mut spawned = self
            .reaper
            .spawn(cmd)
            .map_err(|e| RuntimeError::Failed(format!("{name}: {e}")))?;
        // Read the pipes on blocking threads while waiting for the exit: a full pipe would
        // otherwise stall runsc.
        let out = spawned.stdout.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut buf = String::new();
                let _ = s.read_to_string(&mut buf);
                buf
            })
        });
        let err = spawned.stderr.take().map(|mut s| {
            std::thread::spawn(move || {
                let mut buf = String::new();
                let _ = s.read_to_string(&mut buf);
                buf
            })
        });
        let status = match tokio::time::timeout(COMMAND_TIMEOUT, spawned.exit).await {
            Ok(status) => status,
            Err(_) => {
                // SAFETY: signalling a child we spawned and have not reaped.
                unsafe { libc::kill(spawned.pid, libc::SIGKILL) };
                return Err(RuntimeError::Failed(format!(
                    "{name} did not finish within {COMMAND_TIMEOUT:?} and was killed"
                )));
            }
        };
        let stdout = out.and_then(|h| h.join().ok()).unwrap_or_default();
        let stderr = err.and_then(|h| h.join().ok()).unwrap_or_default();
        if status.success() {
            return Ok(stdout);
        }
        let logged = (std::fs::metadata(&self.log).map(|m| m.len()).unwrap_or(0) > log_len)
            .then(|| self.last_logged_error())
            .flatten();
        let reason = logged
            .or_else(|| {
                capture
                    .then(|| stderr.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| format!("exited with {status}"));
        Err(classify(&reason))
    }
}

/// runsc's words for "that container or process is not there any more".
fn classify(reason: &str) -> RuntimeError {
    const GONE: &[&str] = &[
        "sandbox is not running",
        "no such process",
        "does not exist",
        "not found",
        "is stopped",
        "in state stopped",
        "container not running",
        "cannot signal container",
        "process is not running",
    ];
    let lower = reason.to_lowercase();
    if GONE.iter().any(|g| lower.contains(g)) {
        RuntimeError::Gone(reason.to_string())
    } else {
        RuntimeError::Failed(reason.to_string())
    }
}

#[async_trait::async_trait]
impl SandboxRuntime for RunscRuntime {
    fn global_args(&self) -> Vec<String> {
        self.global
            .to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    async fn create(&self, call: CreateCall<'_>) -> Result<(), RuntimeError> {
        self.run(
            Subcommand::Create {
                id: call.id.to_string(),
                bundle: call.bundle.to_path_buf(),
                pid_file: call.pid_file.to_path_buf(),
                console_socket: call.console_socket.map(Path::to_path_buf),
            },
            Some(call.stdio),
        )
        .await
        .map(drop)
    }

    async fn start(&self, id: &str, stdio: Option<RunscStdio>) -> Result<(), RuntimeError> {
        self.run(
            Subcommand::Start { id: id.to_string() },
            Some(stdio.unwrap_or_else(RunscStdio::null)),
        )
        .await
        .map(drop)
    }

    async fn exec(&self, call: ExecCall<'_>) -> Result<(), RuntimeError> {
        self.run(
            Subcommand::Exec {
                id: call.id.to_string(),
                process_json: call.process_file.to_path_buf(),
                pid_file: call.pid_file.to_path_buf(),
                internal_pid_file: Some(call.internal_pid_file.to_path_buf()),
                detach: true,
                console_socket: call.console_socket.map(Path::to_path_buf),
            },
            Some(call.stdio),
        )
        .await
        .map(drop)
    }

    async fn kill(&self, id: &str, signal: u32, target: KillTarget) -> Result<(), RuntimeError> {
        let (all, pid) = match target {
            KillTarget::Init => (false, None),
            KillTarget::All => (true, None),
            KillTarget::Guest(p) => (false, Some(p)),
        };
        self.run(
            Subcommand::Kill {
                id: id.to_string(),
                signal: signal as i32,
                all,
                pid,
            },
            None,
        )
        .await
        .map(drop)
    }

    async fn delete(&self, id: &str) -> Result<(), RuntimeError> {
        self.run(
            Subcommand::Delete {
                id: id.to_string(),
                force: true,
            },
            None,
        )
        .await
        .map(drop)
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        self.run(Subcommand::Pause { id: id.to_string() }, None)
            .await
            .map(drop)
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        self.run(Subcommand::Resume { id: id.to_string() }, None)
            .await
            .map(drop)
    }

    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeError> {
        let out = self
            .run(Subcommand::Ps { id: id.to_string() }, None)
            .await?;
        serde_json::from_str::<Vec<u32>>(out.trim())
            .map_err(|e| RuntimeError::Failed(format!("ps output {out:?}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vanished_targets_are_classified_as_gone() {
        for msg in [
            "sandbox is not running",
            "cannot signal container \"x\" in state stopped",
            "container \"x\" does not exist",
        ] {
            assert!(matches!(classify(msg), RuntimeError::Gone(_)), "{msg}");
        }
        assert!(matches!(
            classify("reading spec: SELinux is not supported: x"),
            RuntimeError::Failed(_)
        ));
    }
}
