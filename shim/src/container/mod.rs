//! A container: its hardened spec, its runsc sandbox, its init process and its execs.
//!
//! One operation per file (style rule 2): `create.rs` is the hardening pipeline, `lifecycle.rs`
//! start/kill/exit/lifetime/delete, `exec.rs` exec processes, `resources.rs` pids, stats,
//! update and pause. This file holds the shared type and the lookups.

pub mod create;
mod exec;
mod lifecycle;
mod resources;
mod runsc_runtime;
pub mod runtime;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use containerd_shim_protos::api::{CreateTaskRequest, StateResponse};
use containerd_shim_protos::types::task::Status;
use policy_injector::Lifetime;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::audit::{AuditEvent, AuditLog, AuditRecord, Subject};
use crate::error::{Result, ShimError};
use crate::events::Events;
use crate::options::RuntimeOptions;
use crate::policy_source::LoadedPolicy;
use crate::process::state::{Exit, State};
use crate::process::Process;
use crate::rootfs::RootfsMount;
use crate::service::ShimEnv;
use crate::stdio::StdioPaths;
use runtime::SandboxRuntime;

pub use create::CreateParams;

/// Ids end up in file names and runsc arguments: only a conservative alphabet is accepted.
pub fn validate_id(what: &str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !id.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(ShimError::InvalidArgument(format!(
            "{what} {id:?} must be 1-128 characters of [A-Za-z0-9_.-], not starting with '.'"
        )))
    }
}

pub struct Container {
    env: Arc<ShimEnv>,
    id: String,
    bundle: PathBuf,
    runtime: Arc<dyn SandboxRuntime>,
    policy: LoadedPolicy,
    annotations: BTreeMap<String, String>,
    subject: Subject,
    audit: AuditLog,
    lifetime: Lifetime,
    /// `linux.cgroupsPath` of the hardened spec: where runsc puts this container's cgroups.
    cgroups_path: String,
    /// The sandbox's cgroups and their counters at create: how it died is read from them.
    cgroup: std::sync::OnceLock<crate::cgroup::exit_cause::ExitProbe>,
    /// The pod's first container, when this one joined its runsc sandbox (a pod's app
    /// container, per the CRI annotations). All containers of a pod share one sandbox.
    pod_sandbox: Option<Arc<Container>>,
    /// Host paths of this sandbox's namespaces, offered to the pod's later containers; set
    /// once the sandbox process exists.
    pod_namespace_paths: std::sync::OnceLock<Vec<String>>,
    rootfs_mounted: bool,
    init: Arc<Process>,
    execs: Mutex<HashMap<String, Arc<Process>>>,
    timed_out: AtomicBool,
    /// Held by Start from `runsc start` until TaskStart is out, and by the exit handler before it
    /// records the exit: a task that exits at once must not be seen as stopped by Start itself,
    /// and its TaskExit must not overtake its TaskStart.
    start_lock: Mutex<()>,
    /// TaskOOM is published once, by the cgroup's OOM notification or by the exit, whichever
    /// comes first.
    oom_reported: AtomicBool,
    lifetime_task: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Container {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn init_pid(&self) -> u32 {
        self.init.pid()
    }

    fn events(&self) -> Events<'_> {
        Events(self.env.events.as_ref())
    }

    /// Appends an audit line for a later lifecycle event. Only Create fails on an audit error;
    /// an exit or a delete has already happened, so a failure is logged loudly instead.
    fn audit_best_effort(&self, record: &AuditRecord<'_>) {
        if let Err(e) = self.audit.append(record) {
            log::error!("container {}: {e}", self.id);
        }
    }

    fn record(&self, event: AuditEvent) -> AuditRecord<'_> {
        AuditRecord::new(event, &self.subject)
    }

    /// Removes this container's cgroup directories that runsc left (after a failed create, or
    /// a delete that could not finish): empty directories only; the kernel refuses the rest,
    /// and that is reported.
    fn remove_leftover_cgroups(&self) -> Result<()> {
        let Ok(cg) = crate::cgroup::SandboxCgroup::for_spec(&self.cgroups_path, &self.id) else {
            return Ok(());
        };
        let mut busy = Vec::new();
        for dir in cg.remaining() {
            if let Err(e) = std::fs::remove_dir(dir) {
                busy.push(format!("{}: {e}", dir.display()));
            }
        }
        if busy.is_empty() {
            Ok(())
        } else {
            Err(ShimError::Internal(format!(
                "cgroups left behind: {}",
                busy.join("; ")
            )))
        }
    }

    /// The memory cgroup killed the sandbox: TaskOOM (what CRI turns into `OOMKilled`) and an
    /// audit line, once.
    async fn report_oom(&self) {
        if self
            .oom_reported
            .swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            return;
        }
        log::warn!(
            "container {}: out of memory, the sandbox was killed at its memory limit",
            self.id
        );
        self.events().oom(&self.id).await;
        self.audit_best_effort(&self.record(AuditEvent::Oom));
    }

    async fn process(&self, exec_id: &str) -> Result<Arc<Process>> {
        if exec_id.is_empty() {
            return Ok(self.init.clone());
        }
        self.execs
            .lock()
            .await
            .get(exec_id)
            .cloned()
            .ok_or_else(|| ShimError::ExecNotFound {
                id: self.id.clone(),
                exec_id: exec_id.to_string(),
            })
    }

    pub async fn state(&self, exec_id: &str) -> Result<StateResponse> {
        let p = self.process(exec_id).await?;
        let state = p.state();
        let mut resp = StateResponse::new();
        resp.id = self.id.clone();
        resp.exec_id = exec_id.to_string();
        resp.bundle = self.bundle.display().to_string();
        resp.pid = state.pid();
        resp.status = match state {
            State::Pending | State::Created { .. } => Status::CREATED,
            State::Running { .. } => Status::RUNNING,
            State::Paused { .. } => Status::PAUSED,
            State::Stopped { .. } | State::Deleted { .. } => Status::STOPPED,
        }
        .into();
        resp.stdin = p.stdio.stdin.clone();
        resp.stdout = p.stdio.stdout.clone();
        resp.stderr = p.stdio.stderr.clone();
        resp.terminal = p.stdio.terminal;
        if let Some(exit) = state.exit() {
            resp.exit_status = exit.status;
            resp.exited_at = Some(crate::events::timestamp(exit.at)).into();
        }
        Ok(resp)
    }

    pub async fn wait(&self, exec_id: &str) -> Result<Exit> {
        Ok(self.process(exec_id).await?.wait().await)
    }

    pub async fn resize_pty(&self, exec_id: &str, width: u32, height: u32) -> Result<()> {
        Ok(self.process(exec_id).await?.io.resize(width, height)?)
    }

    pub async fn close_stdin(&self, exec_id: &str) -> Result<()> {
        self.process(exec_id).await?.io.close_stdin();
        Ok(())
    }
}

/// Everything Create needs from the request, validated.
impl CreateParams {
    pub fn from_request(req: &CreateTaskRequest) -> Result<Self> {
        validate_id("container id", &req.id)?;
        let bundle = PathBuf::from(&req.bundle);
        if !bundle.is_absolute() {
            return Err(ShimError::InvalidArgument(format!(
                "bundle path {:?} is not absolute",
                req.bundle
            )));
        }
        let options = crate::options::decode(req.options.as_ref())?;
        Ok(CreateParams {
            id: req.id.clone(),
            bundle,
            rootfs: req
                .rootfs
                .iter()
                .map(|m| RootfsMount {
                    fstype: m.type_.clone(),
                    source: m.source.clone(),
                    options: m.options.clone(),
                })
                .collect(),
            stdio: StdioPaths {
                stdin: req.stdin.clone(),
                stdout: req.stdout.clone(),
                stderr: req.stderr.clone(),
                terminal: req.terminal,
            },
            options,
        })
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Container>();
    is::<RuntimeOptions>();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ids_with_path_characters_are_refused() {
        for bad in ["", "../x", "a/b", ".hidden", "a b", "x\0", &"a".repeat(129)] {
            assert!(validate_id("container id", bad).is_err(), "{bad:?}");
        }
        for good in ["c1", "abc-DEF_1.2", &"a".repeat(128)] {
            validate_id("container id", good).unwrap();
        }
    }
}
