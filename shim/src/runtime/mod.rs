//! The seam between container logic and runsc: what a container needs from the sandbox runtime.
//!
//! The real implementation drives the runsc binary (crate::runsc); tests substitute a fake that
//! records calls, so the lifecycle logic is tested without root or gVisor.

use std::path::Path;

use crate::stdio::RunscStdio;

pub struct CreateCall<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub pid_file: &'a Path,
    pub console_socket: Option<&'a Path>,
    pub stdio: RunscStdio,
}

pub struct ExecCall<'a> {
    pub id: &'a str,
    pub process_file: &'a Path,
    pub pid_file: &'a Path,
    pub internal_pid_file: &'a Path,
    pub console_socket: Option<&'a Path>,
    pub stdio: RunscStdio,
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeError {
    /// The target is already gone (exited sandbox, stopped container): not a failure for kill
    /// and delete, which are idempotent from containerd's point of view.
    #[error("{0}")]
    Gone(String),
    #[error("{0}")]
    Failed(String),
}

#[async_trait::async_trait]
pub trait SandboxRuntime: Send + Sync {
    /// The global runsc arguments this container runs with (for the audit record).
    fn global_args(&self) -> Vec<String>;
    async fn create(&self, call: CreateCall<'_>) -> Result<(), RuntimeError>;
    /// `stdio` is given for subcontainers of a pod, whose streams runsc takes at start.
    async fn start(&self, id: &str, stdio: Option<RunscStdio>) -> Result<(), RuntimeError>;
    async fn exec(&self, call: ExecCall<'_>) -> Result<(), RuntimeError>;
    async fn kill(&self, id: &str, signal: u32, target: KillTarget) -> Result<(), RuntimeError>;
    /// Forced delete: kills what still runs and removes runsc's state.
    async fn delete(&self, id: &str) -> Result<(), RuntimeError>;
    async fn pause(&self, id: &str) -> Result<(), RuntimeError>;
    async fn resume(&self, id: &str) -> Result<(), RuntimeError>;
    /// Pids of the container's processes, as seen inside the sandbox.
    async fn ps(&self, id: &str) -> Result<Vec<u32>, RuntimeError>;
    /// Waits for a pod's later container to exit (its own process, not the sandbox's);
    /// containerd's code (exit code, or 128 + signal).
    async fn wait(&self, id: &str) -> Result<u32, RuntimeError>;
    /// The sentry's own accounting for one container (`runsc events --stats`), as JSON.
    async fn stats(&self, id: &str) -> Result<serde_json::Value, RuntimeError>;
    /// Applies new resources through runsc itself; `Ok(false)` when this runsc cannot (then the
    /// shim writes the sandbox's cgroup files).
    async fn update(&self, id: &str, resources: &[u8]) -> Result<bool, RuntimeError>;
}
