//! Running a command to completion with a deadline, capturing its output.
//!
//! Every `ctr` call goes through here: a hung `ctr` (a shim that never answers, a task that
//! never exits) must fail the test with what it printed so far, not hang `cargo test`.

use std::ffi::OsStr;
use std::fmt;
use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use std::os::unix::process::ExitStatusExt;

use crate::error::{HarnessError, Result};

/// How long to wait for the output pipes to close after the process exited. Only a grandchild
/// that inherited the pipes keeps them open longer; we stop reading then rather than hang.
const PIPE_GRACE: Duration = Duration::from_secs(5);

/// The result of a finished command.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// The command line, for messages.
    pub command: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    /// The exit code, or `128 + signal` when the command was killed by a signal (the shell's
    /// convention, which is also what `ctr run` reports for a killed task).
    pub fn code(&self) -> i32 {
        match (self.status.code(), self.status.signal()) {
            (Some(code), _) => code,
            (None, Some(sig)) => 128 + sig,
            (None, None) => -1,
        }
    }

    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// `Ok(self)` if the command succeeded, otherwise [`HarnessError::CommandFailed`] with
    /// the full output.
    pub fn checked(self) -> Result<Self> {
        if self.success() {
            Ok(self)
        } else {
            Err(HarnessError::CommandFailed {
                command: self.command,
                status: self.status.to_string(),
                stdout: self.stdout,
                stderr: self.stderr,
            })
        }
    }

    /// stdout without the trailing newline(s).
    pub fn stdout_trimmed(&self) -> &str {
        self.stdout.trim_end_matches(['\n', '\r'])
    }
}

impl fmt::Display for CommandOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` -> {}\nstdout: {}\nstderr: {}",
            self.command, self.status, self.stdout, self.stderr
        )
    }
}

/// Renders a command line for messages.
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

fn read_all(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}

fn collect(rx: &mpsc::Receiver<Vec<u8>>) -> String {
    rx.recv_timeout(PIPE_GRACE)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// Runs `cmd` with `stdin` (or /dev/null), captures stdout and stderr, and kills it with
/// SIGKILL if it has not exited after `timeout`.
pub fn output_with_deadline(
    cmd: &mut Command,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
) -> Result<CommandOutput> {
    let command = describe(cmd);
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| HarnessError::Spawn {
        program: cmd.get_program().to_string_lossy().into_owned(),
        source,
    })?;

    if let (Some(data), Some(mut pipe)) = (stdin, child.stdin.take()) {
        // A writer thread: the child may not read stdin before it fills its stdout pipe.
        thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    let stdout = read_all(child.stdout.take().expect("stdout is piped"));
    let stderr = read_all(child.stderr.take().expect("stderr is piped"));

    let Some(status) = wait_or_kill(child, timeout) else {
        return Err(HarnessError::Timeout {
            command,
            timeout,
            stdout: collect(&stdout),
            stderr: collect(&stderr),
        });
    };
    let status = status.map_err(|source| HarnessError::Spawn {
        program: command.clone(),
        source,
    })?;
    Ok(CommandOutput {
        command,
        status,
        stdout: collect(&stdout),
        stderr: collect(&stderr),
    })
}

/// Waits for `child` up to `timeout`. Past it, the child is SIGKILLed and reaped, and the
/// answer is `None`.
pub(crate) fn wait_or_kill(
    mut child: std::process::Child,
    timeout: Duration,
) -> Option<std::io::Result<std::process::ExitStatus>> {
    let pid = child.id() as libc::pid_t;
    let (status_tx, status_rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = status_tx.send(child.wait());
    });
    match status_rx.recv_timeout(timeout) {
        Ok(status) => Some(status),
        Err(_) => {
            // SAFETY: plain kill(2). The waiter thread has not reaped the child (no status was
            // sent), so the pid still names it.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = status_rx.recv();
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_captures_stdout_stderr_and_exit_code() {
        let out = output_with_deadline(
            Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout, "out\n");
        assert_eq!(out.stderr, "err\n");
        assert_eq!(out.code(), 3);
        assert!(out.checked().is_err());
    }

    #[test]
    fn stdin_is_fed_to_the_command() {
        let out = output_with_deadline(
            &mut Command::new("cat"),
            Some(b"hello".to_vec()),
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.stdout, "hello");
    }

    #[test]
    fn a_command_killed_by_a_signal_reports_128_plus_the_signal() {
        let out = output_with_deadline(
            Command::new("sh").args(["-c", "kill -9 $$"]),
            None,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(out.code(), 137);
    }

    #[test]
    fn a_command_past_its_deadline_is_killed_and_reported() {
        let err = output_with_deadline(
            Command::new("sh").args(["-c", "echo started; exec sleep 30"]),
            None,
            Duration::from_millis(300),
        )
        .unwrap_err();
        match err {
            HarnessError::Timeout { stdout, .. } => assert_eq!(stdout, "started\n"),
            other => panic!("expected a timeout, got {other}"),
        }
    }
}

/// A command run to completion under a deadline: what `ctr` and the engines' builders share.
/// Add arguments with [`arg`](Self::arg) / [`args`](Self::args).
#[derive(Debug)]
pub struct BoundedCommand {
    cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl BoundedCommand {
    pub(crate) fn new(cmd: Command, timeout: Duration) -> Self {
        BoundedCommand {
            cmd,
            stdin: None,
            timeout,
        }
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.cmd.arg(arg);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    /// Sets an environment variable for the command itself.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Bytes written to the command's stdin (`ctr run`/`exec` without `-t` forwards them to
    /// the task); without this stdin is /dev/null.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// Replaces the default deadline.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command line, for messages.
    pub fn describe(&self) -> String {
        describe(&self.cmd)
    }

    /// Runs to completion and returns the output whatever the exit status.
    pub fn output(mut self) -> Result<CommandOutput> {
        output_with_deadline(&mut self.cmd, self.stdin, self.timeout)
    }

    /// Runs to completion; a non-zero exit is an error carrying the output.
    pub fn checked(self) -> Result<CommandOutput> {
        self.output()?.checked()
    }

    /// Runs to completion on a fresh pseudo-terminal (needed for `-t`, `exec -it`), typing
    /// `input` into it. The output is everything written to the terminal, stdout and stderr
    /// together, as the terminal wrote it (`\r` before line ends, typed input echoed);
    /// `stdin()` is ignored.
    pub fn output_in_pty(mut self, input: impl AsRef<[u8]>) -> Result<CommandOutput> {
        crate::pty::output_in_pty(&mut self.cmd, input.as_ref(), self.timeout)
    }

    /// Starts the command without waiting, for interactive or long-running uses (`ctr run
    /// -t`, `ctr events`). The caller owns the child: configure stdio on
    /// [`command_mut`](Self::command_mut) first, and kill/wait it.
    pub fn spawn(mut self) -> Result<Child> {
        let program = self.cmd.get_program().to_string_lossy().into_owned();
        self.cmd
            .spawn()
            .map_err(|source| HarnessError::Spawn { program, source })
    }

    /// The underlying command, for what the builder does not cover (stdio of `spawn`).
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.cmd
    }
}
