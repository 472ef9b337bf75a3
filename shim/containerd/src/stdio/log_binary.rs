//! containerd's `binary://` stdio URI: the client names a logging program instead of fifos
//! (`nerdctl run -d`, `nerdctl compose up`, `ctr run --log-uri binary:///...`), and the shim
//! starts it, as containerd's runc shim does (`pkg/process/io.go`, `NewBinaryIO`):
//!
//! - `binary:///path/to/logger?key=value` runs `/path/to/logger key value` (each query pair as
//!   two arguments), with only `CONTAINER_ID` and `CONTAINER_NAMESPACE` in its environment and
//!   /dev/null as its own stdio;
//! - fd 3 and fd 4 are the read ends of the process's stdout and stderr, fd 5 a pipe the logger
//!   closes (or writes to) once it is ready: the process starts only after that, so no output
//!   is written before anybody reads it;
//! - the logger sees EOF when the process's last writer is gone and exits on its own; the exit is
//!   reported only after it did (bounded by [`LOGGER_EXIT_DEADLINE`]), so the log is complete
//!   when the client reads it after the exit.
//!
//! The logger runs on the host, as the shim's user, outside the sandbox. The program is the
//! client's choice, as every task API request is: whoever may call containerd can already run
//! any host program (a runc container, a privileged one). What the logger reads is the
//! sandboxed process's output, the same bytes a client's fifo would get.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use super::StdioError;

/// The scheme containerd's clients use for a logging program.
pub const SCHEME: &str = "binary://";

/// How long the logger may take to say it is ready (the runc shim waits without a bound).
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the exit report waits for the logger to drain and exit (the runc shim's
/// `binaryIOProcTermTimeout` is 12 s).
pub const LOGGER_EXIT_DEADLINE: Duration = Duration::from_secs(12);

/// A parsed `binary://` URI: the program and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

fn bad(uri: &str, reason: &str) -> StdioError {
    StdioError::LogUri {
        uri: uri.to_string(),
        reason: reason.to_string(),
    }
}

/// `%XX` and, in the query, `+` decoded as Go's `url.Parse` and `url.ParseQuery` do.
fn decode(s: &str, plus_is_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

impl LoggerCommand {
    /// Parses `binary:///abs/path[?k=v&...]`. A host part, a relative path or a bad escape is
    /// refused; query pairs keep their order (Go's map gives them in any order).
    pub fn parse(uri: &str) -> Result<LoggerCommand, StdioError> {
        let rest = uri
            .strip_prefix(SCHEME)
            .ok_or_else(|| bad(uri, "not a binary:// URI"))?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if !path.starts_with('/') {
            return Err(bad(
                uri,
                "the logger must be an absolute path with no host part",
            ));
        }
        let program = decode(path, false).ok_or_else(|| bad(uri, "bad escape in the path"))?;
        let mut args = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            args.push(decode(k, true).ok_or_else(|| bad(uri, "bad escape in the query"))?);
            args.push(decode(v, true).ok_or_else(|| bad(uri, "bad escape in the query"))?);
        }
        Ok(LoggerCommand {
            program: PathBuf::from(program),
            args,
        })
    }
}

/// The shim's side of a started logger: the write ends the process's stdout and stderr go to.
pub struct LoggerPipes {
    pub stdout: File,
    pub stderr: File,
}

fn pipe() -> Result<(OwnedFd, OwnedFd), StdioError> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills both descriptors on success; we take ownership right away.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(StdioError::Pipe(std::io::Error::last_os_error()));
    }
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The command that runs the logger with `fds` (stdout, stderr, ready) as its fds 3, 4, 5.
/// The caller spawns it (through the reaper) and then drops its copies of `fds`.
pub fn command(
    logger: &LoggerCommand,
    container_id: &str,
    namespace: &str,
    fds: [RawFd; 3],
) -> Command {
    let mut cmd = Command::new(&logger.program);
    cmd.args(&logger.args)
        .env_clear()
        .env("CONTAINER_ID", container_id)
        .env("CONTAINER_NAMESPACE", namespace)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: dup2 is async-signal-safe. The sources are close-on-exec copies numbered above 5
    // (see `start`), so no dup2 overwrites a source another one still needs; dup2 clears the
    // close-on-exec flag of the copy it makes.
    unsafe {
        cmd.pre_exec(move || {
            for (target, source) in (3..).zip(fds) {
                if libc::dup2(source, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

/// A close-on-exec duplicate numbered 10 or above, out of the way of fds 3-5.
fn high(fd: &OwnedFd) -> Result<OwnedFd, StdioError> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor we own, or -1.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
    if n < 0 {
        return Err(StdioError::Pipe(std::io::Error::last_os_error()));
    }
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Starts the logger through `spawn` (which returns once it runs) and waits until it is ready.
pub fn start(
    uri: &str,
    container_id: &str,
    namespace: &str,
    spawn: impl FnOnce(Command) -> std::io::Result<()>,
) -> Result<LoggerPipes, StdioError> {
    let logger = LoggerCommand::parse(uri)?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (ready_r, ready_w) = pipe()?;
    let child_fds = [high(&out_r)?, high(&err_r)?, high(&ready_w)?];
    drop((out_r, err_r, ready_w));
    let raw = [0, 1, 2].map(|i| child_fds[i].as_raw_fd());
    spawn(command(&logger, container_id, namespace, raw)).map_err(|e| StdioError::LogUri {
        uri: uri.to_string(),
        reason: format!("starting {}: {e}", logger.program.display()),
    })?;
    // Only the logger may hold the read ends and the ready pipe's write end now.
    drop(child_fds);
    wait_ready(&ready_r, READY_TIMEOUT).map_err(|reason| StdioError::LogUri {
        uri: uri.to_string(),
        reason,
    })?;
    Ok(LoggerPipes {
        stdout: File::from(out_w),
        stderr: File::from(err_w),
    })
}

/// Waits until the ready pipe is readable: a byte, or EOF once the logger closed its end (or
/// died, which then shows in its exit; the runc shim does not tell the two apart either).
fn wait_ready(ready: &OwnedFd, timeout: Duration) -> Result<(), String> {
    let mut pfd = libc::pollfd {
        fd: ready.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: one pollfd we own.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return Ok(());
        }
        if n == 0 {
            return Err(format!("the logger was not ready within {timeout:?}"));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waiting for the logger: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn nerdctls_uri_parses_into_program_and_argument_pair() {
        let l = LoggerCommand::parse(
            "binary:///usr/local/bin/nerdctl?_NERDCTL_INTERNAL_LOGGING=%2Fvar%2Flib%2Fnerdctl%2F1935db59",
        )
        .unwrap();
        assert_eq!(l.program, PathBuf::from("/usr/local/bin/nerdctl"));
        assert_eq!(
            l.args,
            ["_NERDCTL_INTERNAL_LOGGING", "/var/lib/nerdctl/1935db59"]
        );
    }

    #[test]
    fn query_pairs_keep_their_order_and_decode_like_go() {
        let l = LoggerCommand::parse("binary:///opt/my%20logger?a=1&b=x+y&c").unwrap();
        assert_eq!(l.program, PathBuf::from("/opt/my logger"));
        assert_eq!(l.args, ["a", "1", "b", "x y", "c", ""]);
    }

    #[test]
    fn uris_that_name_no_absolute_local_program_are_refused() {
        for uri in [
            "binary://host/bin/logger",
            "binary://",
            "binary:///bin/x?a=%zz",
            "binary:///bin/%",
            "file:///var/log/x",
        ] {
            assert!(
                matches!(LoggerCommand::parse(uri), Err(StdioError::LogUri { .. })),
                "{uri}"
            );
        }
    }

    /// The protocol end to end with a shell as the logger: fds 3-5, the environment, the ready
    /// signal before the first write, EOF once the shim's write ends are gone.
    #[test]
    fn a_logger_gets_both_streams_on_fds_3_and_4_after_signalling_ready() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("log");
        let script = dir.path().join("logger");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nexec 5>&-\n{{ echo \"$1=$2 $CONTAINER_ID/$CONTAINER_NAMESPACE ${{HOME:-nohome}}\"; /bin/cat <&3; /bin/cat <&4; }} > {}\n",
                out.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        // Unit tests share one process and its one reaper: every child goes through it.
        let reaper = gvisor_hardened_core::reaper::shared_for_tests();
        let mut exit = None;
        let uri = format!("{SCHEME}{}?k=v", script.display());
        let pipes = start(&uri, "c1", "ns1", |cmd| {
            exit = Some(reaper.spawn(cmd).map_err(std::io::Error::other)?.exit);
            Ok(())
        })
        .unwrap();
        use std::io::Write;
        (&pipes.stdout).write_all(b"to stdout\n").unwrap();
        (&pipes.stderr).write_all(b"to stderr\n").unwrap();
        drop(pipes);
        assert!(exit.unwrap().wait_blocking().success());
        let mut got = String::new();
        File::open(&out).unwrap().read_to_string(&mut got).unwrap();
        assert_eq!(got, "k=v c1/ns1 nohome\nto stdout\nto stderr\n");
    }

    #[test]
    fn a_logger_that_cannot_start_fails_with_the_uri() {
        let reaper = gvisor_hardened_core::reaper::shared_for_tests();
        let err = start("binary:///nonexistent/logger", "c", "n", |cmd| {
            reaper.spawn(cmd).map(drop).map_err(std::io::Error::other)
        })
        .err()
        .unwrap();
        assert!(
            err.to_string().contains("binary:///nonexistent/logger"),
            "{err}"
        );
    }
}
