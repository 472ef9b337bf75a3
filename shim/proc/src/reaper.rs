//! The single owner of child reaping.
//!
//! The shim is a child subreaper: `runsc create` forks `runsc-sandbox` and `runsc-gofer` and exits,
//! so they are reparented to us, and only we can collect their exit status. Exactly one place in the
//! process calls `waitpid`: the loop in this module, driven by SIGCHLD. Nothing else may wait for
//! children (no `tokio::process`, no `std::process::Command::{status,output}`, no `Child::wait`):
//! a second waiter steals exits from this one, and the loser sees ECHILD.
//!
//! Ordering guarantees:
//! - The registry lock is held around every `waitpid` call *and* around `spawn`. A child spawned with
//!   [`Reaper::spawn`] therefore has its waiter registered before its exit can be collected, and std's
//!   own `waitpid` on a failed `exec` can never race with ours.
//! - Exits of pids nobody waits for yet are kept in a bounded "unclaimed" map, so a [`Reaper::watch`]
//!   registered after the exit (the sandbox pid is only known once `runsc create` returned) still
//!   gets it.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::{ChildStderr, ChildStdin, ChildStdout, Command};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How many exits of pids nobody watches are remembered. The subreaper collects every orphan of the
/// sandbox tree; the oldest are forgotten first.
const UNCLAIMED_CAPACITY: usize = 1024;

/// How a process ended. Keeps a normal exit apart from a death by signal, which containerd folds into
/// one number (see [`ExitStatus::containerd_code`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// `exit(code)`.
    Exited(i32),
    /// Killed by `signal`.
    Signaled { signal: i32, core_dumped: bool },
}

impl ExitStatus {
    /// Decodes a raw `waitpid` status.
    pub fn from_raw(status: libc::c_int) -> Self {
        if libc::WIFSIGNALED(status) {
            ExitStatus::Signaled {
                signal: libc::WTERMSIG(status),
                core_dumped: libc::WCOREDUMP(status),
            }
        } else {
            ExitStatus::Exited(libc::WEXITSTATUS(status))
        }
    }

    /// A death by SIGKILL: what a process killed with its sandbox is reported as.
    pub fn killed() -> Self {
        ExitStatus::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        }
    }

    /// A runsc process (the sandbox, `runsc exec`, `runsc wait`'s answer) relays its container's
    /// fate as an exit code, a death by signal folded into 128 + the signal as a shell does:
    /// unfold it, so a kill is reported as one.
    pub fn unfold_runsc(self) -> Self {
        match self {
            ExitStatus::Exited(code) if code > 128 && code < 128 + 65 => ExitStatus::Signaled {
                signal: code - 128,
                core_dumped: false,
            },
            other => other,
        }
    }

    /// The number containerd reports: the exit code, or 128 + the signal number, as a shell does.
    pub fn containerd_code(&self) -> u32 {
        match *self {
            ExitStatus::Exited(code) => code as u32,
            ExitStatus::Signaled { signal, .. } => 128 + signal as u32,
        }
    }

    pub fn success(&self) -> bool {
        matches!(self, ExitStatus::Exited(0))
    }

    #[cfg(any(test, feature = "test-support"))]
    /// The signal that killed the process, if one did.
    pub fn signal(&self) -> Option<i32> {
        match *self {
            ExitStatus::Signaled { signal, .. } => Some(signal),
            ExitStatus::Exited(_) => None,
        }
    }
}

impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ExitStatus::Exited(code) => write!(f, "exit code {code}"),
            ExitStatus::Signaled { signal, .. } => write!(f, "killed by signal {signal}"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReaperError {
    #[error("cannot become a child subreaper: {0}")]
    Subreaper(#[source] io::Error),
    #[error("cannot listen for SIGCHLD: {0}")]
    Signal(#[source] io::Error),
    #[error("cannot spawn {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    /// The pid is neither a live child of ours nor a remembered exit: waiting for it would hang.
    #[error("pid {0} is not a child of this process and no exit of it is remembered")]
    NotAChild(i32),
}

/// Handle to the reaping loop. Cheap to clone; all clones share one registry.
#[derive(Clone)]
pub struct Reaper {
    inner: Arc<Mutex<Registry>>,
}

#[derive(Default)]
struct Registry {
    waiters: HashMap<i32, Vec<oneshot::Sender<ExitStatus>>>,
    unclaimed: HashMap<i32, ExitStatus>,
    unclaimed_order: VecDeque<i32>,
}

impl Registry {
    fn deliver(&mut self, pid: i32, status: ExitStatus) {
        match self.waiters.remove(&pid) {
            Some(senders) => {
                for tx in senders {
                    // A dropped receiver means the caller lost interest; that is fine.
                    let _ = tx.send(status);
                }
            }
            None => self.remember(pid, status),
        }
    }

    fn remember(&mut self, pid: i32, status: ExitStatus) {
        if self.unclaimed.insert(pid, status).is_none() {
            self.unclaimed_order.push_back(pid);
        }
        while self.unclaimed_order.len() > UNCLAIMED_CAPACITY {
            if let Some(old) = self.unclaimed_order.pop_front() {
                self.unclaimed.remove(&old);
            }
        }
    }

    fn forget(&mut self, pid: i32) -> Option<ExitStatus> {
        let status = self.unclaimed.remove(&pid)?;
        self.unclaimed_order.retain(|p| *p != pid);
        Some(status)
    }

    fn register(&mut self, pid: i32) -> oneshot::Receiver<ExitStatus> {
        let (tx, rx) = oneshot::channel();
        self.waiters.entry(pid).or_default().push(tx);
        rx
    }

    /// Collects every exited child. Called with the lock held, so no spawn is half done.
    fn reap_all(&mut self) {
        loop {
            let mut status: libc::c_int = 0;
            // SAFETY: plain syscall with a valid out pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid > 0 {
                self.deliver(pid, ExitStatus::from_raw(status));
                continue;
            }
            if pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            // 0: children left but none exited; ECHILD: no children at all.
            return;
        }
    }
}

/// A process started through the reaper, with the pipes requested on its `Command`.
pub struct Spawned {
    pub pid: i32,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    pub exit: ExitFuture,
}

/// Resolves to the exit status of one process.
pub struct ExitFuture {
    rx: oneshot::Receiver<ExitStatus>,
    // Keeps the registry (which owns the sender) alive for as long as someone waits.
    _registry: Arc<Mutex<Registry>>,
}

impl Future for ExitFuture {
    type Output = ExitStatus;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<ExitStatus> {
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(status)) => Poll::Ready(status),
            // The registry only drops a sender after sending on it, and this future keeps the
            // registry alive, so the channel cannot close without a value.
            Poll::Ready(Err(_)) => unreachable!("reaper dropped a waiter without an exit status"),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl ExitFuture {
    #[cfg(any(test, feature = "test-support"))]
    /// Blocks the calling thread until the exit, for synchronous code (e.g. cleanup in `Drop`).
    /// Panics inside an async context: there, `.await` the future instead.
    pub fn wait_blocking(self) -> ExitStatus {
        self.rx
            .blocking_recv()
            .expect("reaper dropped a waiter without an exit status")
    }
}

impl Reaper {
    /// Makes this process a child subreaper and starts the reaping loop on the current tokio
    /// runtime. Call once, early, before any child is spawned.
    pub fn install() -> Result<Reaper, ReaperError> {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
        if rc != 0 {
            return Err(ReaperError::Subreaper(io::Error::last_os_error()));
        }
        Self::start_loop()
    }

    /// The reaping loop for a process that must not be a subreaper: one whose children leave
    /// processes behind for its caller's subreaper to wait on (`runsc exec --detach` in
    /// runsc-hardened, whose exec process the engine waits for). Orphans then skip this process.
    pub fn install_without_subreaper() -> Result<Reaper, ReaperError> {
        Self::start_loop()
    }

    fn start_loop() -> Result<Reaper, ReaperError> {
        let mut sigchld = signal(SignalKind::child()).map_err(ReaperError::Signal)?;
        let reaper = Reaper {
            inner: Arc::new(Mutex::new(Registry::default())),
        };
        let registry = reaper.inner.clone();
        tokio::spawn(async move {
            // Reap once before the first signal: children may have exited before the handler
            // existed. SIGCHLD coalesces, so every wake-up drains all exits.
            loop {
                lock(&registry).reap_all();
                if sigchld.recv().await.is_none() {
                    return;
                }
            }
        });
        Ok(reaper)
    }

    /// Spawns `cmd` and registers its exit before any `waitpid` can see it.
    ///
    /// Never call `wait`, `try_wait`, `status` or `output` on anything spawned here; use
    /// [`Spawned::exit`].
    pub fn spawn(&self, mut cmd: Command) -> Result<Spawned, ReaperError> {
        let mut registry = lock(&self.inner);
        let child = cmd.spawn().map_err(|source| ReaperError::Spawn {
            program: cmd.get_program().to_string_lossy().into_owned(),
            source,
        })?;
        let pid = child.id() as i32;
        // An old exit remembered under this pid belongs to a process that no longer exists.
        registry.forget(pid);
        let rx = registry.register(pid);
        drop(registry);
        // Dropping a std Child neither waits nor kills; it only closes handles we did not take.
        let mut child = child;
        Ok(Spawned {
            pid,
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            exit: ExitFuture {
                rx,
                _registry: self.inner.clone(),
            },
        })
    }

    /// Waits for a process we did not spawn ourselves, e.g. the sandbox pid from `--pid-file`,
    /// which was reparented to us. Its exit may already have been collected: then the remembered
    /// status is returned. Fails if the pid is neither our live child nor a remembered exit.
    pub fn watch(&self, pid: i32) -> Result<ExitFuture, ReaperError> {
        let mut registry = lock(&self.inner);
        let rx = match child_state(pid) {
            ChildState::Running => {
                // Alive (or a zombie the loop has not collected yet): any remembered exit under this
                // pid is from an earlier process that used the same number.
                registry.forget(pid);
                registry.register(pid)
            }
            ChildState::NotOurs => match registry.forget(pid) {
                Some(status) => {
                    let (tx, rx) = oneshot::channel();
                    let _ = tx.send(status);
                    rx
                }
                None => return Err(ReaperError::NotAChild(pid)),
            },
        };
        Ok(ExitFuture {
            rx,
            _registry: self.inner.clone(),
        })
    }

    #[cfg(any(test, feature = "test-support"))]
    /// An exit collected for `pid` that nobody has claimed yet (for diagnostics and tests).
    pub fn unclaimed(&self, pid: i32) -> Option<ExitStatus> {
        lock(&self.inner).unclaimed.get(&pid).copied()
    }
}

enum ChildState {
    /// A child of ours that has not been reaped yet (running or zombie).
    Running,
    /// Not a child, or already reaped.
    NotOurs,
}

fn child_state(pid: i32) -> ChildState {
    // WNOWAIT leaves a zombie in place for the reaping loop. Must be called with the registry
    // lock held so the loop cannot reap between this probe and the registration.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer; WNOWAIT makes this a pure query.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc == 0 {
        ChildState::Running
    } else {
        ChildState::NotOurs
    }
}

fn lock(registry: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    // A panic while holding the lock leaves the maps consistent (every update is a single insert
    // or remove), so a poisoned lock is still usable.
    registry.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process-wide reaper for unit tests of every module. Tests share one process, and the
/// registry must be single: a second loop would steal exits from the first.
#[cfg(any(test, feature = "test-support"))]
pub fn shared_for_tests() -> Reaper {
    static REAPER: std::sync::OnceLock<Reaper> = std::sync::OnceLock::new();
    REAPER
        .get_or_init(|| {
            // The loop needs a runtime that outlives every test (each #[tokio::test] has its own
            // short-lived one): give it a thread of its own.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(async {
                    tx.send(Reaper::install().expect("install")).unwrap();
                    std::future::pending::<()>().await;
                });
            });
            rx.recv().expect("reaper")
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::Stdio;
    use std::time::Duration;

    fn reaper() -> Reaper {
        shared_for_tests()
    }

    async fn within<F: Future>(f: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(20), f)
            .await
            .expect("process did not exit within 20 s")
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(script);
        cmd
    }

    #[test]
    fn runsc_codes_above_128_unfold_into_the_signal_and_keep_their_number() {
        let killed = ExitStatus::Exited(137).unfold_runsc();
        assert_eq!(killed, ExitStatus::killed());
        assert_eq!(killed.containerd_code(), 137);
        assert_eq!(ExitStatus::Exited(3).unfold_runsc(), ExitStatus::Exited(3));
        assert_eq!(
            ExitStatus::Exited(255).unfold_runsc(),
            ExitStatus::Exited(255)
        );
    }

    #[test]
    fn exit_status_maps_signals_to_128_plus_signal() {
        assert_eq!(ExitStatus::Exited(3).containerd_code(), 3);
        let killed = ExitStatus::Signaled {
            signal: libc::SIGKILL,
            core_dumped: false,
        };
        assert_eq!(killed.containerd_code(), 137);
        assert_eq!(killed.signal(), Some(9));
        assert!(!killed.success());
        assert!(ExitStatus::Exited(0).success());
    }

    #[tokio::test]
    async fn spawned_child_reports_its_exit_code() {
        let spawned = reaper().spawn(sh("exit 3")).unwrap();
        assert_eq!(within(spawned.exit).await, ExitStatus::Exited(3));
    }

    #[tokio::test]
    async fn immediate_exit_is_not_missed() {
        // `true` may exit before spawn returns; the registration must already be in place.
        for _ in 0..50 {
            let spawned = reaper().spawn(Command::new("/bin/true")).unwrap();
            assert_eq!(within(spawned.exit).await, ExitStatus::Exited(0));
        }
    }

    #[tokio::test]
    async fn killed_child_reports_the_signal() {
        let spawned = reaper().spawn(sh("exec sleep 1000")).unwrap();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(spawned.pid, libc::SIGTERM) };
        let status = within(spawned.exit).await;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
        assert_eq!(status.containerd_code(), 143);
    }

    #[tokio::test]
    async fn piped_stdout_is_handed_back() {
        let mut cmd = sh("echo hello");
        cmd.stdout(Stdio::piped());
        let mut spawned = reaper().spawn(cmd).unwrap();
        let mut out = String::new();
        spawned
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "hello\n");
        assert!(within(spawned.exit).await.success());
    }

    /// Starts a shell that leaves behind an orphan exiting with `code` once our end of its stdin
    /// closes, prints the orphan's pid and exits, like `runsc create` leaving the sandbox behind.
    /// Returns the orphan's pid and the pipe that keeps it alive.
    async fn orphan(code: i32) -> (i32, ChildStdin) {
        // The background job gets the shell's stdin explicitly (fd 3): a non-interactive shell
        // gives background jobs /dev/null, and an orphan exiting before its parent would be reaped
        // by that parent instead of being reparented to us.
        let mut cmd = sh(&format!(
            "exec 3<&0; sh -c 'read x; exit {code}' <&3 3<&- & echo $!"
        ));
        cmd.stdout(Stdio::piped()).stdin(Stdio::piped());
        let mut spawned = reaper().spawn(cmd).unwrap();
        // The orphan keeps stdout open too, so read one line instead of waiting for EOF.
        let mut stdout = spawned.stdout.take().unwrap();
        let mut line = String::new();
        let mut byte = [0u8; 1];
        while stdout.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
            line.push(byte[0] as char);
        }
        assert!(within(spawned.exit).await.success());
        (line.trim().parse().unwrap(), spawned.stdin.take().unwrap())
    }

    #[tokio::test]
    async fn orphaned_grandchild_is_reparented_and_watchable() {
        let (pid, keep_alive) = orphan(7).await;
        let exit = reaper().watch(pid).expect("reparented grandchild is ours");
        drop(keep_alive);
        assert_eq!(within(exit).await, ExitStatus::Exited(7));
    }

    #[tokio::test]
    async fn watch_after_the_exit_gets_the_remembered_status() {
        let (pid, keep_alive) = orphan(6).await;
        drop(keep_alive);
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while reaper().unclaimed(pid).is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "orphan exit never collected"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let exit = reaper().watch(pid).expect("remembered exit");
        assert_eq!(within(exit).await, ExitStatus::Exited(6));
        // Claimed once: it is forgotten.
        assert!(reaper().unclaimed(pid).is_none());
    }

    #[tokio::test]
    async fn watching_a_pid_reaped_by_someone_else_fails() {
        // The middle shell waits for its own child: that exit never reaches us.
        let mut cmd = sh("sh -c 'exit 5' & echo $!; wait");
        cmd.stdout(Stdio::piped());
        let mut spawned = reaper().spawn(cmd).unwrap();
        let mut out = String::new();
        spawned
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let grandchild: i32 = out.trim().parse().unwrap();
        assert!(within(spawned.exit).await.success());
        assert!(matches!(
            reaper().watch(grandchild),
            Err(ReaperError::NotAChild(_))
        ));
    }

    #[tokio::test]
    async fn watching_a_pid_that_is_not_a_child_fails_instead_of_hanging() {
        assert!(matches!(reaper().watch(1), Err(ReaperError::NotAChild(1))));
    }

    #[tokio::test]
    async fn two_watchers_of_one_pid_both_get_the_exit() {
        let mut cmd = sh("read x; exit 4");
        cmd.stdin(Stdio::piped());
        let mut spawned = reaper().spawn(cmd).unwrap();
        let second = reaper().watch(spawned.pid).unwrap();
        drop(spawned.stdin.take());
        assert_eq!(within(spawned.exit).await, ExitStatus::Exited(4));
        assert_eq!(within(second).await, ExitStatus::Exited(4));
    }

    #[test]
    fn wait_blocking_serves_synchronous_callers() {
        let spawned = reaper().spawn(sh("exit 9")).unwrap();
        assert_eq!(spawned.exit.wait_blocking(), ExitStatus::Exited(9));
    }

    #[test]
    fn unclaimed_map_is_bounded_and_forgets_the_oldest() {
        let mut registry = Registry::default();
        for pid in 0..(UNCLAIMED_CAPACITY as i32 + 10) {
            registry.deliver(pid, ExitStatus::Exited(1));
        }
        assert_eq!(registry.unclaimed.len(), UNCLAIMED_CAPACITY);
        assert!(registry.forget(0).is_none());
        assert!(registry.forget(UNCLAIMED_CAPACITY as i32 + 9).is_some());
    }

    #[tokio::test]
    async fn spawn_failure_is_an_error_not_a_panic() {
        let err = reaper()
            .spawn(Command::new("/nonexistent/binary"))
            .err()
            .expect("spawn must fail");
        assert!(matches!(err, ReaperError::Spawn { .. }));
    }
}
