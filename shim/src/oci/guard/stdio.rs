//! The container's standard streams: the engine hands them to runsc-hardened, which passes
//! them on to runsc and then lets go of them.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::oci::error::{OciError, Result};
use crate::runsc::client::ProcessIo;

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
