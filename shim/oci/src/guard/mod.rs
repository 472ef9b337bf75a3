//! The guard: one small process per container, started by `create`, doing what the shim's
//! long-lived process does for containerd — because an OCI runtime binary exits after each call.
//!
//! - `create` forks it before doing anything else (`fork.rs`: no exec, no start-up of its own
//!   on the way to the sandbox); it waits for `create`'s go, then runs `runsc create` itself as
//!   a child subreaper, so the sandbox and gofer become its children: it alone sees the
//!   sandbox's exit status. It names itself `runsc-hardened guard STATE_DIR`.
//! - Its pid is the one in the engine's `--pid-file`. The engines wait on that pid (both are
//!   subreapers, and the guard is their descendant) and take its exit status as the
//!   container's, so the guard exits with the sandbox's status, after classifying it.
//! - From `create` it sits in the sandbox's cgroups: the engines find "the container's cgroup"
//!   through `/proc/<pid>/cgroup` of that pid (measured: with the guard outside, `docker stats`
//!   showed the host's totals, 1.2 GiB of 23.5 GiB and 196 % CPU, for an idle container).
//!   containerd's runc shim reads it once, right after `create` (stats, OOM events), so under
//!   Docker the guard moves back out at `start` and nothing of it counts against the
//!   container's limits while the workload runs. Podman reads it again at every `podman stats`,
//!   so under Podman the guard stays (one task and a few hundred KiB, with an OOM score that
//!   keeps the kernel from picking it).
//! - From `start` it enforces the wall-clock lifetime: SIGTERM to every process, the grace
//!   period, SIGKILL.
//! - At the exit it tells an OOM kill and a process-limit crash from a plain exit (counters
//!   read before anyone runs `runsc delete`), writes the `exit` audit record, starts `runsc
//!   delete` (the engine's `delete` comes next and would otherwise wait for it; not after an
//!   OOM kill, whose event the engines drop once the cgroup is gone), and leaves.
//! - From `start`, when the policy allows egress, it runs the sandbox's egress proxy and keeps
//!   the forwarder inside alive (`egress.rs`), and stops them at the exit, before the `exit`
//!   record. Under Docker the proxy runs outside the container's cgroups (the guard left
//!   them); under Podman it stays in them, so the container's CPU, memory and process limits
//!   cover the proxy's work for it and the forwarder's host `runsc exec` process too (bounded:
//!   one runtime thread, at most four blocking ones, per-connection buffers): a workload
//!   cannot spend host resources beyond its limits by pushing traffic through the proxy.
//! - SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to it (to "the container's pid") are passed to
//!   the container's init.
//!
//! Killed with SIGKILL, it leaves the sandbox running: the sandbox is reparented to the
//! engine, the engine sees "its" pid exit 137 and calls `delete`, which kills the sandbox and
//! cleans everything up.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use policy_injector::policy::ArtifactsPolicy;
use policy_injector::Engine;
use tokio::io::AsyncBufReadExt;

use super::error::Result;
use super::fork::{report, FAILED, READY};
use super::state::{Record, StateDir};
use super::trail::StateTrail;
use crate::opened::Opened;
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord};
use gvisor_hardened_core::exit::ExitCause;
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::reaper::{ExitStatus, Reaper};
use gvisor_hardened_core::runtime::{ExitWatch, KillTarget, SandboxRuntime};
use gvisor_hardened_core::sandbox::ending::{self, Ended};
use gvisor_hardened_core::sandbox::launch::LaunchPlan;
use gvisor_hardened_core::sandbox::lifetime::{self, Target};
use hands::{Hands, HostHands};
pub(crate) use signals::Forwarded;
pub(crate) use stdio::container_stdio;
pub(crate) use stdio::{EngineStdio, HostStdio};
pub(crate) use title::show_as;
use title::show_as_guard;

mod cgroups;
mod exit;
mod hands;
mod launch;
mod runsc_delete;
mod signals;
pub(crate) mod stdio;
pub(crate) mod terminal;
#[cfg(test)]
mod tests;
mod title;

/// The line `start` writes to the notify fifo.
pub const STARTED: &str = "start";

/// The guard, in the process `create` forked (`fork.rs`, `create::guard_child`), once told to
/// go: `ready` takes its one-line answer. Returns the container's exit code.
pub fn main(state_dir: &Path, ready: File) -> u8 {
    show_as_guard(state_dir);
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Name lookups of the egress proxy run on blocking threads; under Podman they count
        // against the container's process limit, so keep their number small.
        .max_blocking_threads(4)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report(
                ready,
                &format!("{FAILED} cannot start the guard's runtime: {e}"),
            );
            return 1;
        }
    };
    rt.block_on(async move {
        // On failure whatever runsc made is removed and the reason goes down the ready pipe;
        // the guard has nothing more to say.
        let launched = async {
            let world = World::host(state_dir)?;
            Guard::launch(world).await
        }
        .await;
        match launched {
            Ok(guard) => {
                report(ready, &format!("{READY} {}", guard.sandbox_pid));
                guard.watch(Forwarded::new()).await
            }
            Err(e) => {
                report(ready, &format!("{FAILED} {e}"));
                1
            }
        }
    })
}

/// A container as the guard finds it (the same `Opened` every runsc-hardened call works on:
/// state, record, policy, the sandbox core's runtime and host), and the guard's own hands.
struct World {
    c: Opened,
    hands: Box<dyn Hands>,
}

impl World {
    /// The real one: the container's runsc as `create` configured it, this process the
    /// subreaper of what runsc starts (so the guard alone sees the sandbox's exit status).
    fn host(state_dir: &Path) -> Result<World> {
        let reaper = Reaper::install()?;
        let state = StateDir::at(state_dir)?;
        let pid_file = state.sandbox_pid_file();
        let (c, runsc) = Opened::from_state(state, reaper, Some(pid_file))?;
        Ok(World {
            c,
            hands: Box::new(HostHands { runsc }),
        })
    }
}

/// Whatever delivers the signals sent to the guard (the container's pid, to the engines).
pub(crate) trait Signals {
    fn next(&mut self) -> impl std::future::Future<Output = i32>;
}

impl Signals for Forwarded {
    fn next(&mut self) -> impl std::future::Future<Output = i32> {
        Forwarded::next(self)
    }
}

/// The signals a test sends to "the container's pid" (or an exec's).
#[cfg(test)]
impl Signals for tokio::sync::mpsc::UnboundedReceiver<i32> {
    async fn next(&mut self) -> i32 {
        match self.recv().await {
            Some(signal) => signal,
            None => std::future::pending().await,
        }
    }
}

struct Guard {
    state: StateDir,
    record: Record,
    audit: StateTrail,
    runtime: Arc<dyn SandboxRuntime>,
    hands: Box<dyn Hands>,
    sandbox_pid: i32,
    exit: ExitWatch,
    /// Tells an OOM kill and a process-limit crash from a plain exit; `None` when the
    /// sandbox's cgroups could not be found.
    probe: Option<Arc<dyn SandboxCgroups>>,
    /// The policy's `[audit.artifacts]`, for the exit manifest.
    artifacts: ArtifactsPolicy,
    /// Our own cgroup directories, to go back to at start.
    home: Vec<PathBuf>,
    /// The fifo `start` writes to.
    notify: Option<tokio::io::BufReader<tokio::net::unix::pipe::Receiver>>,
    /// The egress proxy and forwarder, from `start` to the exit.
    egress: Option<gvisor_hardened_core::egress::EgressSupervisor>,
    /// What the time limits stop: runsc's container, the sandbox process as the last resort.
    limits: Arc<Target>,
    /// Set when a time limit fired: the exit that follows is classified as that.
    stopped_for: Arc<OnceLock<ExitCause>>,
    /// The init's output under the container's budget (when the policy bounds output or has
    /// an idle timeout), until the exit takes its report.
    streams: stdio::Guarded,
}

impl Guard {
    /// Creates the sandbox and watches its process. On failure, whatever runsc made is
    /// removed.
    async fn launch(world: World) -> Result<Guard> {
        let World {
            c:
                Opened {
                    state,
                    record,
                    policy,
                    runtime,
                    host,
                },
            hands,
        } = world;
        // The core's launch sequence with the guard's steps (`launch.rs`).
        let steps = launch::GuardLaunch {
            state: &state,
            record: &record,
            policy: &policy,
            runtime: runtime.as_ref(),
            host: host.as_ref(),
            hands: hands.as_ref(),
            streams: Default::default(),
            watched: Default::default(),
        };
        let plan = LaunchPlan {
            id: &record.id,
            runsc_id: &record.id,
            namespace: &record.namespace,
            cgroups_path: &record.cgroups_path,
            makes_sandbox: true,
            egress: record.egress.as_ref(),
            idle_timeout: record.lifetime.idle_timeout,
        };
        let sandbox_pid =
            gvisor_hardened_core::sandbox::launch::launch(&steps, &plan).await? as i32;
        let launch::Launched {
            streams,
            process,
            exit,
            probe,
        } = steps.launched()?;
        let home = probe
            .as_ref()
            .map(|cg| hands.join(cg.as_ref()))
            .unwrap_or_default();
        // Open before answering: `start` may come the moment `create` returns.
        let notify = open_notify(&state.notify_fifo());
        let limits = Arc::new(Target {
            runtime: runtime.clone(),
            id: record.id.clone(),
            sandbox: process,
        });
        Ok(Guard {
            audit: StateTrail::open(&record, &state),
            state,
            record,
            runtime,
            hands,
            sandbox_pid,
            exit,
            probe,
            artifacts: policy.audit.artifacts,
            home,
            notify,
            egress: None,
            limits,
            stopped_for: Default::default(),
            streams,
        })
    }

    /// Runs until the sandbox exits; returns the container's exit code.
    async fn watch(mut self, mut signals: impl Signals) -> u8 {
        enum Event {
            Exit(ExitStatus),
            Notified(bool),
            NotifyGone,
            Signal(i32),
            LimitsDone,
        }
        let mut notify = self.notify.take();
        let mut line = String::new();
        // Armed at `start`, once; dropped with the loop when the sandbox exits first.
        let mut limits: Option<std::pin::Pin<Box<dyn std::future::Future<Output = ExitCause>>>> =
            None;
        let mut armed = false;
        let status = loop {
            let event = tokio::select! {
                status = &mut self.exit => Event::Exit(status),
                read = async {
                    match notify.as_mut() {
                        Some(n) => n.read_line(&mut line).await,
                        None => std::future::pending().await,
                    }
                } => match read {
                    Ok(n) if n > 0 => Event::Notified(line.trim() == STARTED),
                    _ => Event::NotifyGone,
                },
                sig = signals.next() => Event::Signal(sig),
                _ = async {
                    match limits.as_mut() {
                        Some(l) => l.await,
                        None => std::future::pending().await,
                    }
                } => Event::LimitsDone,
            };
            match event {
                Event::Exit(status) => break status,
                Event::Notified(started) => {
                    line.clear();
                    if started && !armed {
                        armed = true;
                        if self.record.engine != Some(Engine::Podman) {
                            self.hands.leave(&self.home);
                            self.home.clear();
                        }
                        limits = Some(Box::pin(self.time_limits()));
                        self.egress = super::egress::start(
                            &self.record,
                            &self.state,
                            self.runtime.as_ref(),
                            &self.audit,
                            self.limits.sandbox.clone(),
                        );
                        // The guard lives as long as its container and runs little of its
                        // code from here on (text_pages.rs).
                        gvisor_hardened_proc::text_pages::drop_when_quiet();
                    }
                }
                Event::NotifyGone => notify = None,
                Event::Signal(sig) => self.forward(sig).await,
                Event::LimitsDone => limits = None,
            }
        };
        // The one exit sequence, the sandbox core's; the guard's steps in `exit.rs`.
        let steps = exit::SandboxEnd {
            state: &self.state,
            record: &self.record,
            audit: &self.audit,
            probe: self.probe.as_deref(),
            stopped_for: self.stopped_for.get().copied(),
            artifacts: &self.artifacts,
            egress: std::sync::Mutex::new(self.egress.take()),
            streams: tokio::sync::Mutex::new(&mut self.streams),
        };
        let ended = Ended {
            exec_id: None,
            pid: Some(self.sandbox_pid as u32),
            status,
        };
        let exit = ending::conclude(&steps, ended).await;
        let cause = exit.map_or(ExitCause::of_status(status), |e| e.cause);
        let code = exit.map_or(status.containerd_code(), |e| e.status).min(255) as u8;
        // Not after an OOM kill, nor when the cgroup could not tell: runsc's delete removes the
        // sandbox's cgroups, and the engines' OOM watchers drop an OOM event whose cgroup is
        // already gone (measured: Docker's OOMKilled false for a memory bomb). The engine's
        // own `delete` comes late enough.
        if cause != ExitCause::Oom && self.probe.is_some() {
            self.hands
                .start_runsc_delete(&self.record.id, &self.state, &self.home);
        }
        code
    }

    /// The policy's wall-clock limit and idle timeout, the sandbox core's
    /// (`gvisor_hardened_core::sandbox::lifetime`): the guard records the cause and audits the moment.
    fn time_limits(&self) -> impl std::future::Future<Output = ExitCause> + 'static {
        let target = self.limits.clone();
        let stopped_for = self.stopped_for.clone();
        let audit = self.audit.clone();
        let subject = self.record.subject.clone();
        let lifetime = self.record.lifetime;
        let idle = lifetime::idle(
            format!("container {}", self.record.id),
            lifetime.idle_timeout,
            self.record.idle_threshold,
            self.probe.clone(),
            self.streams.budget().cloned(),
        );
        let armed_at = tokio::time::Instant::now();
        async move {
            let fired = |cause| {
                let _ = stopped_for.set(cause);
                let event = match cause {
                    ExitCause::IdleTimeout => AuditEvent::IdleTimeout,
                    _ => AuditEvent::Timeout,
                };
                let rec = AuditRecord::new(event, &subject);
                if let Err(e) = audit.append(&rec) {
                    log::warn!("container {}: {e}", target.id);
                }
            };
            lifetime::enforce(
                &target,
                armed_at,
                lifetime.max_runtime,
                lifetime.grace_period,
                idle,
                fired,
            )
            .await
        }
    }

    async fn forward(&self, signal: i32) {
        let sent = self
            .runtime
            .kill(&self.record.id, signal as u32, KillTarget::Init)
            .await;
        if let Err(e) = sent {
            if !e.is_gone() {
                log::warn!(
                    "container {}: forwarding signal {signal}: {e}",
                    self.record.id
                );
            }
        }
    }
}

fn open_notify(path: &Path) -> Option<tokio::io::BufReader<tokio::net::unix::pipe::Receiver>> {
    // Read-write, so the fifo never reads as closed between two writers.
    tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(path)
        .ok()
        .map(tokio::io::BufReader::new)
}
