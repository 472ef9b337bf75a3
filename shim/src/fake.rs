//! A fake world behind the shim's seams, for unit tests of the lifecycle without root, runsc or
//! a kernel that kills sandboxes.
//!
//! [`Fake`] is at once the runtime factory, the sandbox runtime (it keeps runsc's state: which
//! containers exist, which process lives and how it ends) and the host (mounts and cgroups, in
//! memory). It records every call in order, can be told to fail any step once, and lets a test
//! end a workload, an exec or the whole sandbox the way the kernel would. [`RecordingSink`]
//! keeps the events the shim publishes, in order, as short lines.
//!
//! The fake follows what runsc was measured to do: `create` reports the sandbox's pid (a pod's
//! later container reports the pod sandbox's), a forced `delete` kills what still runs, the
//! sandbox's death takes its execs and later containers with it (whose `runsc wait` then fails),
//! and a signal to a process that is gone is "not running any more".

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskOOM, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::topics;
use policy_injector::{Policy, RunscFlags};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::cgroup::update::Limits;
use crate::cgroup::CgroupError;
use crate::env::ShimEnv;
use crate::events::EventSink;
use crate::host::{Host, SandboxCgroups};
use crate::process::exit::ExitCause;
use crate::reaper::{ExitStatus, ReaperError};
use crate::rootfs::{RootfsError, RootfsMount};
use crate::runsc::error::RunscError;
use crate::runtime::{
    CreateCall, ExecCall, ExecStarted, ExitWatch, KillTarget, RunscConfigError, RuntimeFactory,
    SandboxRuntime,
};
use crate::stdio::RunscStdio;

/// A step the fake can be told to fail once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Making the runtime (runsc feature detection / configuration).
    Configure,
    CheckCgroups,
    Mount,
    Create,
    /// Watching the sandbox process after create.
    Watch,
    Start,
    Exec,
    Kill,
    Delete,
    Pause,
}

struct Proc {
    exit: watch::Sender<Option<ExitStatus>>,
}

struct FakeContainer {
    /// The pid runsc reports for it (the sandbox's).
    pid: u32,
    /// The container whose sandbox it lives in (itself for a sandbox's first container).
    sandbox: String,
    started: bool,
    /// A later container's own end: its status, or `Err` when its sandbox died under it.
    member_exit: watch::Sender<Option<Result<ExitStatus, ()>>>,
}

struct FakeExec {
    container: String,
    exec_id: String,
    pid: u32,
    guest_pid: i32,
}

#[derive(Default)]
struct World {
    calls: Vec<String>,
    failing: BTreeSet<StepKey>,
    next_pid: u32,
    containers: HashMap<String, FakeContainer>,
    processes: HashMap<u32, Proc>,
    execs: Vec<FakeExec>,
    mounts: BTreeSet<PathBuf>,
    /// Sandboxes whose cgroups exist (runsc makes them at create, removes them at delete).
    cgroups: BTreeSet<String>,
    /// Cgroups somebody else made before the sandbox was created.
    foreign_cgroups: BTreeSet<String>,
    /// What the cgroup counters will say about a sandbox's death.
    causes: HashMap<String, ExitCause>,
    oom_watchers: HashMap<String, mpsc::Sender<()>>,
    exit_on_start: Option<ExitStatus>,
    sigterm_ignored: bool,
    updates: Vec<String>,
}

/// `Step` as an ordered key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct StepKey(u8);

impl From<Step> for StepKey {
    fn from(s: Step) -> Self {
        StepKey(s as u8)
    }
}

impl World {
    fn fails(&mut self, step: Step) -> bool {
        self.failing.remove(&step.into())
    }

    fn spawn(&mut self) -> u32 {
        self.next_pid += 1;
        let pid = 1000 + self.next_pid;
        self.processes.insert(
            pid,
            Proc {
                exit: watch::channel(None).0,
            },
        );
        pid
    }

    fn alive(&self, pid: u32) -> bool {
        self.processes
            .get(&pid)
            .is_some_and(|p| p.exit.borrow().is_none())
    }

    fn end(&mut self, pid: u32, status: ExitStatus) {
        if let Some(p) = self.processes.get(&pid) {
            p.exit.send_if_modified(|s| {
                if s.is_some() {
                    return false;
                }
                *s = Some(status);
                true
            });
        }
    }

    /// The sandbox of `root` dies: its execs and later containers with it.
    fn end_sandbox(&mut self, root: &str, status: ExitStatus) {
        let Some(pid) = self.containers.get(root).map(|c| c.pid) else {
            return;
        };
        self.end(pid, status);
        for c in self.containers.values() {
            if c.sandbox == root && c.member_exit.borrow().is_none() {
                c.member_exit.send_replace(Some(Err(())));
            }
        }
        let members: Vec<String> = self
            .containers
            .iter()
            .filter(|(_, c)| c.sandbox == root)
            .map(|(id, _)| id.clone())
            .collect();
        let pids: Vec<u32> = self
            .execs
            .iter()
            .filter(|e| members.contains(&e.container))
            .map(|e| e.pid)
            .collect();
        for p in pids {
            self.end(p, ExitStatus::killed());
        }
    }

    /// The workload of `id` ends with `status`.
    fn end_container(&mut self, id: &str, status: ExitStatus) {
        let Some(c) = self.containers.get(id) else {
            return;
        };
        if c.sandbox == id {
            self.end_sandbox(id, status);
        } else if c.member_exit.borrow().is_none() {
            c.member_exit.send_replace(Some(Ok(status)));
        }
    }

    fn container_alive(&self, id: &str) -> bool {
        match self.containers.get(id) {
            None => false,
            Some(c) if c.sandbox == id => self.alive(c.pid),
            Some(c) => c.member_exit.borrow().is_none() && self.alive(c.pid),
        }
    }
}

fn failure(sub: &'static str, id: &str) -> RunscError {
    RunscError::from_failure(sub, Some(id), ExitStatus::Exited(128), "injected failure")
}

fn gone(sub: &'static str, id: &str) -> RunscError {
    RunscError::AlreadyGone {
        subcommand: sub,
        id: id.to_string(),
        stderr: "sandbox is not running".into(),
    }
}

fn missing(sub: &'static str, id: &str) -> RunscError {
    RunscError::NotFound {
        subcommand: sub,
        id: id.to_string(),
        stderr: "loading container: file does not exist".into(),
    }
}

/// Which pod sandbox a bundle's spec asks to join, as runsc reads it from the CRI annotations.
fn joins(bundle: &Path, id: &str) -> Option<String> {
    let spec: Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).ok()?).ok()?;
    let ann = spec.get("annotations")?;
    let kind = ann.get("io.kubernetes.cri.container-type")?.as_str()?;
    let sandbox = ann.get("io.kubernetes.cri.sandbox-id")?.as_str()?;
    (kind == "container" && sandbox != id).then(|| sandbox.to_string())
}

#[derive(Clone, Default)]
pub struct Fake {
    world: Arc<Mutex<World>>,
}

impl Fake {
    fn world(&self) -> std::sync::MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn call(&self, line: String) {
        self.world().calls.push(line);
    }

    /// Every call so far, e.g. `create c1`, `kill c1 15 all`, `mount /b/rootfs`.
    pub fn calls(&self) -> Vec<String> {
        self.world().calls.clone()
    }

    /// The calls whose first word is `verb`.
    pub fn calls_of(&self, verb: &str) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|c| c.split(' ').next() == Some(verb))
            .collect()
    }

    /// The next `step` fails (once).
    pub fn fail_next(&self, step: Step) {
        self.world().failing.insert(step.into());
    }

    /// The workload of container `id` ends by itself with `status`.
    pub fn exit(&self, id: &str, status: ExitStatus) {
        self.world().end_container(id, status);
    }

    /// Exec `exec_id` of container `id` ends by itself with `status`.
    pub fn exit_exec(&self, id: &str, exec_id: &str, status: ExitStatus) {
        let mut w = self.world();
        let pid = w
            .execs
            .iter()
            .find(|e| e.container == id && e.exec_id == exec_id)
            .map(|e| e.pid);
        if let Some(pid) = pid {
            w.end(pid, status);
        }
    }

    /// The sandbox of `id` will be found dead of `cause` by its cgroup counters.
    pub fn set_cause(&self, id: &str, cause: ExitCause) {
        self.world().causes.insert(id.to_string(), cause);
    }

    /// The kernel's OOM notification for the sandbox of `id`.
    pub async fn notify_oom(&self, id: &str) {
        let tx = self.world().oom_watchers.get(id).cloned();
        if let Some(tx) = tx {
            let _ = tx.send(()).await;
        }
    }

    /// The workload exits with `status` as soon as `runsc start` runs it.
    pub fn exit_on_start(&self, status: ExitStatus) {
        self.world().exit_on_start = Some(status);
    }

    /// The workload ignores SIGTERM (only SIGKILL ends it).
    pub fn ignore_sigterm(&self) {
        self.world().sigterm_ignored = true;
    }

    /// A cgroup for `id` that somebody else made.
    pub fn add_foreign_cgroup(&self, id: &str) {
        self.world().foreign_cgroups.insert(id.to_string());
    }

    /// Limits written to the sandbox cgroups.
    pub fn updates(&self) -> Vec<String> {
        self.world().updates.clone()
    }

    /// What would be left on a real host: runsc containers, live processes, mounts, our
    /// cgroups. Empty when everything was cleaned up.
    pub fn leftovers(&self) -> Vec<String> {
        let w = self.world();
        let mut out: Vec<String> = w
            .containers
            .keys()
            .map(|id| format!("runsc state of {id}"))
            .collect();
        out.extend(
            w.processes
                .iter()
                .filter(|(_, p)| p.exit.borrow().is_none())
                .map(|(pid, _)| format!("process {pid}")),
        );
        out.extend(w.mounts.iter().map(|m| format!("mount {}", m.display())));
        out.extend(w.cgroups.iter().map(|c| format!("cgroups of {c}")));
        out.sort();
        out
    }

    /// A shim environment on this fake, with events recorded and files under `dir`.
    pub fn env(&self, dir: &Path, node_policy: PathBuf, events: Arc<RecordingSink>) -> ShimEnv {
        ShimEnv {
            namespace: "test".into(),
            events,
            runtimes: Arc::new(self.clone()),
            host: Arc::new(self.clone()),
            node_policy,
            console_dir: dir.join("console"),
        }
    }
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
        drop(call.stdio);
        self.call(format!("create {}", call.id));
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
        drop(call.stdio);
        self.call(format!("exec {} {}", call.id, call.exec_id));
        let mut w = self.world();
        if w.fails(Step::Exec) {
            return Err(failure("exec", call.id));
        }
        if !w.container_alive(call.id) {
            return Err(failure("exec", call.id));
        }
        let pid = w.spawn();
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

    async fn ps(&self, id: &str) -> Result<Vec<u32>, RunscError> {
        self.call(format!("ps {id}"));
        Ok(vec![1])
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
        // Like runsc 20221219: no `update`, the shim writes the cgroups.
        Ok(false)
    }
}

impl Host for Fake {
    fn mount_rootfs(&self, _mounts: &[RootfsMount], target: &Path) -> Result<(), RootfsError> {
        self.call(format!("mount {}", target.display()));
        let mut w = self.world();
        if w.fails(Step::Mount) {
            return Err(RootfsError::Mount {
                fstype: "overlay".into(),
                target: target.display().to_string(),
                source: nix::Error::EINVAL,
            });
        }
        w.mounts.insert(target.to_path_buf());
        Ok(())
    }

    fn unmount_rootfs(&self, target: &Path) -> Result<(), RootfsError> {
        self.call(format!("unmount {}", target.display()));
        self.world().mounts.remove(target);
        Ok(())
    }

    fn ensure_no_cgroups(&self, cgroups_path: &str, id: &str) -> Result<(), CgroupError> {
        let mut w = self.world();
        if w.fails(Step::CheckCgroups) || w.cgroups.contains(id) || w.foreign_cgroups.contains(id) {
            return Err(CgroupError::Exists {
                path: PathBuf::from(format!("/sys/fs/cgroup/memory{cgroups_path}")),
            });
        }
        Ok(())
    }

    fn remove_cgroups(&self, _cgroups_path: &str, id: &str) -> Result<(), CgroupError> {
        self.call(format!("remove-cgroups {id}"));
        self.world().cgroups.remove(id);
        Ok(())
    }

    fn sandbox_cgroups(&self, pid: u32) -> Result<Arc<dyn SandboxCgroups>, CgroupError> {
        let w = self.world();
        let id = w
            .containers
            .iter()
            .find(|(id, c)| c.pid == pid && &c.sandbox == *id)
            .map(|(id, _)| id.clone())
            .ok_or(CgroupError::NotFound {
                pid: pid as i32,
                reason: "no such sandbox".into(),
            })?;
        Ok(Arc::new(FakeCgroups {
            fake: self.clone(),
            id,
        }))
    }
}

struct FakeCgroups {
    fake: Fake,
    id: String,
}

impl SandboxCgroups for FakeCgroups {
    fn classify(&self, status: ExitStatus) -> Result<ExitCause, CgroupError> {
        Ok(self
            .fake
            .world()
            .causes
            .get(&self.id)
            .copied()
            .unwrap_or(ExitCause::of_status(status)))
    }

    fn watch_oom(&self) -> Result<mpsc::Receiver<()>, CgroupError> {
        let (tx, rx) = mpsc::channel(1);
        self.fake.world().oom_watchers.insert(self.id.clone(), tx);
        Ok(rx)
    }

    fn metrics(&self) -> Result<Any, CgroupError> {
        Ok(Any::new())
    }

    fn update(&self, limits: &Limits) -> Result<(), CgroupError> {
        self.fake
            .world()
            .updates
            .push(format!("{} {limits:?}", self.id));
        Ok(())
    }
}

/// The events the shim published, in order, as short lines: `create c1`, `start c1`,
/// `exit c1 c1 3` (container, process id, status), `exec-added c1 e1`, `oom c1`,
/// `delete c1 137`...
#[derive(Default)]
pub struct RecordingSink {
    lines: Mutex<Vec<String>>,
    published: tokio::sync::Notify,
}

impl RecordingSink {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Lines starting with `prefix`.
    pub fn matching(&self, prefix: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    /// Resolves once a line starting with `prefix` was published.
    pub async fn published(&self, prefix: &str) {
        loop {
            let notified = self.published.notified();
            if !self.matching(prefix).is_empty() {
                return;
            }
            notified.await;
        }
    }
}

fn decode<M: Message>(any: &Any) -> M {
    M::parse_from_bytes(&any.value).expect("the shim packs well-formed events")
}

#[async_trait::async_trait]
impl EventSink for RecordingSink {
    async fn publish(&self, topic: &'static str, any: Any) {
        let line = match topic {
            topics::TASK_CREATE_EVENT_TOPIC => {
                let e: TaskCreate = decode(&any);
                format!("create {}", e.container_id)
            }
            topics::TASK_START_EVENT_TOPIC => {
                let e: TaskStart = decode(&any);
                format!("start {}", e.container_id)
            }
            topics::TASK_EXIT_EVENT_TOPIC => {
                let e: TaskExit = decode(&any);
                format!("exit {} {} {}", e.container_id, e.id, e.exit_status)
            }
            topics::TASK_OOM_EVENT_TOPIC => {
                let e: TaskOOM = decode(&any);
                format!("oom {}", e.container_id)
            }
            topics::TASK_DELETE_EVENT_TOPIC => {
                let e: TaskDelete = decode(&any);
                format!("delete {} {}", e.container_id, e.exit_status)
            }
            topics::TASK_EXEC_ADDED_EVENT_TOPIC => {
                let e: TaskExecAdded = decode(&any);
                format!("exec-added {} {}", e.container_id, e.exec_id)
            }
            topics::TASK_EXEC_STARTED_EVENT_TOPIC => {
                let e: TaskExecStarted = decode(&any);
                format!("exec-started {} {}", e.container_id, e.exec_id)
            }
            other => other.rsplit('/').next().unwrap_or(other).to_string(),
        };
        self.lines.lock().unwrap().push(line);
        self.published.notify_waiters();
    }
}
