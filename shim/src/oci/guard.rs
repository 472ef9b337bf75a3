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
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use policy_injector::policy::ArtifactsPolicy;
use policy_injector::{Engine, Policy};
use tokio::io::AsyncBufReadExt;
use tokio::signal::unix::{signal, SignalKind};

use super::error::{OciError, Result};
use super::state::{proc_start_time, ExitRecord, ProcStat, Record, StateDir};
use super::trail::StateTrail;
use crate::artifacts::{self, ExitRecord as ManifestExit};
use crate::audit::{ArtifactsAudit, AuditEvent, AuditRecord};
use crate::cgroup::exit_cause::ExitProbe;
use crate::cgroup::SandboxCgroup;
use crate::host::linux::LinuxHost;
use crate::host::Host;
use crate::process::exit::{Exit, ExitCause};
use crate::reaper::{ExitStatus, Reaper};
use crate::runsc::client::{read_pid_file, ProcessIo, Runsc};
use crate::runtime::runsc::client_with;

/// What the guard tells `create` on its ready pipe: one line.
pub const READY: &str = "ok";
pub const FAILED: &str = "error";
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
        match Guard::start(state_dir, ready).await {
            Ok(guard) => guard.watch().await,
            Err(()) => 1,
        }
    })
}

/// The guard is a fork of `create`: without this, `ps` would show it as that `create` for as
/// long as the container lives. Rewrites the command line in place (the original arguments'
/// memory, as `setproctitle` does; the kernel's way to point it elsewhere takes
/// CAP_SYS_RESOURCE, which engines' runtime calls do not always have): `runsc-hardened guard
/// STATE_DIR`, cut to the original's length. Best effort: the name is for people, `delete`
/// knows its guard by pid and start time.
fn show_as_guard(state_dir: &Path) {
    show_as(&[b"guard", state_dir.as_os_str().as_bytes()]);
}

/// Rewrites the command line to `runsc-hardened WORDS...` (see `show_as_guard`).
pub(super) fn show_as(words: &[&[u8]]) {
    let Some((start, end)) = own_args_range() else {
        return;
    };
    let mut title = b"runsc-hardened".to_vec();
    for w in words {
        title.push(0);
        title.extend_from_slice(w);
    }
    // NUL-padded to the end; the last byte stays NUL, so the kernel reads no further.
    title.resize(end - start, 0);
    if let Some(last) = title.last_mut() {
        *last = 0;
    }
    // SAFETY: [start, end) holds this process's original argument strings on its own stack,
    // writable and never freed; the arguments were parsed into owned strings long before.
    unsafe { std::ptr::copy_nonoverlapping(title.as_ptr(), start as *mut u8, title.len()) };
}

/// Where the kernel reads this process's command line from (fields 48 and 49 of
/// `/proc/self/stat`).
fn own_args_range() -> Option<(usize, usize)> {
    let stat = ProcStat::read("self")?;
    let start: usize = stat.field(48)?.parse().ok()?;
    let end: usize = stat.field(49)?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}

pub(super) fn report(mut ready: File, line: &str) {
    // `create` may already be gone (killed): nothing left to tell.
    let _ = writeln!(ready, "{}", line.replace('\n', " "));
}

struct Guard {
    state: StateDir,
    record: Record,
    audit: StateTrail,
    runsc: Runsc,
    sandbox_pid: i32,
    exit: crate::reaper::ExitFuture,
    probe: Option<ExitProbe>,
    /// The policy's `[audit.artifacts]`, for the exit manifest.
    artifacts: ArtifactsPolicy,
    /// Our own cgroup directories, to go back to at start.
    home: Vec<PathBuf>,
    /// The fifo `start` writes to.
    notify: Option<tokio::io::BufReader<tokio::net::unix::pipe::Receiver>>,
    reaper: Reaper,
    /// The egress proxy and forwarder, from `start` to the exit.
    egress: Option<crate::egress::EgressSupervisor>,
}

impl Guard {
    /// Creates the sandbox and reports to `create`. On failure, whatever runsc made is removed
    /// and the reason goes down the ready pipe.
    async fn start(state_dir: &Path, ready: File) -> std::result::Result<Guard, ()> {
        let fail = |ready: File, e: &dyn std::fmt::Display| {
            report(ready, &format!("{FAILED} {e}"));
        };
        // The guard has nothing more to say once the reason went down the pipe.
        let reaper = match Reaper::install() {
            Ok(r) => r,
            Err(e) => {
                fail(ready, &e);
                return Err(());
            }
        };
        let (state, record, policy, runsc) = match load(state_dir, &reaper).await {
            Ok(x) => x,
            Err(e) => {
                fail(ready, &e);
                return Err(());
            }
        };
        // runsc joins a cgroup that exists as it is, without the policy's limits.
        if let Err(e) = LinuxHost.ensure_no_cgroups(&record.cgroups_path, &record.id) {
            fail(ready, &e);
            return Err(());
        }
        let io = match container_stdio() {
            Ok(io) => io,
            Err(e) => {
                fail(ready, &e);
                return Err(());
            }
        };
        let created = runsc
            .create(
                &record.id,
                &record.bundle,
                &state.sandbox_pid_file(),
                record.console_socket.as_deref(),
                io,
            )
            .await;
        // The container's streams belong to the sandbox now: holding them open would keep the
        // engine's readers from seeing the end of the output.
        detach_stdio();
        let started = async {
            created?;
            let pid = read_pid_file(&state.sandbox_pid_file())?;
            let exit = reaper.watch(pid)?;
            Ok::<_, OciError>((pid, exit))
        }
        .await;
        let (sandbox_pid, exit) = match started {
            Ok(x) => x,
            Err(e) => {
                undo(&runsc, &record).await;
                fail(ready, &e);
                return Err(());
            }
        };
        let (probe, home) = match SandboxCgroup::of_pid(sandbox_pid) {
            Ok(cg) => {
                let home = join(&cg);
                (ExitProbe::arm(cg).ok(), home)
            }
            Err(e) => {
                record.log.warn(&format!(
                    "container {}: sandbox cgroups: {e}; OOM and process-limit exits will not be told apart",
                    record.id
                ));
                (None, Vec::new())
            }
        };
        // Open before answering: `start` may come the moment `create` returns.
        let notify = open_notify(&state.notify_fifo());
        report(ready, &format!("{READY} {sandbox_pid}"));
        Ok(Guard {
            audit: StateTrail::open(&record, &state),
            state,
            record,
            runsc,
            sandbox_pid,
            exit,
            probe,
            artifacts: policy.audit.artifacts,
            home,
            notify,
            reaper,
            egress: None,
        })
    }

    /// Runs until the sandbox exits; returns the container's exit code.
    async fn watch(mut self) -> u8 {
        enum Event {
            Exit(ExitStatus),
            Notified(bool),
            NotifyGone,
            Signal(i32),
            Deadline,
        }
        let mut notify = self.notify.take();
        let mut line = String::new();
        let mut deadline: Option<tokio::time::Instant> = None;
        let mut expired = false;
        let mut signals = Forwarded::new();
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
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => Event::Deadline,
            };
            match event {
                Event::Exit(status) => break status,
                Event::Notified(started) => {
                    line.clear();
                    if started && deadline.is_none() && !expired {
                        if self.record.engine != Some(Engine::Podman) {
                            leave(&self.home);
                            self.home.clear();
                        }
                        deadline =
                            Some(tokio::time::Instant::now() + self.record.lifetime.max_runtime);
                        self.egress = super::egress::start(
                            &self.record,
                            &self.state,
                            &self.runsc,
                            &self.reaper,
                            &self.audit,
                        );
                    }
                }
                Event::NotifyGone => notify = None,
                Event::Signal(sig) => self.forward(sig).await,
                Event::Deadline if !expired => {
                    expired = true;
                    self.expire().await;
                    deadline =
                        Some(tokio::time::Instant::now() + self.record.lifetime.grace_period);
                }
                Event::Deadline => {
                    self.kill_all(libc::SIGKILL).await;
                    deadline = None;
                }
            }
        };
        // Its records belong before the exit record.
        if let Some(egress) = self.egress.take() {
            egress.stop().await;
        }
        // Still in the sandbox's cgroups under Podman: no need to move out now, the exit that
        // follows takes the guard out of them, and moving between v1 hierarchies costs ~7 ms
        // on the path from the sandbox's exit to the engine seeing it.
        let artifacts = self.exit_manifest().await;
        // Before the engine sees the exit: the developer's next git command runs on what this
        // leaves (see crate::workspace).
        let bundle = self.record.bundle.clone();
        let workspace = tokio::task::spawn_blocking(move || {
            crate::workspace::finish(&bundle, crate::workspace::Ending::Ran)
        })
        .await
        .unwrap_or_default();
        let (code, cause) = self.conclude(
            status.unfold_runsc(),
            expired,
            artifacts.as_ref(),
            workspace.as_ref(),
        );
        // Not after an OOM kill, nor when the cgroup could not tell: runsc's delete removes the
        // sandbox's cgroups, and the engines' OOM watchers drop an OOM event whose cgroup is
        // already gone (measured: Docker's OOMKilled false for a memory bomb). The engine's
        // own `delete` comes late enough.
        if cause != ExitCause::Oom && self.probe.is_some() {
            self.start_runsc_delete();
        }
        code
    }

    /// The engine's next call after an exit is `delete`, and runsc's part of it (one runsc
    /// process, ~30 ms here) is most of that call. It starts now, beside the engine's own work
    /// after the exit; `delete` waits for it and runs runsc itself only when this one did not
    /// succeed (`runsc-deleted` is written on success). Nobody here waits for it: the guard exits
    /// now, and the engine (a subreaper) reaps it.
    fn start_runsc_delete(&self) {
        let runsc = self.runsc.delete_command(&self.record.id, true);
        // Under Podman the guard is still in the sandbox's cgroups, which runsc removes: its
        // delete runs from where the guard came from. The script moves itself there (writing
        // "0" moves the writer) rather than the guard before the spawn: a move between cgroup
        // v1 hierarchies can take a scheduler grace period, ~15 ms measured here, and the guard's
        // exit is what the engine waits for. Arguments: the cgroup.procs files, `--`, runsc's
        // argv; `$M` is the marker. Nothing is quoted into the script.
        let script =
            r#"while [ "$1" != -- ]; do echo 0 > "$1"; shift; done; shift; "$@" && : > "$M""#;
        let mut cmd = std::process::Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(script)
            .arg("runsc-delete")
            .args(self.home.iter().map(|d| d.join("cgroup.procs")))
            .arg("--")
            .arg(runsc.get_program())
            .args(runsc.get_args())
            .env("M", self.state.runsc_deleted_marker())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let recorded = match cmd.spawn() {
            Ok(child) => {
                let pid = child.id() as i32;
                self.state.set_runsc_delete(pid, proc_start_time(pid))
            }
            Err(e) => Err(OciError::io("starting", "/bin/sh (runsc delete)")(e)),
        };
        if let Err(e) = recorded {
            // `delete` then runs runsc itself.
            self.record
                .log
                .warn(&format!("container {}: {e}", self.record.id));
        }
    }

    async fn expire(&self) {
        let msg = format!(
            "container {}: maximum runtime {:?} reached, sending SIGTERM",
            self.record.id, self.record.lifetime.max_runtime
        );
        self.record.log.warn(&msg);
        let rec = AuditRecord::new(AuditEvent::Timeout, &self.record.subject);
        if let Err(e) = self.audit.append(&rec) {
            self.record
                .log
                .warn(&format!("container {}: {e}", self.record.id));
        }
        self.kill_all(libc::SIGTERM).await;
    }

    async fn kill_all(&self, signal: i32) {
        if let Err(e) = self.runsc.kill(&self.record.id, signal, true, None).await {
            if signal == libc::SIGKILL {
                // The sandbox does not answer: end it from the host.
                // SAFETY: our child (we are its subreaper), not yet reaped.
                unsafe { libc::kill(self.sandbox_pid, libc::SIGKILL) };
            }
            if !e.is_gone() {
                self.record.log.warn(&format!(
                    "container {}: signal {signal}: {e}",
                    self.record.id
                ));
            }
        }
    }

    async fn forward(&self, signal: i32) {
        if let Err(e) = self.runsc.kill(&self.record.id, signal, false, None).await {
            if !e.is_gone() {
                self.record.log.warn(&format!(
                    "container {}: forwarding signal {signal}: {e}",
                    self.record.id
                ));
            }
        }
    }

    /// The writable volumes' exit manifest and diff, when `start` took a start manifest.
    async fn exit_manifest(&self) -> Option<std::result::Result<ManifestExit, String>> {
        let start = self.state.artifacts_start(&self.record.writable_binds)?;
        let result = artifacts::record_exit_bounded(
            start,
            self.artifacts.clone(),
            self.record.audit_path.clone(),
            self.record.id.clone(),
        )
        .await;
        if let Err(e) = &result {
            self.record
                .log
                .error(&format!("container {}: {e}", self.record.id));
        }
        Some(result)
    }

    /// Classifies, records and audits the exit; returns the code to exit with, and the cause.
    fn conclude(
        &self,
        status: ExitStatus,
        expired: bool,
        artifacts: Option<&std::result::Result<ManifestExit, String>>,
        workspace: Option<&crate::workspace::WorkspaceReport>,
    ) -> (u8, ExitCause) {
        let cause = if expired {
            ExitCause::Timeout
        } else {
            match self.probe.as_ref().map(|p| p.classify(status)) {
                Some(Ok(cause)) => cause,
                Some(Err(e)) => {
                    self.record.log.warn(&format!(
                        "container {}: reading the sandbox's cgroup counters: {e}",
                        self.record.id
                    ));
                    ExitCause::of_status(status)
                }
                None => ExitCause::of_status(status),
            }
        };
        let exit = Exit::new(status, cause, SystemTime::now());
        // A `start` still writing its record goes first (the workload may end at once).
        let _start = self.state.lock_start();
        if let Err(e) = self.state.set_exit(&ExitRecord::of(&exit)) {
            self.record.log.warn(&e.to_string());
        }
        let mut rec = AuditRecord::new(AuditEvent::Exit, &self.record.subject);
        rec.pid = Some(self.sandbox_pid as u32);
        rec.set_exit(&exit);
        rec.artifacts = artifacts.map(ArtifactsAudit::of_exit);
        rec.workspace = workspace;
        if let Err(e) = self.audit.append(&rec) {
            self.record
                .log
                .error(&format!("container {}: {e}", self.record.id));
        }
        if cause.is_enforced() {
            self.record.log.warn(&format!(
                "container {} {}: {status}",
                self.record.id,
                cause.describe()
            ));
        }
        (exit.status.min(255) as u8, cause)
    }
}

async fn load(state_dir: &Path, reaper: &Reaper) -> Result<(StateDir, Record, Policy, Runsc)> {
    let state = StateDir::at(state_dir)?;
    let record = state.record()?;
    let policy = record.policy()?;
    let runsc = runsc_for(&record, &policy, reaper)?;
    Ok((state, record, policy, runsc))
}

/// The runsc client of a container, as its policy configured it at create.
pub fn runsc_for(record: &Record, policy: &Policy, reaper: &Reaper) -> Result<Runsc> {
    let resolved;
    let policy = match &record.runsc_binary {
        Some(binary) => {
            let mut p = policy.clone();
            p.runsc.path = binary.display().to_string();
            resolved = p;
            &resolved
        }
        None => policy,
    };
    Ok(client_with(
        policy,
        &record.runsc,
        &record.namespace,
        &record.bundle,
        record.features.clone(),
        reaper.clone(),
    )?)
}

/// Our stdio (the container's, from the engine) as runsc's.
pub(super) fn container_stdio() -> Result<ProcessIo> {
    let dup = |fd: i32| -> Result<OwnedFd> {
        // SAFETY: fds 0-2 are open (the engine gave them); dup returns a new fd we own.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if new < 0 {
            return Err(OciError::io("dup of stdio fd", format!("fd {fd}"))(
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: just made, owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    };
    Ok(ProcessIo {
        stdin: Some(dup(0)?),
        stdout: Some(dup(1)?),
        stderr: Some(dup(2)?),
    })
}

pub(super) fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard fds, which we own.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// A create that failed after runsc started: remove what runsc made.
pub(super) async fn undo(runsc: &Runsc, record: &Record) {
    let _ = runsc.delete(&record.id, true).await;
    let _ = super::delete::remove_cgroups(record).await;
}

/// Moves this process into the sandbox's resource-controller cgroups (where it knows its way
/// back); returns the directories it came from.
fn join(cg: &SandboxCgroup) -> Vec<PathBuf> {
    let me = std::process::id() as i32;
    // Should the sandbox's memory limit be hit while we are in its cgroup, the kernel must
    // pick the sandbox, never the process that reports the OOM.
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let mut from = Vec::new();
    match (SandboxCgroup::of_pid(me), cg) {
        (Ok(SandboxCgroup::V1 { dirs: mine }), SandboxCgroup::V1 { dirs: theirs }) => {
            for (controller, dir) in theirs {
                let Some(home) = mine
                    .get(controller)
                    .filter(|_| !controller.starts_with("name="))
                else {
                    continue;
                };
                if std::fs::write(dir.join("cgroup.procs"), me.to_string()).is_ok() {
                    from.push(home.clone());
                }
            }
        }
        (Ok(SandboxCgroup::V2 { dir: home }), SandboxCgroup::V2 { dir })
            if std::fs::write(dir.join("cgroup.procs"), me.to_string()).is_ok() =>
        {
            from.push(home);
        }
        _ => {}
    }
    from
}

fn leave(home: &[PathBuf]) {
    let me = std::process::id().to_string();
    for dir in home {
        let _ = std::fs::write(dir.join("cgroup.procs"), &me);
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

/// The signals a guard passes on to the container's init.
pub(super) struct Forwarded {
    streams: Vec<(i32, tokio::signal::unix::Signal)>,
}

impl Forwarded {
    pub(super) fn new() -> Forwarded {
        let streams = [
            (libc::SIGTERM, SignalKind::terminate()),
            (libc::SIGINT, SignalKind::interrupt()),
            (libc::SIGHUP, SignalKind::hangup()),
            (libc::SIGQUIT, SignalKind::quit()),
        ]
        .into_iter()
        .filter_map(|(n, k)| signal(k).ok().map(|s| (n, s)))
        .collect();
        Forwarded { streams }
    }

    pub(super) async fn next(&mut self) -> i32 {
        if self.streams.is_empty() {
            return std::future::pending().await;
        }
        let futures = self
            .streams
            .iter_mut()
            .map(|(n, s)| {
                let n = *n;
                Box::pin(async move {
                    s.recv().await;
                    n
                })
            })
            .collect::<Vec<_>>();
        futures_select_all(futures).await
    }
}

/// The first of several futures to finish (a few, so polling them all is cheap).
async fn futures_select_all<F: std::future::Future<Output = i32> + Unpin>(
    mut futures: Vec<F>,
) -> i32 {
    std::future::poll_fn(move |cx| {
        for f in futures.iter_mut() {
            if let std::task::Poll::Ready(v) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(v);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// How long `delete` waits for a guard to finish its account of the exit before killing it.
pub const GUARD_EXIT_WAIT: Duration = Duration::from_secs(10);
