//! The container's standard streams: the engine hands them to runsc-hardened, which passes
//! them on to runsc and then lets go of them.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::terminal::Relay;
use crate::error::{OciError, Result};
use crate::state::StateDir;
use gvisor_hardened_core::output_limit::{self, Interposer, OutputBudget, OutputReport};
use gvisor_hardened_core::runsc::client::ProcessIo;

/// The streams the engine gave this process (the container's, or an exec's), for runsc.
pub(crate) trait EngineStdio {
    fn stdio(&self) -> Result<ProcessIo>;
    /// Once runsc holds the streams: ours would keep the engine's readers from the end.
    fn let_go_of_stdio(&self);
}

/// This process's own standard streams, as the engine gave them.
pub(crate) struct HostStdio;

impl EngineStdio for HostStdio {
    fn stdio(&self) -> Result<ProcessIo> {
        container_stdio()
    }

    fn let_go_of_stdio(&self) {
        detach_stdio()
    }
}

/// The container's output budget when its policy bounds output (`max_bytes`) or has an idle
/// timeout: in the state directory's budget file, which the init's guard makes (`create`) and
/// each exec's guard maps, so all of them draw from one budget. `None`: nothing to interpose.
pub(crate) fn budget(
    state: &StateDir,
    max_bytes: Option<u64>,
    idle_timeout: bool,
    create: bool,
) -> Result<Option<OutputBudget>> {
    if !OutputBudget::needed(max_bytes, idle_timeout) {
        return Ok(None);
    }
    let path = state.output_budget_file();
    OutputBudget::in_file(&path, max_bytes, create)
        .map(Some)
        .map_err(OciError::io("output budget", path))
}

/// A guarded process's output under the container's budget: its streams through the core's
/// copy, or its terminal through the relay (`terminal.rs`); nothing without a budget. The
/// guard of the container's init and each exec's guard set it up and report it the same way.
pub(crate) struct Guarded {
    budget: Option<OutputBudget>,
    /// The relay's console socket, until runsc sent its terminal there.
    relay: Option<Relay>,
    copy: Option<Interposer>,
    /// Without a copy: our duplicate of the engine's stderr (stdout when there is none), held
    /// so that a note can follow the process's last byte before the engine sees the end.
    note_sink: Option<File>,
}

impl Guarded {
    /// Before runsc runs the process: returns what runsc gets, the stdio (the engine's, or
    /// pipes the copy drains) and the console socket to name (the relay's in place of the
    /// engine's `console` under a budget).
    pub(crate) fn open<E: EngineStdio + ?Sized>(
        engine: &E,
        budget: Option<OutputBudget>,
        console: Option<&Path>,
    ) -> Result<(Guarded, ProcessIo, Option<PathBuf>)> {
        let relay = match (console, &budget) {
            (Some(_), Some(_)) => Some(Relay::new()?),
            _ => None,
        };
        let (io, copy) = match relay {
            Some(_) => (engine.stdio()?, None),
            None => bound(engine.stdio()?, budget.as_ref())?,
        };
        // A terminal without a budget goes to runsc whole: there is nothing to write a note to.
        let note_sink = match (&copy, &relay, console) {
            (None, None, None) => io
                .stderr
                .as_ref()
                .or(io.stdout.as_ref())
                .and_then(|fd| fd.try_clone().ok())
                .map(File::from),
            _ => None,
        };
        let socket = match &relay {
            Some(relay) => Some(relay.socket().to_path_buf()),
            None => console.map(Path::to_path_buf),
        };
        let guarded = Guarded {
            budget,
            relay,
            copy,
            note_sink,
        };
        Ok((guarded, io, socket))
    }

    /// Once runsc made the process: a relayed terminal is taken and a terminal of the relay's
    /// goes to the engine's `console`.
    pub(crate) fn attach(&mut self, console: Option<&Path>) -> Result<()> {
        if let (Some(relay), Some(engine), Some(budget)) =
            (self.relay.take(), console, &self.budget)
        {
            self.copy = Some(relay.start(engine, budget)?);
        }
        Ok(())
    }

    /// The container's budget, for the idle watch.
    pub(crate) fn budget(&self) -> Option<&OutputBudget> {
        self.budget.as_ref()
    }

    /// Once the process ended: what the copy delivered, waited for at most
    /// [`output_limit::DRAIN_DEADLINE`], with `note` after its last byte; `None` when nothing
    /// was copied (the engine's streams went to runsc as they are; the note follows all the
    /// same, on our duplicate of them).
    pub(crate) async fn report(&mut self, who: &str, note: Option<String>) -> Option<OutputReport> {
        // Dropped on the way out either way: the engine then sees the end of the stream.
        let sink = self.note_sink.take();
        let Some(copy) = self.copy.take() else {
            if let (Some(sink), Some(note)) = (sink, note) {
                if let Err(e) = output_limit::write_note_after_unseen_output(&sink, &note) {
                    log::warn!("{who}: writing why it ended to its log: {e}");
                }
            }
            return None;
        };
        Some(output_limit::drain(copy, output_limit::DRAIN_DEADLINE, who, note).await)
    }

    /// Whether the output is being copied.
    #[cfg(test)]
    pub(crate) fn copies(&self) -> bool {
        self.copy.is_some()
    }
}

/// With a budget, the process's stdout and stderr (the engine's) go through the sandbox
/// core's copy (`output_limit::bound`): runsc gets pipes, and the returned copy moves their
/// bytes on to the engine's streams against the budget. stdin goes to runsc as it is.
fn bound(io: ProcessIo, budget: Option<&OutputBudget>) -> Result<(ProcessIo, Option<Interposer>)> {
    let Some(budget) = budget else {
        return Ok((io, None));
    };
    let (stdout, stderr, copy) =
        output_limit::bound(budget, io.stdout.map(File::from), io.stderr.map(File::from)).map_err(
            OciError::io("interposing on", "the engine's stdout and stderr"),
        )?;
    let io = ProcessIo {
        stdin: io.stdin,
        stdout: stdout.map(Into::into),
        stderr: stderr.map(Into::into),
    };
    Ok((io, copy))
}

/// Our stdio (the container's, from the engine) as runsc's.
pub(crate) fn container_stdio() -> Result<ProcessIo> {
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

pub(crate) fn detach_stdio() {
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
