//! A container: its hardened spec, its runsc sandbox, its init process and its execs.
//!
//! One operation per file (style rule 2): `create.rs` is the hardening pipeline, `start.rs`,
//! `kill.rs`, `lifetime.rs` (the wall-clock limit and the idle timeout), `exit.rs` (the one
//! path every process exit takes), `evidence.rs` (bounded output and artifact manifests),
//! `delete.rs`, `exec.rs`, `resources.rs` (pids, stats, update, pause). This file holds the
//! type, the lookups, and what every operation shares.

pub mod create;
mod delete;
mod egress;
mod evidence;
mod exec;
mod exit;
mod kill;
mod lifetime;
pub mod metrics;
mod resources;
mod start;
#[cfg(test)]
mod tests;
mod warm;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use containerd_shim_protos::api::{CreateTaskRequest, StateResponse};
use containerd_shim_protos::types::task::Status;
use policy_injector::Lifetime;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::env::ShimEnv;
use crate::error::{Result, ShimError};
use crate::events::Events;
use crate::options::RuntimeOptions;
use crate::process::state::{State, StateError};
use crate::process::Process;
use crate::stdio::StdioPaths;
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord, Subject, Trail};
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::policy_source::LoadedPolicy;
use gvisor_hardened_core::rootfs::RootfsMount;
use gvisor_hardened_core::runtime::SandboxRuntime;

/// The id rule (`gvisor_hardened_core::container_id`), as a task-API error.
pub fn validate_id(what: &'static str, id: &str) -> Result<()> {
    gvisor_hardened_core::container_id::check(what, id)
        .map_err(|e| ShimError::InvalidArgument(e.to_string()))
}

/// A claimed warm sandbox: its pool, and its entry (runsc id, pid, boot record).
pub struct PoolClaim {
    pub key: gvisor_hardened_core::pool::KeyDir,
    pub entry: gvisor_hardened_core::pool::Entry,
}

/// Where a container stands in its pod. All containers of a pod share one runsc sandbox.
pub enum PodRole {
    /// The sandbox's first container (a pod's pause container, or a plain `ctr run`): its
    /// process is the sandbox process, its cgroups are the sandbox's.
    Sandbox {
        /// Host paths of the sandbox's namespaces, offered to the pod's later containers; set
        /// once the sandbox process exists.
        namespace_paths: OnceLock<Vec<String>>,
    },
    /// A pod's later container, joined into the first one's sandbox (per the CRI annotations).
    Member(Arc<Container>),
}

pub struct Container {
    env: Arc<ShimEnv>,
    id: String,
    /// The warm sandbox this pod sandbox claimed (`gvisor_hardened_core::pool`): not booted by
    /// this shim, not its child, deleted with the pod and never returned.
    pool_claim: Option<PoolClaim>,
    bundle: PathBuf,
    runtime: Arc<dyn SandboxRuntime>,
    policy: LoadedPolicy,
    annotations: BTreeMap<String, String>,
    /// The runsc platform the hardening sized the pids limit for: an Update is sized the same.
    platform: Option<String>,
    /// The hardened spec's memory limit, which sized the guest's memory: an Update cannot
    /// change it.
    memory_at_create: Option<i64>,
    subject: Subject,
    /// This container's records in the audit log; its final record is signed over all of them
    /// when the policy has `[audit] signing_key`. Shared with the egress proxy's audit sink.
    audit: Arc<Trail>,
    lifetime: Lifetime,
    /// `linux.cgroupsPath` of the hardened spec: where runsc puts this container's cgroups.
    cgroups_path: String,
    /// The sandbox's cgroups, baselined at create: how it died is read from them.
    cgroups: OnceLock<Arc<dyn SandboxCgroups>>,
    /// The sandbox process on the host (a sandbox's first container, with the real runtime),
    /// by pidfd: the time limits' last resort when runsc cannot deliver SIGKILL.
    sandbox_process: OnceLock<Arc<gvisor_hardened_core::sandbox::host_process::HostProcess>>,
    pod: PodRole,
    /// The rootfs mounts containerd asked for, mounted at `<bundle>/rootfs` by Create.
    rootfs: Vec<RootfsMount>,
    rootfs_mounted: AtomicBool,
    init: Arc<Process>,
    execs: Mutex<HashMap<String, Arc<Process>>>,
    /// Set when the wall-clock limit or the idle timeout fired: the exit that follows is
    /// classified as that.
    stopped_for: OnceLock<ExitCause>,
    /// Output bound, activity counter and artifact manifests (`evidence.rs`).
    evidence: evidence::Evidence,
    /// Held by Start from `runsc start` until TaskStart is out, and by the exit path before it
    /// records an init exit: a task that exits at once must not be seen as stopped by Start
    /// itself, and its TaskExit must not overtake its TaskStart.
    start_lock: Mutex<()>,
    /// TaskOOM is published once, by the cgroup's OOM notification or by the exit, whichever
    /// comes first.
    oom_reported: AtomicBool,
    /// A kill of every process of the container was sent (Kill with `all`, the shim's teardown,
    /// or after its init's exit): the init's exit needs no second one.
    killed_all: AtomicBool,
    lifetime_task: std::sync::Mutex<Option<JoinHandle<()>>>,
    /// The egress plan when the policy's allowlist is on; served by the pod's sandbox container.
    egress_plan: Option<policy_injector::EgressPlan>,
    /// The sandbox's network namespace on the host (CRI pods), where the proxy dials from.
    network_namespace: Option<PathBuf>,
    egress: Mutex<Option<gvisor_hardened_core::egress::EgressSupervisor>>,
    /// Cancelled as soon as the init's end is known, before the exit path reports it.
    init_ended: tokio_util::sync::CancellationToken,
    /// The kubelet's termination-message file of this container (a pod's app container), where
    /// the exit path says why enforcement ended it (`gvisor_hardened_core::sandbox::termination_message`).
    termination_message: Option<std::path::PathBuf>,
}

impl Container {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id runsc knows this container by: its own, except for a pod sandbox that claimed a
    /// warm sandbox from the pool, whose runsc id is the pool's.
    fn runsc_id(&self) -> &str {
        self.pool_claim
            .as_ref()
            .map_or(self.id.as_str(), |c| c.entry.id.as_str())
    }

    pub fn init_pid(&self) -> u32 {
        self.init.pid()
    }

    /// The pod sandbox container this one joined, if any.
    pub fn pod_sandbox(&self) -> Option<&Arc<Container>> {
        match &self.pod {
            PodRole::Member(sandbox) => Some(sandbox),
            PodRole::Sandbox { .. } => None,
        }
    }

    fn is_member(&self) -> bool {
        matches!(self.pod, PodRole::Member(_))
    }

    fn events(&self) -> Events<'_> {
        Events(self.env.events.as_ref())
    }

    /// How errors name a process of this container.
    fn name_of(&self, p: &Process) -> String {
        if p.is_init() {
            format!("container {}", self.id)
        } else {
            format!("exec {} of container {}", p.exec_id, self.id)
        }
    }

    fn state_error(&self, p: &Process, e: StateError) -> ShimError {
        ShimError::state(self.name_of(p), e)
    }

    /// Appends an audit line for a later lifecycle event, on the audit writer thread (the log's
    /// lock is shared with every shim on the node; this thread serves the whole pod). Only
    /// Create (and an exec's addition) fails on an audit error; an exit or a delete has already
    /// happened, so a failure is logged loudly instead.
    async fn audit_best_effort(&self, record: &AuditRecord<'_>) {
        if let Err(e) = self.audit.append_queued(record).await {
            log::error!("container {}: {e}", self.id);
        }
    }

    /// The sandbox's final audit line (delete, teardown, a failed launch), signed over all its
    /// lines when the policy has a key. Best effort like the others.
    async fn seal_best_effort(&self, record: &AuditRecord<'_>) {
        if let Err(e) = self.audit.seal_queued(record).await {
            log::error!("container {}: {e}", self.id);
        }
    }

    fn record(&self, event: AuditEvent) -> AuditRecord<'_> {
        AuditRecord::new(event, &self.subject)
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
        resp.pid = p.pid();
        resp.status = match state {
            State::Pending | State::Created => Status::CREATED,
            State::Running => Status::RUNNING,
            State::Paused => Status::PAUSED,
            State::Stopped(_) | State::Deleted(_) => Status::STOPPED,
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

    /// Resolves once the process's exit is published and audited.
    pub async fn wait(&self, exec_id: &str) -> Result<Exit> {
        Ok(self.process(exec_id).await?.wait().await)
    }

    pub async fn resize_pty(&self, exec_id: &str, width: u32, height: u32) -> Result<()> {
        let p = self.process(exec_id).await?;
        Ok(p.io.resize(width, height, p.stdio.terminal)?)
    }

    pub async fn close_stdin(&self, exec_id: &str) -> Result<()> {
        self.process(exec_id).await?.io.close_stdin();
        Ok(())
    }
}

/// Everything Create needs from the request, validated.
pub struct CreateParams {
    pub id: String,
    pub bundle: PathBuf,
    pub rootfs: Vec<RootfsMount>,
    pub stdio: StdioPaths,
    pub options: RuntimeOptions,
}

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
