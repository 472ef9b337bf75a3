//! The container's standard streams: the engine hands them to runsc-hardened, which passes
//! them on to runsc and then lets go of them.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};

use crate::oci::error::{OciError, Result};
use crate::oci::state::StateDir;
use crate::output_limit::{self, Interposer, OutputBudget};
use crate::runsc::client::ProcessIo;

/// The container's output budget when its policy bounds output (`max_bytes`) or has an idle
/// timeout: in the state directory's budget file, which the init's guard makes (`create`) and
/// each exec's guard maps, so all of them draw from one budget. `None`: nothing to interpose.
pub(crate) fn budget(
    state: &StateDir,
    max_bytes: Option<u64>,
    idle_timeout: bool,
    create: bool,
) -> Result<Option<OutputBudget>> {
    if max_bytes.is_none() && !idle_timeout {
        return Ok(None);
    }
    let path = state.output_budget_file();
    OutputBudget::in_file(&path, max_bytes, create)
        .map(Some)
        .map_err(OciError::io("output budget", path))
}

/// With a budget, the process's stdout and stderr (the engine's) go through the sandbox
/// core's copy (`output_limit::bound`): runsc gets pipes, and the returned copy moves their
/// bytes on to the engine's streams against the budget. stdin goes to runsc as it is.
pub(crate) fn bound(
    io: ProcessIo,
    budget: Option<&OutputBudget>,
) -> Result<(ProcessIo, Option<Interposer>)> {
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
