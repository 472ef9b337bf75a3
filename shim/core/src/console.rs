//! The console socket: a listening unix socket runsc connects to, to hand over the master of the
//! terminal it made for a process (`--console-socket`). Both front ends take terminals this way:
//! the containerd shim copies the master to containerd's fifos, runsc-hardened's guard relays it
//! to the engine's own console socket.

use std::fs::File;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error("console socket {path}: {source}")]
    Socket {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("runsc did not send the terminal within {0:?}")]
    Timeout(Duration),
}

/// A listening socket runsc connects to, to send the terminal master.
pub struct ConsoleSocket {
    listener: UnixListener,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl ConsoleSocket {
    /// Socket paths are limited to 108 bytes, so they live in a short private directory under
    /// `parent` rather than in the (possibly deep) bundle.
    pub fn new(parent: &Path) -> Result<Self, ConsoleError> {
        let err = |source| ConsoleError::Socket {
            path: parent.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(parent).map_err(err)?;
        let dir = tempfile::Builder::new()
            .prefix("c")
            .tempdir_in(parent)
            .map_err(err)?;
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).map_err(|source| ConsoleError::Socket {
            path: path.clone(),
            source,
        })?;
        Ok(ConsoleSocket {
            listener,
            path,
            _dir: dir,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Receives the master descriptor. runsc sends it before `create`/`exec` returns, so by the
    /// time this is called the connection is already queued; the timeout only guards against a
    /// runsc that exited without sending.
    pub fn receive(self, timeout: Duration) -> Result<File, ConsoleError> {
        let err = |source| ConsoleError::Socket {
            path: self.path.clone(),
            source,
        };
        self.listener.set_nonblocking(false).map_err(err)?;
        let fd = self.listener.as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid descriptor.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        if ready == 0 {
            return Err(ConsoleError::Timeout(timeout));
        }
        let (stream, _) = self.listener.accept().map_err(err)?;
        let mut buf = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut cmsg = nix::cmsg_space!([RawFd; 1]);
        let msg = recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|e| err(e.into()))?;
        for c in msg.cmsgs().map_err(|e| err(e.into()))? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                if let Some(&master) = fds.first() {
                    // SAFETY: SCM_RIGHTS installed a fresh descriptor in our table.
                    let file = unsafe { File::from(OwnedFd::from_raw_fd(master)) };
                    for &extra in &fds[1..] {
                        unsafe { libc::close(extra) };
                    }
                    return Ok(file);
                }
            }
        }
        Err(err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "no descriptor in the console message",
        )))
    }
}
