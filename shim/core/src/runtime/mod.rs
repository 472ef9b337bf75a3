//! The seam between the container logic and runsc: what a container needs from the sandbox
//! runtime, and who makes one per container.
//!
//! The real implementation ([`runsc::RunscRuntime`]) drives the runsc binary and watches the
//! processes it leaves behind through the reaper; unit tests substitute `crate::fake`'s runtime,
//! which records every call and can be told to fail any of them, so the lifecycle is tested
//! without root, runsc or gVisor. Failures are runsc's own typed errors either way.

pub mod runsc;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use policy_injector::{Policy, RunscFlags};
use serde_json::Value;

use crate::reaper::{ExitStatus, ReaperError};
pub use crate::runsc::client::ProcessIo as RunscStdio;
use crate::runsc::error::RunscError;

pub use runsc::RunscConfigError;

/// Resolves when a watched process exits.
pub type ExitWatch = Pin<Box<dyn Future<Output = ExitStatus> + Send>>;

pub struct CreateCall<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub console_socket: Option<&'a Path>,
    pub stdio: RunscStdio,
}

pub struct ExecCall<'a> {
    pub id: &'a str,
    pub exec_id: &'a str,
    pub bundle: &'a Path,
    /// The hardened OCI process.
    pub process: &'a Value,
    pub console_socket: Option<&'a Path>,
    pub stdio: RunscStdio,
}

/// A started exec: the host process containerd knows it by, and its pid inside the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecStarted {
    pub pid: u32,
    pub guest_pid: i32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillTarget {
    /// The container's init process.
    Init,
    /// Every process of the container.
    All,
    /// One process, by its pid inside the sandbox.
    Guest(i32),
}

#[async_trait::async_trait]
pub trait SandboxRuntime: Send + Sync {
    /// The global runsc arguments this container runs with (for the audit record).
    fn global_args(&self) -> Vec<String>;
    /// Creates the container; returns the sandbox's host pid (for a pod's later container, the
    /// pod sandbox's).
    async fn create(&self, call: CreateCall<'_>) -> Result<u32, RunscError>;
    /// Watches a process runsc left behind (the sandbox, an exec's runsc process) for its exit.
    fn watch(&self, pid: u32) -> Result<ExitWatch, ReaperError>;
    /// `stdio` is given for a pod's later containers, whose streams runsc takes at start.
    async fn start(&self, id: &str, stdio: Option<RunscStdio>) -> Result<(), RunscError>;
    async fn exec(&self, call: ExecCall<'_>) -> Result<ExecStarted, RunscError>;
    /// A target that is gone already gives an error for which [`RunscError::is_gone`] holds.
    async fn kill(&self, id: &str, signal: u32, target: KillTarget) -> Result<(), RunscError>;
    /// Forced delete: kills what still runs and removes runsc's state.
    async fn delete(&self, id: &str) -> Result<(), RunscError>;
    async fn pause(&self, id: &str) -> Result<(), RunscError>;
    async fn resume(&self, id: &str) -> Result<(), RunscError>;
    /// Waits for a pod's later container to exit (its own process, not the sandbox's).
    async fn wait(&self, id: &str) -> Result<ExitStatus, RunscError>;
    /// The sentry's own accounting for one container (`runsc events --stats`), as JSON.
    async fn stats(&self, id: &str) -> Result<Value, RunscError>;
    /// Applies new resources through runsc itself; `Ok(false)` when this runsc cannot (then the
    /// shim writes the sandbox's cgroup files).
    async fn update(&self, id: &str, resources: &[u8]) -> Result<bool, RunscError>;
    /// Starts a logging program on the host for a `binary://` stdio URI (the shim's `stdio`),
    /// through the reaper, which must own every child of the shim. The default refuses: only
    /// the real runtime starts host programs.
    fn spawn_logger(&self, cmd: std::process::Command) -> Result<ExitWatch, ReaperError> {
        Err(ReaperError::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source: std::io::Error::from(std::io::ErrorKind::Unsupported),
        })
    }
    /// The sandbox process `pid` that `create` just reported, as a handle on the host process
    /// (a pidfd), taken before it is watched. `None` where there is no host process to signal
    /// (the fake world) or it is gone already.
    fn host_process(&self, _pid: u32) -> Option<Arc<crate::sandbox::host_process::HostProcess>> {
        None
    }
    /// How the egress proxy of the sandbox whose host process is `sandbox_pid` is confined:
    /// the real runtime serves it from a process of its own in the sandbox's cgroups
    /// (`egress::confined`); `None` (the fake world, whose forwarders have no pipes to hand
    /// over) serves it in this process. `Err`: it cannot be confined, and egress stays closed.
    fn egress_confinement(
        &self,
        _sandbox_pid: Option<i32>,
    ) -> Result<Option<crate::egress::confined::Confinement>, String> {
        Ok(None)
    }
    /// Starts the egress forwarder inside container `id` (started: runsc refuses an exec before)
    /// with `process` (its OCI process), keeping its files in `state_dir`.
    fn forwarder(
        &self,
        id: &str,
        state_dir: &Path,
        process: Value,
    ) -> Arc<dyn crate::egress::ForwarderSpawner>;
}

/// Makes the runtime of one container, configured as its policy demands (or refuses to).
#[async_trait::async_trait]
pub trait RuntimeFactory: Send + Sync {
    async fn runtime(
        &self,
        policy: &Policy,
        flags: &RunscFlags,
        namespace: &str,
        bundle: &Path,
    ) -> Result<Arc<dyn SandboxRuntime>, RunscConfigError>;

    /// The platform the sandbox will run on under `policy`, before anything is created: the
    /// hardening sizes the pids limit by it (`Context::runsc_platform`). The policy's own
    /// choice unless a runtime knows better.
    async fn platform(&self, policy: &Policy) -> Result<Option<String>, RunscConfigError> {
        Ok((!policy.runsc.platform.is_empty()).then(|| policy.runsc.platform.clone()))
    }
}
