//! A fake world behind the shim's seams, for unit tests of the lifecycle without root, runsc or
//! a kernel that kills sandboxes.
//!
//! [`Fake`] is at once the runtime factory, the sandbox runtime (it keeps runsc's state: which
//! containers exist, which process lives and how it ends) and the host (mounts and cgroups, in
//! memory). It records every call in order, can be told to fail any step once, and lets a test
//! end a workload, an exec or the whole sandbox the way the kernel would.
//! (The containerd front end's fake event sink and shim environment are in its own `fake`.)
//!
//! The fake follows what runsc was measured to do: `create` reports the sandbox's pid (a pod's
//! later container reports the pod sandbox's), a forced `delete` kills what still runs, the
//! sandbox's death takes its execs and later containers with it (whose `runsc wait` then fails),
//! and a signal to a process that is gone is "not running any more".

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::exit::ExitCause;
use crate::reaper::ExitStatus;
use crate::runsc::error::RunscError;
use crate::runtime::RunscStdio;

pub mod host;
mod runtime;

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
    /// Reading the sandbox's CPU time.
    ReadCpu,
    Update,
    /// Confining a sandbox's egress proxy (the sandbox's cgroups).
    Confine,
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
    /// Steps that fail every time (`Fake::fail_always`).
    broken: BTreeSet<StepKey>,
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
    /// Egress forwarders running (spawned and not yet stopped).
    forwarders: usize,
    sigterm_ignored: bool,
    updates: Vec<String>,
    /// The streams runsc got for a process (a sandbox, an exec), held until it ends, as the
    /// sandbox holds them: the shim's copy sees their end only then.
    stdio: HashMap<u32, RunscStdio>,
    /// What each sandbox's CPU counter reads.
    cpu: HashMap<String, CpuMeter>,
}

/// A CPU counter that grows at a rate the test sets, with the (tokio, possibly paused) clock.
#[derive(Clone, Copy)]
struct CpuMeter {
    at: tokio::time::Instant,
    ns: u64,
    ns_per_sec: u64,
}

impl CpuMeter {
    fn now(&self) -> u64 {
        let dt = tokio::time::Instant::now().duration_since(self.at);
        self.ns + (self.ns_per_sec as u128 * dt.as_nanos() / 1_000_000_000) as u64
    }
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
        let key = step.into();
        self.broken.contains(&key) || self.failing.remove(&key)
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
        // Its streams close with it.
        self.stdio.remove(&pid);
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

    /// Fails `step` every time from now on (a wedged sandbox that takes no signal).
    pub fn fail_always(&self, step: Step) {
        self.world().broken.insert(step.into());
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

    /// The CPU counter of the sandbox of `id` grows by `ns_per_sec` per second from now on
    /// (0 until a test says otherwise).
    pub fn set_cpu_rate(&self, id: &str, ns_per_sec: u64) {
        let mut w = self.world();
        let ns = w.cpu.get(id).map_or(0, CpuMeter::now);
        w.cpu.insert(
            id.to_string(),
            CpuMeter {
                at: tokio::time::Instant::now(),
                ns,
                ns_per_sec,
            },
        );
    }

    fn cpu_usage_ns(&self, id: &str) -> Option<u64> {
        let mut w = self.world();
        if w.fails(Step::ReadCpu) {
            return None;
        }
        Some(w.cpu.get(id).map_or(0, CpuMeter::now))
    }

    /// The process `exec_id` of container `id` ("" for its init) writes `bytes` to its stdout,
    /// as the sandbox would: into what runsc was given.
    pub fn write_stdout(&self, id: &str, exec_id: &str, bytes: &[u8]) {
        use std::io::Write;
        let out = {
            let w = self.world();
            let pid = if exec_id.is_empty() {
                w.containers.get(id).map(|c| c.pid)
            } else {
                w.execs
                    .iter()
                    .find(|e| e.container == id && e.exec_id == exec_id)
                    .map(|e| e.pid)
            };
            let fd = pid
                .and_then(|p| w.stdio.get(&p))
                .and_then(|s| s.stdout.as_ref())
                .unwrap_or_else(|| panic!("{id} {exec_id:?} has no stdout"));
            std::fs::File::from(fd.try_clone().expect("dup of stdout"))
        };
        // Outside the lock: the write may wait for the shim's copy to drain the pipe.
        (&out).write_all(bytes).expect("writing to stdout");
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
        if w.forwarders > 0 {
            out.push(format!("{} egress forwarder(s)", w.forwarders));
        }
        out.sort();
        out
    }
}
