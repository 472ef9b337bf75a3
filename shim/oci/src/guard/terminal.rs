//! A terminal (`-t`) under an output bound or an idle timeout. runsc would send its terminal's
//! master straight to the engine's console socket, where nothing of ours could count or cut
//! the output. So the guard (or an exec's guard) gives runsc a console socket of its own, takes
//! the master, makes a second terminal whose master it sends to the engine, and relays between
//! the two: the container's output through the sandbox core's copy against the budget (as the
//! shim copies a terminal to containerd's fifo), the engine's input as it is, and the window
//! size the engine sets on its terminal on to the container's.
//!
//! The engine resizes its own master; that reaches only the foreground process of the
//! terminal, which the relay is not. So the size is read from the relay's side every
//! [`SIZE_POLL`] and copied on when it changed: a resize lands within that much.
//!
//! The relay's end of the second terminal is raw (no echo, no line editing, no newline
//! translation): it only moves bytes; the container's own terminal does what a terminal does.

use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use nix::sys::termios;

use crate::error::{OciError, Result};
use gvisor_hardened_core::console::ConsoleSocket;
use gvisor_hardened_core::output_limit::{self, Interposer, OutputBudget, StreamPair};

/// How long runsc may take to send the terminal once `create` or `exec` returned (it sends it
/// before it returns; this only covers a runsc that exited without).
const RECEIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often the engine's window size is looked at.
const SIZE_POLL: Duration = Duration::from_millis(200);

/// The relay's console socket, for runsc, until its terminal arrives.
pub(crate) struct Relay {
    socket: ConsoleSocket,
}

impl Relay {
    /// A console socket for runsc in a private (0700, random-named) directory under the
    /// system's temporary directory: a socket's path must fit in 108 bytes, which an engine's
    /// state directory under `--root` often does not leave room for. Removed once runsc's
    /// terminal arrived.
    pub(crate) fn new() -> Result<Relay> {
        Self::in_dir(&std::env::temp_dir())
    }

    fn in_dir(dir: &Path) -> Result<Relay> {
        let socket = ConsoleSocket::new(dir).map_err(|e| OciError::Invalid {
            what: "the terminal relay",
            reason: e.to_string(),
        })?;
        Ok(Relay { socket })
    }

    /// Where runsc sends its terminal.
    pub(crate) fn socket(&self) -> &Path {
        self.socket.path()
    }

    /// Once runsc made its terminal: takes it, hands the engine a terminal of the relay's on
    /// `engine_socket`, and relays between them, the output against `budget`. Returns the
    /// output copy, for the exit to wait on.
    pub(crate) fn start(self, engine_socket: &Path, budget: &OutputBudget) -> Result<Interposer> {
        let failed = |what: &'static str| {
            move |e: std::io::Error| OciError::Io {
                what,
                path: PathBuf::from("the terminal relay"),
                source: e,
            }
        };
        let container = self
            .socket
            .receive(RECEIVE_TIMEOUT)
            .map_err(|e| OciError::Invalid {
                what: "the terminal relay",
                reason: e.to_string(),
            })?;
        let pty = nix::pty::openpty(None, None)
            .map_err(|e| failed("making the engine's terminal")(e.into()))?;
        let ours = File::from(pty.slave);
        let mut raw =
            termios::tcgetattr(ours.as_fd()).map_err(|e| failed("reading its mode")(e.into()))?;
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(ours.as_fd(), termios::SetArg::TCSANOW, &raw)
            .map_err(|e| failed("making it raw")(e.into()))?;
        // The engine's terminal starts at the container's size.
        if let Some(size) = window_size(&container) {
            set_window_size(&ours, &size);
        }
        send_terminal(engine_socket, &File::from(pty.master)).map_err(failed(
            "sending the terminal to the engine's console socket",
        ))?;

        let input = (
            ours.try_clone().map_err(failed("dup"))?,
            container.try_clone().map_err(failed("dup"))?,
        );
        std::thread::Builder::new()
            .name("terminal-input".into())
            .spawn(move || {
                let (mut from_engine, mut to_container) = input;
                // Ends when the engine closes its terminal or the container's is gone.
                let _ = std::io::copy(&mut from_engine, &mut to_container);
            })
            .map_err(failed("starting the input relay"))?;
        let sizes = (
            ours.try_clone().map_err(failed("dup"))?,
            container.try_clone().map_err(failed("dup"))?,
        );
        std::thread::Builder::new()
            .name("terminal-size".into())
            .spawn(move || follow_window_size(&sizes.0, &sizes.1))
            .map_err(failed("starting the size relay"))?;
        output_limit::interpose(
            budget,
            Some(StreamPair {
                from_sandbox: container,
                to_client: ours,
            }),
            None,
        )
        .map_err(failed("starting the output copy"))
    }
}

/// Copies the size of `engines` (the relay's end of the engine's terminal) to `container`'s
/// terminal whenever it changes, until the engine closed its end.
fn follow_window_size(engines: &File, container: &File) {
    let mut last = window_size(engines);
    loop {
        let mut pfd = libc::pollfd {
            fd: engines.as_raw_fd(),
            events: 0,
            revents: 0,
        };
        // SAFETY: poll on one descriptor we own; only POLLHUP (the engine closed its master)
        // can wake it before the timeout.
        unsafe { libc::poll(&mut pfd, 1, SIZE_POLL.as_millis() as i32) };
        if pfd.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return;
        }
        let now = window_size(engines);
        if now.is_some() && !same_size(&now, &last) {
            if let Some(size) = &now {
                set_window_size(container, size);
            }
            last = now;
        }
    }
}

fn same_size(a: &Option<libc::winsize>, b: &Option<libc::winsize>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a.ws_row, a.ws_col) == (b.ws_row, b.ws_col),
        (None, None) => true,
        _ => false,
    }
}

fn window_size(terminal: &File) -> Option<libc::winsize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills a winsize struct we own.
    let read = unsafe { libc::ioctl(terminal.as_raw_fd(), libc::TIOCGWINSZ, &mut size) };
    (read == 0).then_some(size)
}

fn set_window_size(terminal: &File, size: &libc::winsize) {
    // SAFETY: TIOCSWINSZ reads a winsize struct we own; a failure leaves the old size.
    unsafe { libc::ioctl(terminal.as_raw_fd(), libc::TIOCSWINSZ, size) };
}

/// Sends `master` over `socket`, as runsc sends its terminal to a console socket.
fn send_terminal(socket: &Path, master: &File) -> std::io::Result<()> {
    let stream = UnixStream::connect(socket)?;
    let fds = [master.as_raw_fd()];
    sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(b"terminal")],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixListener;

    use super::*;

    /// One read of what `terminal` has within `wait_ms`: `None` when nothing came in that
    /// time, `Some(empty)` when the descriptor ended.
    fn read_ready(terminal: &mut File, wait_ms: i32) -> Option<Vec<u8>> {
        let mut pfd = libc::pollfd {
            fd: terminal.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one descriptor the test owns.
        if unsafe { libc::poll(&mut pfd, 1, wait_ms) } <= 0 {
            return None;
        }
        let mut buf = [0u8; 4096];
        Some(match terminal.read(&mut buf) {
            Ok(n) => buf[..n].to_vec(),
            Err(_) => Vec::new(),
        })
    }

    /// Reads until `done` holds for what arrived (or the descriptor ends); the bound only
    /// keeps a broken relay from hanging the test.
    fn read_until(terminal: &mut File, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done(&got) && std::time::Instant::now() < deadline {
            match read_ready(terminal, 50) {
                None => continue,
                Some(bytes) if bytes.is_empty() => break,
                Some(bytes) => got.extend_from_slice(&bytes),
            }
        }
        got
    }

    /// What is already waiting on the descriptor, without waiting for more.
    fn read_pending(terminal: &mut File) -> Vec<u8> {
        let mut got = Vec::new();
        while let Some(bytes) = read_ready(terminal, 0).filter(|b| !b.is_empty()) {
            got.extend_from_slice(&bytes);
        }
        got
    }

    /// Real terminals, no root: runsc's part played by the test (a terminal whose master it
    /// sends to the relay's socket, whose slave is "the container"), the engine's by a console
    /// socket of the test's.
    #[test]
    fn a_relayed_terminal_is_bounded_takes_input_and_follows_the_engines_size() {
        let dir = tempfile::tempdir().unwrap();
        let relay = Relay::in_dir(dir.path()).unwrap();
        let container = nix::pty::openpty(None, None).unwrap();
        let container_master = File::from(container.master);
        let mut inside = File::from(container.slave);
        let mut raw = termios::tcgetattr(inside.as_fd()).unwrap();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(inside.as_fd(), termios::SetArg::TCSANOW, &raw).unwrap();
        send_terminal(relay.socket(), &container_master).unwrap();
        drop(container_master);
        let engine = ConsoleSocket::new(dir.path()).unwrap();
        let engine_path = engine.path().to_path_buf();
        let received = std::thread::spawn(move || engine.receive(RECEIVE_TIMEOUT).unwrap());
        let budget = OutputBudget::new(Some(10));
        let copy = relay.start(&engine_path, &budget).unwrap();
        let mut engines = received.join().unwrap();

        inside.write_all(b"0123456789abcdef").unwrap();
        let notice = b"output limit of 10 bytes";
        let shown = read_until(&mut engines, |got| {
            got.windows(notice.len()).any(|w| w == notice)
        });
        let shown = String::from_utf8_lossy(&shown);
        assert!(
            shown.starts_with("0123456789") && shown.contains("output limit of 10 bytes"),
            "{shown:?}"
        );
        assert!(!shown.contains("abcdef"), "{shown:?}");

        engines.write_all(b"typed").unwrap();
        assert_eq!(read_until(&mut inside, |got| got.len() >= 5), b"typed");

        let size = libc::winsize {
            ws_row: 33,
            ws_col: 101,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        set_window_size(&engines, &size);
        let mut seen = None;
        for _ in 0..50 {
            seen = window_size(&inside).map(|s| (s.ws_row, s.ws_col));
            if seen == Some((33, 101)) {
                break;
            }
            std::thread::sleep(SIZE_POLL / 4);
        }
        assert_eq!(seen, Some((33, 101)));

        // The container's terminal closes: the copy ends and counts what it delivered.
        drop(inside);
        let report = copy.wait();
        assert_eq!(report.output_bytes, 10);
        assert!(report.output_truncated);
        // Everything the copy ever delivered has arrived by now: nothing past the bound.
        let rest = read_pending(&mut engines);
        assert!(
            !String::from_utf8_lossy(&rest).contains("abcdef"),
            "{rest:?}"
        );
        drop(engines);
    }

    #[test]
    fn no_terminal_from_runsc_is_an_error_naming_the_relay() {
        let dir = tempfile::tempdir().unwrap();
        let relay = Relay::in_dir(dir.path()).unwrap();
        // Nobody listens there: the relay must not get that far.
        let nowhere = dir.path().join("engine.sock");
        let _ = UnixListener::bind(&nowhere);
        // runsc connected and sent no descriptor.
        let stream = UnixStream::connect(relay.socket()).unwrap();
        stream.shutdown(std::net::Shutdown::Both).unwrap();
        let Err(e) = relay.start(&nowhere, &OutputBudget::new(Some(10))) else {
            panic!("relayed without a terminal");
        };
        assert!(e.to_string().contains("terminal relay"), "{e}");
    }
}
