//! Async runsc client: one method per subcommand, each run through the [`Reaper`].
//!
//! Output handling: commands that only talk to us (state, ps, kill...) get pipes for stdout and
//! stderr. `create`, `exec` and a subcontainer's `start` get the container's stdio instead: the
//! sandbox inherits runsc's stdio for the container, so a pipe of ours would never see EOF and
//! the container's output would never reach its fifos. For those, runsc's error message is taken
//! from the runsc log file (`GlobalFlags::log`), which receives the same message as stderr.

use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use crate::reaper::{ExitStatus, Reaper};

use super::command::{argv, Subcommand, WaitTarget};
use super::error::RunscError;
use super::features::{Adjustment, Features};
use super::flags::GlobalFlags;

/// Default deadline for one runsc invocation. create measured ~125 ms here; a wedged runsc must
/// not wedge the shim.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The stdio a container process gets, handed to runsc as its own fds 0-2. Missing ones become
/// /dev/null. The fds are closed in the shim once runsc has been spawned.
#[derive(Debug, Default)]
pub struct ProcessIo {
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// `runsc state` output.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct State {
    pub id: String,
    /// The sandbox pid; -1 once stopped.
    pub pid: i32,
    pub status: Status,
    #[serde(default)]
    pub bundle: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct WaitResult {
    #[serde(rename = "exitStatus")]
    exit_status: i32,
}

/// Options of `runsc exec`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOpts {
    /// The (hardened) OCI process spec, written by the caller.
    pub process_json: PathBuf,
    pub pid_file: PathBuf,
    pub internal_pid_file: Option<PathBuf>,
    /// With `--detach`, runsc returns once the process runs; the pid file then names a runsc
    /// child that lives as long as the process and exits with its status.
    pub detach: bool,
    pub console_socket: Option<PathBuf>,
}

struct Output {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

#[derive(Clone)]
pub struct Runsc {
    binary: PathBuf,
    global: GlobalFlags,
    features: Features,
    adjustments: Vec<Adjustment>,
    reaper: Reaper,
    timeout: Duration,
}

impl Runsc {
    /// Asks the binary what it supports (`runsc flags`, `runsc help`, `runsc help platforms`).
    pub async fn detect(
        binary: &Path,
        reaper: &Reaper,
        timeout: Duration,
    ) -> Result<Features, RunscError> {
        // The three run concurrently (~20 ms each for 20221219 here).
        let run = |sub: Subcommand| async move {
            let mut cmd = Command::new(binary);
            cmd.args(sub.to_args());
            let out = run_piped(reaper, cmd, None, timeout, &sub).await?;
            Ok::<_, RunscError>((sub, out))
        };
        let (flags, help, platforms) = tokio::try_join!(
            run(Subcommand::Flags),
            run(Subcommand::Help { topic: None }),
            run(Subcommand::Help {
                topic: Some("platforms".into())
            }),
        )?;
        // `runsc flags` prints on stderr (Go's flag.PrintDefaults).
        let (sub, out) = flags;
        let out = checked(&sub, out)?;
        let flags = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let (sub, out) = help;
        let help = String::from_utf8_lossy(&checked(&sub, out)?.stdout).into_owned();
        // Older releases have no platforms topic: an empty answer makes the parser fall back to
        // the `--platform` usage text.
        let (_, out) = platforms;
        let platforms = if out.status.success() {
            String::from_utf8_lossy(&out.stdout).into_owned()
        } else {
            String::new()
        };
        Ok(Features::parse(&flags, &help, &platforms))
    }

    /// The binary's OCI runtime features document (`runsc features`, runtime-spec
    /// `features.md`). Releases without the subcommand (20221219) fail as for any unknown one.
    pub async fn oci_features(
        binary: &Path,
        reaper: &Reaper,
        timeout: Duration,
    ) -> Result<serde_json::Value, RunscError> {
        let sub = Subcommand::Features;
        let mut cmd = Command::new(binary);
        cmd.args(sub.to_args());
        let out = checked(&sub, run_piped(reaper, cmd, None, timeout, &sub).await?)?;
        parse_json(sub.name(), &out)
    }

    /// A client for `binary` with the flags the policy wants, reconciled with what the binary
    /// supports (fails closed, see [`Features::reconcile`]).
    pub fn new(
        binary: impl Into<PathBuf>,
        wanted: &GlobalFlags,
        features: Features,
        reaper: Reaper,
    ) -> Result<Runsc, RunscError> {
        let (global, adjustments) = features.reconcile(wanted)?;
        Ok(Runsc {
            binary: binary.into(),
            global,
            features,
            adjustments,
            reaper,
            timeout: DEFAULT_TIMEOUT,
        })
    }

    #[cfg(test)]
    pub fn with_timeout(mut self, timeout: Duration) -> Runsc {
        self.timeout = timeout;
        self
    }

    /// The runsc binary this client runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The global flags actually passed.
    pub fn global(&self) -> &GlobalFlags {
        &self.global
    }

    #[cfg(test)]
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Flags the policy asked for that were left out because they are no-ops in this release.
    pub fn adjustments(&self) -> &[Adjustment] {
        &self.adjustments
    }

    #[cfg(test)]
    /// The argv (after the binary) a subcommand runs with; for logs and the audit.
    pub fn args(&self, sub: &Subcommand) -> Vec<std::ffi::OsString> {
        argv(&self.global, sub)
    }

    /// `runsc create`: the sandbox and gofer are forked and reparented to us (the reaper).
    pub async fn create(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        console_socket: Option<&Path>,
        io: ProcessIo,
    ) -> Result<(), RunscError> {
        let sub = Subcommand::Create {
            id: id.into(),
            bundle: bundle.into(),
            pid_file: pid_file.into(),
            console_socket: console_socket.map(Into::into),
        };
        self.run_with_io(sub, io, Some(self.timeout)).await
    }

    /// `runsc start`. Pass `Some(io)` for a subcontainer (runsc hands its own stdio to it), `None`
    /// for the sandbox's first container, whose stdio was given at create.
    pub async fn start(&self, id: &str, io: Option<ProcessIo>) -> Result<(), RunscError> {
        let sub = Subcommand::Start { id: id.into() };
        match io {
            Some(io) => self.run_with_io(sub, io, Some(self.timeout)).await,
            None => self.run(sub, None).await.map(drop),
        }
    }

    pub async fn state(&self, id: &str) -> Result<State, RunscError> {
        let sub = Subcommand::State { id: id.into() };
        let out = self.run(sub, None).await?;
        parse_json("state", &out)
    }

    /// `runsc kill`. A target that is not running any more gives [`RunscError::AlreadyGone`].
    pub async fn kill(
        &self,
        id: &str,
        signal: i32,
        all: bool,
        pid: Option<i32>,
    ) -> Result<(), RunscError> {
        let sub = Subcommand::Kill {
            id: id.into(),
            signal,
            all,
            pid,
        };
        self.run(sub, None).await.map(drop)
    }

    pub async fn delete(&self, id: &str, force: bool) -> Result<(), RunscError> {
        let sub = Subcommand::Delete {
            id: id.into(),
            force,
        };
        self.run(sub, None).await.map(drop)
    }

    /// `runsc delete` as a command to run detached (no timeout, nobody here waits for it): for
    /// a caller that is about to exit and leaves the wait to someone else.
    pub fn delete_command(&self, id: &str, force: bool) -> Command {
        let sub = Subcommand::Delete {
            id: id.into(),
            force,
        };
        let mut cmd = Command::new(&self.binary);
        cmd.args(argv(&self.global, &sub));
        cmd
    }

    /// `runsc exec`. Without `detach` this lasts as long as the process, so no timeout applies.
    pub async fn exec(&self, id: &str, opts: &ExecOpts, io: ProcessIo) -> Result<(), RunscError> {
        let timeout = opts.detach.then_some(self.timeout);
        let sub = Subcommand::Exec {
            id: id.into(),
            process_json: opts.process_json.clone(),
            pid_file: Some(opts.pid_file.clone()),
            internal_pid_file: opts.internal_pid_file.clone(),
            detach: opts.detach,
            console_socket: opts.console_socket.clone(),
        };
        self.run_with_io(sub, io, timeout).await
    }

    /// The pids inside the container (its pid namespace).
    pub async fn ps(&self, id: &str) -> Result<Vec<i32>, RunscError> {
        let out = self.run(Subcommand::Ps { id: id.into() }, None).await?;
        parse_json("ps", &out)
    }

    /// `runsc events --stats`: the sentry's own view (cpu, memory, pids), as JSON.
    pub async fn stats(&self, id: &str) -> Result<serde_json::Value, RunscError> {
        let out = self.run(Subcommand::Stats { id: id.into() }, None).await?;
        parse_json("events", &out)
    }

    pub async fn pause(&self, id: &str) -> Result<(), RunscError> {
        self.run(Subcommand::Pause { id: id.into() }, None)
            .await
            .map(drop)
    }

    pub async fn resume(&self, id: &str) -> Result<(), RunscError> {
        self.run(Subcommand::Resume { id: id.into() }, None)
            .await
            .map(drop)
    }

    /// `runsc wait`: the exit as containerd counts it (code, or 128 + signal). Blocks as long as
    /// the process runs, so no timeout applies. Misses processes that already exited.
    pub async fn wait(&self, id: &str, target: WaitTarget) -> Result<u32, RunscError> {
        let sub = Subcommand::Wait {
            id: id.into(),
            target,
        };
        let out = self.run_inner(sub, None, None).await?;
        let result: WaitResult = parse_json("wait", &out)?;
        Ok(result.exit_status as u32)
    }

    /// `runsc update --resources=-` with `resources` (OCI LinuxResources JSON) on stdin.
    /// [`RunscError::Unsupported`] when the release has no `update`: then the caller writes the
    /// cgroup files itself (`cgroup::update`).
    pub async fn update(&self, id: &str, resources: &[u8]) -> Result<(), RunscError> {
        if !self.features.supports_update() {
            return Err(RunscError::Unsupported("update"));
        }
        self.run(
            Subcommand::Update { id: id.into() },
            Some(resources.to_vec()),
        )
        .await
        .map(drop)
    }

    async fn run(&self, sub: Subcommand, stdin: Option<Vec<u8>>) -> Result<Output, RunscError> {
        self.run_inner(sub, stdin, Some(self.timeout)).await
    }

    async fn run_inner(
        &self,
        sub: Subcommand,
        stdin: Option<Vec<u8>>,
        timeout: Option<Duration>,
    ) -> Result<Output, RunscError> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(argv(&self.global, &sub));
        let timeout = timeout.unwrap_or(Duration::MAX);
        let out = run_piped(&self.reaper, cmd, stdin, timeout, &sub).await?;
        checked(&sub, out)
    }

    /// Spawns runsc with the container's stdio; runsc's own errors go to its log, whose part
    /// from this invocation `LogTail` finds afterwards.
    fn spawn_with_io(
        &self,
        sub: &Subcommand,
        io: ProcessIo,
    ) -> Result<(crate::reaper::Spawned, Option<LogTail>), RunscError> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(argv(&self.global, sub));
        cmd.stdin(io.stdin.map_or_else(Stdio::null, Stdio::from));
        cmd.stdout(io.stdout.map_or_else(Stdio::null, Stdio::from));
        cmd.stderr(io.stderr.map_or_else(Stdio::null, Stdio::from));
        let log = self.global.log.as_deref().map(LogTail::mark);
        // `cmd` (and with it our copies of the container's fds) is dropped inside spawn, so the
        // fifo readers see EOF when the container closes them.
        let spawned = self.reaper.spawn(cmd).map_err(|source| RunscError::Spawn {
            subcommand: sub.name(),
            source,
        })?;
        Ok((spawned, log))
    }

    /// The error for a runsc that exited with `status`, from its log when it has one.
    fn failure(sub: &Subcommand, status: ExitStatus, log: Option<LogTail>) -> RunscError {
        let message = match log {
            Some(tail) => tail.errors_since(),
            None => "runsc's stderr went to the container's stdio and no runsc log is set".into(),
        };
        RunscError::from_failure(sub.name(), sub.id(), status, &message)
    }

    /// `runsc exec` without `--detach`, for an exec without a terminal: the runsc process
    /// itself stays until the process exits and exits with its status. One runsc process per
    /// exec, where `--detach` makes two (runsc re-executes itself as `runsc-exec` to wait, and
    /// that second Go start-up was ~14 ms of a tool call's 55 here). runsc writes the guest pid
    /// to `opts.internal_pid_file` once the process runs; that path is made a FIFO first, so
    /// the write itself says "started" (runsc writes a pid file that is not a regular file in
    /// place). Not for a terminal: runsc hands a pty to `--console-socket` only with
    /// `--detach`.
    pub async fn exec_attached(
        &self,
        id: &str,
        opts: &ExecOpts,
        io: ProcessIo,
    ) -> Result<AttachedExec, RunscError> {
        let sub = Subcommand::Exec {
            id: id.into(),
            process_json: opts.process_json.clone(),
            pid_file: None,
            internal_pid_file: opts.internal_pid_file.clone(),
            detach: false,
            console_socket: None,
        };
        let fifo_path = opts.internal_pid_file.clone().ok_or(RunscError::PidFile {
            path: PathBuf::new(),
            reason: "an attached exec needs an internal pid file".into(),
        })?;
        let io_err = |context| {
            move |source| RunscError::Io {
                subcommand: "exec",
                context,
                source,
            }
        };
        nix::unistd::mkfifo(
            &fifo_path,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .map_err(|e| io_err("making the guest pid FIFO")(io::Error::from(e)))?;
        // Read-write: this end never sees EOF, so readiness means runsc's write arrived. A pid
        // is far below PIPE_BUF, so that one write is read whole.
        let fifo = pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(&fifo_path)
            .map_err(io_err("opening the guest pid FIFO"))?;
        let (spawned, log) = self.spawn_with_io(&sub, io)?;
        let pid = spawned.pid;
        let mut exit = spawned.exit;
        let mut buf = [0u8; 32];
        enum First {
            Written(io::Result<usize>),
            Exited(ExitStatus),
            TimedOut,
        }
        let first = {
            let written = async {
                loop {
                    fifo.readable().await?;
                    match fifo.try_read(&mut buf) {
                        Ok(n) if n > 0 => return Ok(n),
                        Ok(_) => continue,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                        Err(e) => return Err(e),
                    }
                }
            };
            tokio::select! {
                biased;
                n = written => First::Written(n),
                status = &mut exit => First::Exited(status),
                _ = tokio::time::sleep(self.timeout) => First::TimedOut,
            }
        };
        let parse = |n: usize, buf: &[u8]| -> Result<i32, RunscError> {
            let text = String::from_utf8_lossy(&buf[..n]);
            match text.trim().parse::<i32>() {
                Ok(p) if p > 0 => Ok(p),
                _ => Err(RunscError::PidFile {
                    path: fifo_path.clone(),
                    reason: format!("not a pid: {:?}", text.trim()),
                }),
            }
        };
        match first {
            First::Written(n) => {
                let n = n.map_err(io_err("reading the guest pid FIFO"))?;
                Ok(AttachedExec {
                    pid,
                    guest_pid: parse(n, &buf)?,
                    exit: Box::pin(exit),
                })
            }
            // A process that ends at once (`true`) can take runsc with it before this side
            // read: a pid in the FIFO means it started, and `status` is its exit.
            First::Exited(status) => match fifo.try_read(&mut buf) {
                Ok(n) if n > 0 => Ok(AttachedExec {
                    pid,
                    guest_pid: parse(n, &buf)?,
                    exit: Box::pin(std::future::ready(status)),
                }),
                _ => Err(Self::failure(&sub, status, log)),
            },
            First::TimedOut => Err(kill_after_timeout(pid, &sub, self.timeout)),
        }
    }

    async fn run_with_io(
        &self,
        sub: Subcommand,
        io: ProcessIo,
        timeout: Option<Duration>,
    ) -> Result<(), RunscError> {
        let (spawned, log) = self.spawn_with_io(&sub, io)?;
        let pid = spawned.pid;
        let status = match timeout {
            Some(t) => match tokio::time::timeout(t, spawned.exit).await {
                Ok(status) => status,
                Err(_) => return Err(kill_after_timeout(pid, &sub, t)),
            },
            None => spawned.exit.await,
        };
        if status.success() {
            return Ok(());
        }
        Err(Self::failure(&sub, status, log))
    }
}

/// An exec started by [`Runsc::exec_attached`]: runsc's host process (which exits with the
/// process's status), the process's pid inside the sandbox, and that exit.
pub struct AttachedExec {
    pub pid: i32,
    pub guest_pid: i32,
    pub exit: std::pin::Pin<Box<dyn std::future::Future<Output = ExitStatus> + Send>>,
}

/// Reads a pid file written by `runsc create` / `runsc exec` (`--pid-file`).
pub fn read_pid_file(path: &Path) -> Result<i32, RunscError> {
    let err = |reason: String| RunscError::PidFile {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(err(format!("not a pid: {:?}", text.trim()))),
    }
}

fn checked(sub: &Subcommand, out: Output) -> Result<Output, RunscError> {
    if out.status.success() {
        return Ok(out);
    }
    // runsc reports errors on stderr; fall back to stdout if stderr is empty.
    let text = if out.stderr.iter().all(u8::is_ascii_whitespace) {
        String::from_utf8_lossy(&out.stdout).into_owned()
    } else {
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    Err(RunscError::from_failure(
        sub.name(),
        sub.id(),
        out.status,
        &text,
    ))
}

fn parse_json<T: serde::de::DeserializeOwned>(
    subcommand: &'static str,
    out: &Output,
) -> Result<T, RunscError> {
    serde_json::from_slice(&out.stdout).map_err(|source| RunscError::Parse {
        subcommand,
        output: String::from_utf8_lossy(&out.stdout).into_owned(),
        source,
    })
}

fn kill_after_timeout(pid: i32, sub: &Subcommand, timeout: Duration) -> RunscError {
    // SAFETY: signalling a child we spawned and whose exit we have not collected (the reaper
    // still holds its waiter), so the pid cannot have been reused.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    RunscError::Timeout {
        subcommand: sub.name(),
        id: sub.id().map(str::to_string),
        timeout,
    }
}

/// Spawns `cmd` with piped stdout/stderr (and stdin when `stdin` is given), collects both while
/// waiting for the exit.
async fn run_piped(
    reaper: &Reaper,
    mut cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    sub: &Subcommand,
) -> Result<Output, RunscError> {
    let io_err = |context| {
        move |source| RunscError::Io {
            subcommand: sub.name(),
            context,
            source,
        }
    };
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut spawned = reaper.spawn(cmd).map_err(|source| RunscError::Spawn {
        subcommand: sub.name(),
        source,
    })?;
    let pid = spawned.pid;
    let to_receiver = |fd: Option<OwnedFd>| -> Result<pipe::Receiver, RunscError> {
        let fd = fd
            .ok_or_else(|| io::Error::other("pipe missing"))
            .map_err(io_err("pipe"))?;
        pipe::Receiver::from_owned_fd(fd).map_err(io_err("pipe"))
    };
    let mut out = to_receiver(spawned.stdout.take().map(OwnedFd::from))?;
    let mut err = to_receiver(spawned.stderr.take().map(OwnedFd::from))?;
    if let (Some(data), Some(child_stdin)) = (stdin, spawned.stdin.take()) {
        let mut tx = pipe::Sender::from_owned_fd(OwnedFd::from(child_stdin))
            .map_err(io_err("stdin pipe"))?;
        tx.write_all(&data).await.map_err(io_err("writing stdin"))?;
        // Dropping `tx` closes stdin: runsc reads to EOF.
    }
    let collect = async {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut exit = spawned.exit;
        let (mut out_open, mut err_open) = (true, true);
        loop {
            tokio::select! {
                status = &mut exit => {
                    // Everything written before the exit is in the pipes now. Read what is there
                    // without waiting for EOF: a forked helper may hold the write end open.
                    drain(&mut out, &mut stdout, out_open).map_err(io_err("reading stdout"))?;
                    drain(&mut err, &mut stderr, err_open).map_err(io_err("reading stderr"))?;
                    return Ok(Output { status, stdout, stderr });
                }
                r = out.readable(), if out_open => {
                    r.map_err(io_err("reading stdout"))?;
                    out_open = read_some(&mut out, &mut stdout).map_err(io_err("reading stdout"))?;
                }
                r = err.readable(), if err_open => {
                    r.map_err(io_err("reading stderr"))?;
                    err_open = read_some(&mut err, &mut stderr).map_err(io_err("reading stderr"))?;
                }
            }
        }
    };
    match tokio::time::timeout(timeout, collect).await {
        Ok(result) => result,
        Err(_) => Err(kill_after_timeout(pid, sub, timeout)),
    }
}

/// Reads what is available; returns false at EOF.
fn read_some(rx: &mut pipe::Receiver, buf: &mut Vec<u8>) -> io::Result<bool> {
    let mut chunk = [0u8; 8192];
    match rx.try_read(&mut chunk) {
        Ok(0) => Ok(false),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(true),
        Err(e) => Err(e),
    }
}

fn drain(rx: &mut pipe::Receiver, buf: &mut Vec<u8>, open: bool) -> io::Result<()> {
    if !open {
        return Ok(());
    }
    // Not `try_read`: tokio answers WouldBlock from its cached readiness until the driver has
    // seen the event, which loses output written just before the exit. Read the (non-blocking)
    // fd directly until it is empty.
    let fd = rx.as_raw_fd();
    let mut chunk = [0u8; 8192];
    loop {
        // SAFETY: reading into a local buffer of the given length from an fd we own.
        let n = unsafe { libc::read(fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        match n {
            0 => return Ok(()),
            n if n > 0 => buf.extend_from_slice(&chunk[..n as usize]),
            _ => {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
        }
    }
}

/// The part of runsc's log file written by one invocation.
struct LogTail {
    path: PathBuf,
    offset: u64,
}

impl LogTail {
    fn mark(path: &Path) -> LogTail {
        let offset = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        LogTail {
            path: path.to_path_buf(),
            offset,
        }
    }

    /// The error lines appended since [`LogTail::mark`]: `msg` of JSON lines at level error (or
    /// warning, where runsc puts some fatal messages), else the raw text lines.
    fn errors_since(&self) -> String {
        let mut text = String::new();
        let read = std::fs::File::open(&self.path).and_then(|mut f| {
            f.seek(SeekFrom::Start(self.offset))?;
            f.read_to_string(&mut text)
        });
        if let Err(e) = read {
            return format!("cannot read runsc log {}: {e}", self.path.display());
        }
        error_lines(&text)
    }
}

fn error_lines(text: &str) -> String {
    #[derive(Deserialize)]
    struct Line {
        msg: String,
        level: String,
    }
    let mut errors = Vec::new();
    let mut raw = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Line>(line) {
            Ok(l) if l.level == "error" || l.level == "fatal" => errors.push(l.msg),
            Ok(_) => {}
            Err(_) => raw.push(line.to_string()),
        }
    }
    if errors.is_empty() {
        // Text format: keep the last lines, where the fatal message is.
        let start = raw.len().saturating_sub(5);
        raw[start..].join("\n")
    } else {
        errors.join("\n")
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
