//! The real [`SandboxRuntime`]: each call is one command of the typed runsc client.
//!
//! Every command of a container gets the same global flags: runsc re-reads its configuration
//! per invocation, and `start` without `--network=none` tries to set up the networking that
//! `create` never asked for. runsc's own messages go to a JSON log in the bundle (`--log`):
//! for create/exec/start its stdio *is* the container's, so the client reads the reason for a
//! failure from that log.

use std::path::{Path, PathBuf};

use policy_injector::{NetworkMode, Policy, RunscFlags};

use super::runtime::{CreateCall, ExecCall, KillTarget, RuntimeError, SandboxRuntime};
use crate::runsc::client::{ExecOpts, Runsc};
use crate::runsc::command::{
    ExtraFlag, GlobalFlags, HostUds, LogFormat, Network, Overlay, Platform, WaitTarget,
};
use crate::runsc::error::RunscError;
use crate::runsc::features::Features;
use crate::service::ShimEnv;
use crate::stdio::RunscStdio;

const LOG_FILE: &str = "runsc.log.json";

#[derive(Debug, thiserror::Error)]
pub enum RunscConfigError {
    #[error(
        "policy runsc.platform {0:?} is not a platform this shim knows (ptrace, kvm, systrap)"
    )]
    Platform(String),
    #[error("runsc overlay {0:?} is not one of none, root:memory, all:memory, root:self")]
    Overlay(String),
    #[error("runsc --host-uds={0} is never granted by this shim")]
    HostUds(String),
    #[error("{0}")]
    Flag(#[from] crate::runsc::command::FlagError),
    #[error("runsc {binary} cannot be configured as the policy demands: {source}")]
    Runsc { binary: String, source: RunscError },
}

/// The global flags the policy and the hardening result ask for (before reconciling them with
/// what the installed runsc supports).
pub fn wanted_flags(
    policy: &Policy,
    flags: &RunscFlags,
    namespace: &str,
    bundle: &Path,
) -> Result<GlobalFlags, RunscConfigError> {
    let mut global = GlobalFlags::new(RunscRuntime::root_for(policy, namespace));
    global.platform = match flags.platform.as_deref() {
        None | Some("") => None,
        Some(p) => Some(Platform::parse(p).ok_or_else(|| RunscConfigError::Platform(p.into()))?),
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
        other => return Err(RunscConfigError::HostUds(other.into())),
    });
    global.overlay = match flags.overlay.as_deref() {
        None => None,
        Some(o) => Some(Overlay::parse(o).ok_or_else(|| RunscConfigError::Overlay(o.into()))?),
    };
    global.log = Some(bundle.join(LOG_FILE));
    global.log_format = Some(LogFormat::Json);
    if policy.runsc.debug {
        global.debug = true;
        let dir =
            Path::new(&policy.runsc.debug_log_dir).join(bundle.file_name().unwrap_or_default());
        // A trailing slash makes runsc write one file per command inside the directory.
        global.debug_log = Some(PathBuf::from(format!("{}/", dir.display())));
    }
    for (name, value) in &flags.extra {
        if name == "directfs" {
            global.directfs = Some(value == "true");
        } else {
            global.extra.push(ExtraFlag::parse(name, value)?);
        }
    }
    Ok(global)
}

pub struct RunscRuntime {
    client: Runsc,
}

impl RunscRuntime {
    /// `<policy runsc.root>/<namespace>`: containers of different namespaces never share state.
    pub fn root_for(policy: &Policy, namespace: &str) -> String {
        Path::new(&policy.runsc.root)
            .join(namespace)
            .display()
            .to_string()
    }

    /// Reconciles the wanted flags with what the installed runsc supports; fails closed.
    pub fn new(
        policy: &Policy,
        flags: &RunscFlags,
        env: &ShimEnv,
        bundle: &Path,
        features: Features,
    ) -> Result<Self, RunscConfigError> {
        let wanted = wanted_flags(policy, flags, &env.namespace, bundle)?;
        let client = Runsc::new(&policy.runsc.path, &wanted, features, env.reaper.clone())
            .map_err(|source| RunscConfigError::Runsc {
                binary: policy.runsc.path.clone(),
                source,
            })?;
        for a in client.adjustments() {
            log::info!("runsc --{}: left out: {}", a.flag, a.reason);
        }
        Ok(RunscRuntime { client })
    }
}

fn map_err(e: RunscError) -> RuntimeError {
    if e.is_gone() {
        RuntimeError::Gone(e.to_string())
    } else {
        RuntimeError::Failed(e.to_string())
    }
}

#[async_trait::async_trait]
impl SandboxRuntime for RunscRuntime {
    fn global_args(&self) -> Vec<String> {
        self.client
            .global()
            .to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    async fn create(&self, call: CreateCall<'_>) -> Result<(), RuntimeError> {
        self.client
            .create(
                call.id,
                call.bundle,
                call.pid_file,
                call.console_socket,
                call.stdio,
            )
            .await
            .map_err(map_err)
    }

    async fn start(&self, id: &str, stdio: Option<RunscStdio>) -> Result<(), RuntimeError> {
        self.client.start(id, stdio).await.map_err(map_err)
    }

    async fn exec(&self, call: ExecCall<'_>) -> Result<(), RuntimeError> {
        let opts = ExecOpts {
            process_json: call.process_file.to_path_buf(),
            pid_file: call.pid_file.to_path_buf(),
            internal_pid_file: Some(call.internal_pid_file.to_path_buf()),
            detach: true,
            console_socket: call.console_socket.map(Path::to_path_buf),
        };
        self.client
            .exec(call.id, &opts, call.stdio)
            .await
            .map_err(map_err)
    }

    async fn kill(&self, id: &str, signal: u32, target: KillTarget) -> Result<(), RuntimeError> {
        let (all, pid) = match target {
            KillTarget::Init => (false, None),
            KillTarget::All => (true, None),
            KillTarget::Guest(p) => (false, Some(p)),
        };
        self.client
            .kill(id, signal as i32, all, pid)
            .await
            .map_err(map_err)
    }

    async fn delete(&self, id: &str) -> Result<(), RuntimeError> {
        self.client.delete(id, true).await.map_err(map_err)
    }

    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        self.client.pause(id).await.map_err(map_err)
    }

    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        self.client.resume(id).await.map_err(map_err)
    }

    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeError> {
        let pids = self.client.ps(id).await.map_err(map_err)?;
        Ok(pids
            .into_iter()
            .filter(|p| *p > 0)
            .map(|p| p as u32)
            .collect())
    }

    async fn wait(&self, id: &str) -> Result<u32, RuntimeError> {
        self.client
            .wait(id, WaitTarget::Init)
            .await
            .map_err(map_err)
    }

    async fn stats(&self, id: &str) -> Result<serde_json::Value, RuntimeError> {
        self.client.stats(id).await.map_err(map_err)
    }

    async fn update(&self, id: &str, resources: &[u8]) -> Result<bool, RuntimeError> {
        match self.client.update(id, resources).await {
            Ok(()) => Ok(true),
            Err(RunscError::Unsupported(_)) => Ok(false),
            Err(e) => Err(map_err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_asks_for_loopback_only_no_raw_sockets_no_host_sockets() {
        let policy = Policy::default();
        let flags = RunscFlags {
            network: NetworkMode::None,
            oci_seccomp: true,
            net_raw: false,
            host_uds: "none".into(),
            overlay: None,
            platform: None,
            extra: Default::default(),
        };
        let args: Vec<String> = wanted_flags(&policy, &flags, "default", Path::new("/b/c1"))
            .unwrap()
            .to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        for want in [
            "--root=/run/gvisor-hardened/runsc/default",
            "--network=none",
            "--oci-seccomp",
            "--net-raw=false",
            "--host-uds=none",
            "--log=/b/c1/runsc.log.json",
            "--log-format=json",
        ] {
            assert!(
                args.contains(&want.to_string()),
                "{want} missing from {args:?}"
            );
        }
        assert!(!args
            .iter()
            .any(|a| a.contains("ignore-cgroups") || a.contains("allow-flag-override")));
    }

    #[test]
    fn unknown_platform_fails_closed() {
        let policy = Policy::default();
        let flags = RunscFlags {
            network: NetworkMode::None,
            oci_seccomp: false,
            net_raw: false,
            host_uds: "none".into(),
            overlay: None,
            platform: Some("vmware".into()),
            extra: Default::default(),
        };
        assert!(matches!(
            wanted_flags(&policy, &flags, "ns", Path::new("/b")),
            Err(RunscConfigError::Platform(_))
        ));
    }
}
