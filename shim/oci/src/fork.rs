//! The processes runsc-hardened leaves behind for the engine to wait on: `create`'s guard and a
//! detached `exec`'s guard. Each is forked at the start of its call, while the process has one
//! thread (no runtime yet): no exec, no loading, no start-up of its own on the way. The child
//! waits for the parent's go (one line, with what it needs to know), does its part and
//! answers on a second pipe: `ok ...` once what the engine waits for exists, `error REASON`
//! otherwise. A parent that gives up before the go leaves the child an empty pipe: it exits.
//! A helper that will not live on (no go, a failed answer, killed) is waited for before the
//! call returns, so an engine that sees the call fail sees no process of it left either.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use super::error::{OciError, Result};
use gvisor_hardened_core::sandbox::host_process::HostProcess;

/// What the guard tells `create` on its ready pipe: one line.
pub const READY: &str = "ok";
pub const FAILED: &str = "error";

pub(crate) fn report(mut ready: File, line: &str) {
    // `create` may already be gone (killed): nothing left to tell.
    let _ = writeln!(ready, "{}", line.replace('\n', " "));
}

/// What `fork_helper` returns in each of the two processes.
pub enum Fork {
    /// In the call's process: the helper, waiting for the go.
    Parent(Forked),
    /// In the helper, once it is done: the exit code the engine sees.
    Child(u8),
}

/// The forked helper as its parent holds it. Dropped before it was let go for good
/// ([`Forked::go`] answered `ok`), it waits for the helper to exit.
pub struct Forked {
    pid: i32,
    /// Taken right after the fork, while the helper is our unreaped child: the reaper may
    /// reap it later, and the fd still names it, never a process that took its number.
    process: Option<HostProcess>,
    go: Option<File>,
    ready: File,
    released: bool,
}

/// How long a helper that will not live on may take to end (its own clean-up included).
const HELPER_EXIT: Duration = Duration::from_secs(30);

/// The start of the line that lets the helper go.
const GO: &str = "go";

/// Forks; the child runs `child(payload, ready)` once told to go and returns its exit code.
/// Call it while this process has one thread: the child carries on running arbitrary code.
pub fn fork_helper(child: impl FnOnce(&str, File) -> u8) -> Result<Fork> {
    let (go_read, go_write) = pipe()?;
    let (ready_read, ready_write) = pipe()?;
    // SAFETY: no other thread exists in this process (the caller's contract).
    match unsafe { libc::fork() } {
        -1 => Err(OciError::io("fork", "the guard")(
            std::io::Error::last_os_error(),
        )),
        0 => {
            drop((go_write, ready_read));
            let code = match wait_for_go(go_read) {
                Some(payload) => child(&payload, File::from(ready_write)),
                None => 0,
            };
            Ok(Fork::Child(code))
        }
        pid => Ok(Fork::Parent(Forked {
            pid,
            process: HostProcess::open(pid).ok(),
            go: Some(File::from(go_write)),
            ready: File::from(ready_read),
            released: false,
        })),
    }
}

/// The payload of the go; `None` when the parent gave up (closed the pipe).
fn wait_for_go(go: OwnedFd) -> Option<String> {
    let mut line = String::new();
    BufReader::new(File::from(go)).read_line(&mut line).ok()?;
    let rest = line.strip_suffix('\n')?.strip_prefix(GO)?;
    Some(rest.strip_prefix(' ').unwrap_or(rest).to_string())
}

impl Forked {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Tells the helper to go with `payload` (one line) and waits for its answer: what follows
    /// `ok`, after which the helper lives on. `what` names the container's state for errors.
    pub fn go(&mut self, payload: &str, what: &Path) -> Result<String> {
        let pid = self.pid;
        let mut go = self
            .go
            .take()
            .ok_or_else(|| OciError::Guard(format!("the guard (pid {pid}) was already let go")))?;
        go.write_all(format!("{GO} {}\n", payload.replace('\n', " ")).as_bytes())
            .map_err(OciError::io("telling the guard to go", what))?;
        // Our copy of the ready pipe's write end went at the fork: the read ends when the
        // helper answers or exits.
        let mut answer = String::new();
        BufReader::new(&self.ready)
            .read_line(&mut answer)
            .map_err(OciError::io("reading the guard's answer", what))?;
        let answer = answer.trim();
        if let Some(rest) = answer.strip_prefix(READY) {
            if rest.is_empty() || rest.starts_with(' ') {
                self.released = true;
                return Ok(rest.trim().to_string());
            }
        }
        // The helper has removed what it made; it exits on its own (waited for on drop).
        Err(OciError::Guard(match answer.strip_prefix(FAILED) {
            Some(reason) => reason.trim().to_string(),
            None => format!("the guard (pid {pid}) exited without an answer"),
        }))
    }

    /// Ends a helper that was let go but must not live on (a later step of the call failed):
    /// SIGKILL, then the wait of [`Drop`].
    pub fn kill(mut self) {
        if let Some(p) = &self.process {
            let _ = p.signal(libc::SIGKILL);
        }
        self.released = false;
    }
}

impl Drop for Forked {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        // An empty go pipe ends a helper still waiting for it.
        self.go = None;
        let Some(p) = &self.process else { return };
        if !p.wait_exited(HELPER_EXIT) {
            log::warn!(
                "the guard (pid {}) has not exited {HELPER_EXIT:?} after its call failed",
                self.pid
            );
        }
    }
}

/// A pipe whose ends are not inherited by what either process execs (runsc).
fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(OciError::io("pipe", "the guard's pipes")(
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: both fds were just made and are owned here.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
