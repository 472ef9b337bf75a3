//! A process's standard streams: containerd's fifos, handed to runsc, and the console socket.
//!
//! stdout/stderr fifos are opened O_RDWR (never blocks, whether or not the client has opened its
//! end yet) and passed to runsc as its own stdout/stderr, which runsc hands to the sandboxed
//! process: output flows from the sandbox to the client with no copy in the shim, so it is
//! complete and in order. The shim drops its copies right after runsc has them, or the client
//! would never see EOF.
//!
//! stdin is forwarded through a pipe, because end-of-input is an explicit event (CloseIO): the
//! shim reads the fifo while holding a write end of it open itself, so the client closing its end
//! early does not end the stream; CloseIO drops the shim's write end and the sandbox sees EOF.
//!
//! With a terminal, runsc creates the pty and sends its master over a unix socket
//! (`--console-socket`); the shim copies between the master and the fifos and resizes it.
//!
//! When the policy bounds output or has an idle timeout, the process's [`Streams`] carry the
//! container's [`OutputBudget`] and the shim interposes (`output_limit`): runsc gets pipes, and
//! a copy thread per stream moves their bytes to the fifos against the budget, counting what
//! the idle detector needs. A terminal's output, which the shim copies anyway, goes through the
//! same copy: one stream (the pty merges stdout and stderr), the marker line on the terminal.
//! Without a budget nothing of this happens and the fifos go to runsc as above.
//!
//! A client may name a logging program (`binary://`, `log_binary`) instead of fifos: its pipes
//! then take the fifos' place, with or without a budget, and the exit waits for it to finish.

mod log_binary;

pub use log_binary::{LoggerCommand, LOGGER_EXIT_DEADLINE, SCHEME as BINARY_LOG_SCHEME};

use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

pub use gvisor_hardened_core::console::{ConsoleError, ConsoleSocket};
use gvisor_hardened_core::output_limit::{self, Interposer, OutputBudget, StreamPair};

#[derive(Debug, thiserror::Error)]
pub enum StdioError {
    #[error("opening {what} fifo {path}: {source}")]
    Fifo {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{what} {path:?} is not a fifo")]
    NotAFifo { what: &'static str, path: String },
    #[error(transparent)]
    Console(#[from] ConsoleError),
    #[error("pipe: {0}")]
    Pipe(std::io::Error),
    #[error("starting the output copy: {0}")]
    Interpose(std::io::Error),
    #[error("resizing the terminal: {0}")]
    Resize(std::io::Error),
    #[error("log URI {uri}: {reason}")]
    LogUri { uri: String, reason: String },
}

impl StdioError {
    /// The client named a stream that cannot be one (missing, or not a fifo): its request is
    /// wrong, not the shim.
    pub fn is_bad_request(&self) -> bool {
        match self {
            StdioError::NotAFifo { .. } => true,
            StdioError::Fifo { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            // The client named a logger that is no absolute program, or that does not start.
            StdioError::LogUri { .. } => true,
            _ => false,
        }
    }
}

/// How long runsc may take to send a terminal's master after the command that made it.
const CONSOLE_TIMEOUT: Duration = Duration::from_secs(10);

/// The streams runsc gets when it starts a process (create, exec, a pod container's start), in
/// one place for all three. With a terminal: a console socket for runsc to send the pty master
/// to, and no streams. Without: the client's fifos and a stdin pipe, unless `streams_now` is
/// false (a pod's later container gets its streams at start, not at create).
pub fn for_runsc(
    io: &Streams,
    paths: &StdioPaths,
    console_dir: &Path,
    streams_now: bool,
) -> Result<(Option<ConsoleSocket>, RunscStdio), StdioError> {
    if paths.terminal {
        Ok((
            Some(ConsoleSocket::new(console_dir)?),
            RunscStdio::default(),
        ))
    } else if streams_now {
        Ok((None, io.open_pipes(paths)?))
    } else {
        Ok((None, RunscStdio::default()))
    }
}

/// After the runsc command returned: receives the terminal's master, if one was asked for, and
/// wires it to the client's fifos.
pub async fn take_console(
    console: Option<ConsoleSocket>,
    io: &Streams,
    paths: &StdioPaths,
) -> Result<(), StdioError> {
    let Some(console) = console else {
        return Ok(());
    };
    let path = console.path().to_path_buf();
    let master = tokio::task::spawn_blocking(move || console.receive(CONSOLE_TIMEOUT))
        .await
        .map_err(|e| ConsoleError::Socket {
            path,
            source: std::io::Error::other(e.to_string()),
        })??;
    io.attach_console(master, paths)
}

/// The stream paths containerd gave for a process (empty = not attached).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StdioPaths {
    pub stdin: String,
    pub stdout: String,
    pub stderr: String,
    pub terminal: bool,
}

/// Opens a fifo containerd created, refusing anything else at that path: a client that names a
/// regular file or a device would otherwise have the root-owned shim write to it.
fn open_fifo(what: &'static str, path: &str, read: bool, write: bool) -> Result<File, StdioError> {
    let err = |source| StdioError::Fifo {
        what,
        path: path.to_string(),
        source,
    };
    let file = OpenOptions::new()
        .read(read)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOFOLLOW)
        .open(path)
        .map_err(err)?;
    let meta = file.metadata().map_err(err)?;
    use std::os::unix::fs::FileTypeExt;
    if !meta.file_type().is_fifo() {
        return Err(StdioError::NotAFifo {
            what,
            path: path.to_string(),
        });
    }
    set_blocking(&file).map_err(err)?;
    Ok(file)
}

fn set_blocking(f: &impl AsRawFd) -> std::io::Result<()> {
    // SAFETY: plain fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        if flags < 0 || libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn pipe() -> Result<(File, File), StdioError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills both descriptors on success; we take ownership right away.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(StdioError::Pipe(std::io::Error::last_os_error()));
    }
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// What runsc receives as its own stdin/stdout/stderr; `None` is /dev/null.
pub use gvisor_hardened_core::runsc::client::ProcessIo as RunscStdio;

/// Who a `binary://` logger is started for, and how: through the runtime (the shim's reaper
/// must own every child).
#[derive(Clone)]
pub struct LogContext {
    pub container_id: String,
    pub namespace: String,
    pub runtime: std::sync::Arc<dyn gvisor_hardened_core::runtime::SandboxRuntime>,
}

/// The shim's side of a process's streams, alive as long as the process.
#[derive(Default)]
pub struct Streams {
    /// Our write end of the stdin fifo: dropping it (CloseIO) lets EOF through.
    stdin_holder: Mutex<Option<File>>,
    console: Mutex<Option<Arc<File>>>,
    /// Threads copying terminal output to the client; joined before the exit is announced.
    /// (stdin forwarders are not here: they may wait on a client forever.)
    output_copiers: Mutex<Vec<JoinHandle<()>>>,
    /// The container's output budget, when the shim interposes on its output; set once,
    /// before the streams are opened.
    budget: OnceLock<OutputBudget>,
    /// The copy of stdout/stderr (or of the terminal) against the budget, until the exit path
    /// takes it to wait for its report.
    interposer: Mutex<Option<Interposer>>,
    /// Set once (a container's init), before the streams are opened: a `binary://` stdout may
    /// start a logger. Without it such a URI is refused.
    logging: OnceLock<LogContext>,
    /// The exit of the logger started for this process, waited for before the exit is reported.
    logger_exit: Mutex<Option<gvisor_hardened_core::runtime::ExitWatch>>,
    /// A terminal size asked for before the terminal existed (locked after `console`).
    pending_size: Mutex<Option<(u32, u32)>>,
    /// Set once (a container's init), before the streams are opened: keep a way to say why
    /// the runtime ended the process after its last byte ([`Streams::wait_output_then_note`]).
    notes: OnceLock<()>,
    /// Without an interposed copy, when `notes` is set: our duplicate of the client's stderr
    /// (stdout when there is none, as with a terminal), held until the exit path wrote its
    /// note, so the client sees the end of the stream only after it.
    note_sink: Mutex<Option<File>>,
}

impl Streams {
    /// From now on this process's output goes through the shim, against `budget`. Call it
    /// before the streams are opened; the first budget stays.
    pub fn bound_by(&self, budget: Option<&OutputBudget>) {
        if let Some(b) = budget {
            let _ = self.budget.set(b.clone());
        }
    }

    /// The exit path may add a line after this process's output (a container's init: why the
    /// runtime ended it). Call it before the streams are opened.
    pub fn with_notes(&self) {
        let _ = self.notes.set(());
    }

    /// Keeps a duplicate of `client` for the note, when notes are asked for.
    fn keep_for_note(&self, client: Option<&File>) {
        if self.notes.get().is_none() {
            return;
        }
        if let Some(dup) = client.and_then(|f| f.try_clone().ok()) {
            *self.note_sink.lock().unwrap() = Some(dup);
        }
    }

    /// A `binary://` stdout of this process starts its logger for `ctx`. Call it before the
    /// streams are opened; the first context stays.
    pub fn log_with(&self, ctx: LogContext) {
        let _ = self.logging.set(ctx);
    }

    /// Starts the logger `stdout` names, if it is a `binary://` URI; its pipes replace both
    /// fifos (the stderr path is not read then, as in containerd's runc shim).
    fn start_logger(&self, stdout: &str) -> Result<Option<log_binary::LoggerPipes>, StdioError> {
        if !stdout.starts_with(log_binary::SCHEME) {
            return Ok(None);
        }
        let ctx = self.logging.get().ok_or_else(|| StdioError::LogUri {
            uri: stdout.to_string(),
            reason: "a logging program is only started for a container's own process, not an exec"
                .into(),
        })?;
        let pipes = log_binary::start(stdout, &ctx.container_id, &ctx.namespace, |cmd| {
            let exit = ctx
                .runtime
                .spawn_logger(cmd)
                .map_err(std::io::Error::other)?;
            *self.logger_exit.lock().unwrap() = Some(exit);
            Ok(())
        })?;
        Ok(Some(pipes))
    }

    /// The interposed output copy, for the exit path to wait on (once).
    pub fn take_output(&self) -> Option<Interposer> {
        self.interposer.lock().unwrap().take()
    }

    /// Prepares non-terminal streams; returns what runsc must get.
    pub fn open_pipes(&self, paths: &StdioPaths) -> Result<RunscStdio, StdioError> {
        let mut runsc = RunscStdio::default();
        // Where each output stream goes: the client's fifo, or the logger's pipe.
        let (mut log_out, mut log_err) = match self.start_logger(&paths.stdout)? {
            Some(p) => (Some(p.stdout), Some(p.stderr)),
            None => (None, None),
        };
        let logged = log_out.is_some();
        let mut to_client = |what: &'static str, path: &str| -> Result<Option<File>, StdioError> {
            match (what, logged) {
                ("stdout", true) => Ok(log_out.take()),
                (_, true) => Ok(log_err.take()),
                _ if path.is_empty() => Ok(None),
                _ => open_fifo(what, path, true, true).map(Some),
            }
        };
        match self.budget.get() {
            None => {
                let stdout = to_client("stdout", &paths.stdout)?;
                let stderr = to_client("stderr", &paths.stderr)?;
                self.keep_for_note(stderr.as_ref().or(stdout.as_ref()));
                runsc.stdout = stdout.map(Into::into);
                runsc.stderr = stderr.map(Into::into);
            }
            Some(budget) => {
                // runsc writes to pipes; the copy moves their bytes to the fifos.
                let (out_w, err_w, copy) = output_limit::bound(
                    budget,
                    to_client("stdout", &paths.stdout)?,
                    to_client("stderr", &paths.stderr)?,
                )
                .map_err(StdioError::Interpose)?;
                if let Some(copy) = copy {
                    *self.interposer.lock().unwrap() = Some(copy);
                }
                runsc.stdout = out_w.map(Into::into);
                runsc.stderr = err_w.map(Into::into);
            }
        }
        if !paths.stdin.is_empty() {
            let (read_end, write_end) = pipe()?;
            self.forward_stdin(&paths.stdin, write_end)?;
            runsc.stdin = Some(read_end.into());
        }
        Ok(runsc)
    }

    fn forward_stdin(&self, fifo: &str, mut sink: File) -> Result<(), StdioError> {
        let mut source = open_fifo("stdin", fifo, true, false)?;
        let holder = open_fifo("stdin", fifo, false, true)?;
        *self.stdin_holder.lock().unwrap() = Some(holder);
        std::thread::spawn(move || {
            // Ends when every writer (client and holder) is gone, or the sandbox closed its end;
            // dropping `sink` then gives the sandboxed process EOF.
            let _ = std::io::copy(&mut source, &mut sink);
        });
        Ok(())
    }

    /// CloseIO: end of input.
    pub fn close_stdin(&self) {
        self.stdin_holder.lock().unwrap().take();
    }

    /// Wires a terminal whose master runsc sent over the console socket.
    pub fn attach_console(&self, master: File, paths: &StdioPaths) -> Result<(), StdioError> {
        let master = Arc::new(master);
        if !paths.stdout.is_empty() {
            // A terminal has one stream: the logger's stderr pipe closes unused.
            let mut out = match self.start_logger(&paths.stdout)? {
                Some(pipes) => pipes.stdout,
                None => open_fifo("stdout", &paths.stdout, true, true)?,
            };
            let mut m = clone_file(&master)?;
            match self.budget.get() {
                Some(budget) => {
                    let pair = StreamPair {
                        from_sandbox: m,
                        to_client: out,
                    };
                    let copy = output_limit::interpose(budget, Some(pair), None)
                        .map_err(StdioError::Interpose)?;
                    *self.interposer.lock().unwrap() = Some(copy);
                }
                None => {
                    self.keep_for_note(Some(&out));
                    self.output_copiers
                        .lock()
                        .unwrap()
                        .push(std::thread::spawn(move || {
                            // Ends with EIO once the sandbox closed the terminal's last slave
                            // descriptor.
                            let _ = std::io::copy(&mut m, &mut out);
                        }));
                }
            }
        }
        if !paths.stdin.is_empty() {
            let mut source = open_fifo("stdin", &paths.stdin, true, false)?;
            let holder = open_fifo("stdin", &paths.stdin, false, true)?;
            *self.stdin_holder.lock().unwrap() = Some(holder);
            let mut m = clone_file(&master)?;
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut source, &mut m);
            });
        }
        let mut console = self.console.lock().unwrap();
        if let Some((width, height)) = self.pending_size.lock().unwrap().take() {
            set_size(&master, width, height)?;
        }
        *console = Some(master);
        Ok(())
    }

    /// Resizes the terminal. `has_terminal`: the process was created with one. Until runsc sent
    /// it (an exec's terminal exists from Start on; `nerdctl exec -t` resizes between Exec and
    /// Start), the size is kept and applied when it arrives.
    pub fn resize(&self, width: u32, height: u32, has_terminal: bool) -> Result<(), StdioError> {
        let console = self.console.lock().unwrap();
        match console.as_ref() {
            Some(master) => set_size(master, width, height),
            None if has_terminal => {
                *self.pending_size.lock().unwrap() = Some((width, height));
                Ok(())
            }
            None => Err(StdioError::Resize(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "process has no terminal",
            ))),
        }
    }

    /// Waits until the output copiers drained what the process wrote (terminal output), so the
    /// exit event does not overtake the last bytes; then writes `note` after them where the
    /// shim holds the client's end without a copy (an interposed copy writes its own).
    pub fn wait_output_then_note(&self, note: Option<&str>) {
        let handles: Vec<_> = self.output_copiers.lock().unwrap().drain(..).collect();
        for h in handles {
            let _ = h.join();
        }
        // Dropped here either way: the client (and a logger) then sees the end of the stream.
        let sink = self.note_sink.lock().unwrap().take();
        if let (Some(sink), Some(note)) = (sink, note) {
            if let Err(e) = output_limit::write_note_after_unseen_output(&sink, note) {
                log::warn!("writing why the process ended to its output: {e}");
            }
        }
        // A logger exits once the process's last writer is gone and it wrote what it read.
        // Called from a blocking thread of the runtime, which may block on a future.
        let exit = self.logger_exit.lock().unwrap().take();
        if let Some(exit) = exit {
            let waited = tokio::runtime::Handle::current()
                .block_on(async { tokio::time::timeout(LOGGER_EXIT_DEADLINE, exit).await });
            if waited.is_err() {
                log::warn!(
                    "the logging program did not exit within {LOGGER_EXIT_DEADLINE:?} of its process; reporting the exit anyway"
                );
            }
        }
    }

    /// Releases everything the shim holds for this process.
    pub fn close(&self) {
        self.close_stdin();
        self.console.lock().unwrap().take();
    }
}

fn set_size(master: &File, width: u32, height: u32) -> Result<(), StdioError> {
    let size = libc::winsize {
        ws_row: height as u16,
        ws_col: width as u16,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize struct we own.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
        return Err(StdioError::Resize(std::io::Error::last_os_error()));
    }
    Ok(())
}

fn clone_file(f: &File) -> Result<File, StdioError> {
    f.try_clone().map_err(StdioError::Pipe)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::stat::Mode;
    use std::io::{Read, Write};

    fn fifo(dir: &Path, name: &str) -> String {
        let p = dir.join(name);
        nix::unistd::mkfifo(&p, Mode::from_bits_truncate(0o600)).unwrap();
        p.to_str().unwrap().to_string()
    }

    #[test]
    fn regular_file_in_place_of_a_fifo_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("stdout");
        std::fs::write(&p, "").unwrap();
        let paths = StdioPaths {
            stdout: p.to_str().unwrap().into(),
            ..Default::default()
        };
        assert!(matches!(
            Streams::default().open_pipes(&paths),
            Err(StdioError::NotAFifo { what: "stdout", .. })
        ));
    }

    #[test]
    fn missing_fifo_is_a_clear_error() {
        let paths = StdioPaths {
            stderr: "/nonexistent/stderr".into(),
            ..Default::default()
        };
        let err = Streams::default().open_pipes(&paths).err().unwrap();
        assert!(
            err.to_string().contains("stderr fifo /nonexistent/stderr"),
            "{err}"
        );
    }

    #[test]
    fn stdin_reaches_the_process_and_eof_follows_close_io() {
        let dir = tempfile::tempdir().unwrap();
        let stdin = fifo(dir.path(), "stdin");
        let paths = StdioPaths {
            stdin: stdin.clone(),
            ..Default::default()
        };
        let io = Streams::default();
        let runsc = io.open_pipes(&paths).unwrap();
        // The "client" writes and closes its end; the holder keeps the stream open.
        let mut client = OpenOptions::new().write(true).open(&stdin).unwrap();
        client.write_all(b"hello\n").unwrap();
        drop(client);
        io.close_stdin();
        // Stand-in for the sandboxed process reading its stdin until EOF. (No child process:
        // other tests in this binary run the reaper, which would steal its exit status.)
        let mut out = String::new();
        File::from(runsc.stdin.unwrap())
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "hello\n");
    }

    #[test]
    fn stdout_fifo_is_handed_over_and_reaches_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let stdout = fifo(dir.path(), "stdout");
        let mut client = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&stdout)
            .unwrap();
        let paths = StdioPaths {
            stdout: stdout.clone(),
            ..Default::default()
        };
        let runsc = Streams::default().open_pipes(&paths).unwrap();
        // Stand-in for the sandboxed process writing to its stdout.
        File::from(runsc.stdout.unwrap())
            .write_all(b"out\n")
            .unwrap();
        let mut buf = [0u8; 16];
        let n = client.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"out\n");
    }

    #[test]
    fn a_size_asked_for_before_the_terminal_exists_is_applied_when_it_arrives() {
        let pty = nix::pty::openpty(None, None).unwrap();
        let io = Streams::default();
        assert!(io.resize(80, 24, false).is_err());
        io.resize(132, 43, true).unwrap();
        io.attach_console(File::from(pty.master), &StdioPaths::default())
            .unwrap();
        let mut size: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ fills a winsize struct we own.
        assert_eq!(
            unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) },
            0
        );
        assert_eq!((size.ws_col, size.ws_row), (132, 43));
        // Once it exists, a resize applies at once.
        io.resize(100, 30, true).unwrap();
        unsafe { libc::ioctl(pty.slave.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
        assert_eq!((size.ws_col, size.ws_row), (100, 30));
    }
}
