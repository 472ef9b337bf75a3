//! `ctr` invocations bound to one private containerd.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::process::{describe, output_with_deadline, CommandOutput};

/// Default deadline of a `ctr` call. Generous: a cold runsc sandbox on a loaded 2-core machine
/// takes seconds, not minutes; anything longer is a hang worth failing on.
pub const DEFAULT_CTR_TIMEOUT: Duration = Duration::from_secs(120);

/// A `ctr` command with `--address` and `--namespace` already set (and
/// `CONTAINERD_SNAPSHOTTER`, which `ctr run` and `ctr images import` read). Add the
/// subcommand and its arguments with [`arg`](Self::arg) / [`args`](Self::args).
#[derive(Debug)]
pub struct CtrCommand {
    cmd: Command,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
}

impl CtrCommand {
    pub(crate) fn new(
        path_env: &OsStr,
        address: &Path,
        namespace: &str,
        snapshotter: &str,
    ) -> Self {
        let mut cmd = Command::new("ctr");
        cmd.env("PATH", path_env)
            .env("CONTAINERD_SNAPSHOTTER", snapshotter)
            .arg("--address")
            .arg(address)
            .arg("--namespace")
            .arg(namespace);
        CtrCommand {
            cmd,
            stdin: None,
            timeout: DEFAULT_CTR_TIMEOUT,
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

    /// Sets an environment variable for `ctr` itself.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Bytes written to `ctr`'s stdin (forwarded to the task when `ctr run`/`exec` is used
    /// without `-t`); without this stdin is /dev/null.
    pub fn stdin(mut self, data: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(data.into());
        self
    }

    /// Replaces the default deadline ([`DEFAULT_CTR_TIMEOUT`]).
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

    /// Runs to completion on a fresh pseudo-terminal (needed for `-t`), typing `input` into
    /// it. The output is everything written to the terminal, stdout and stderr together, as
    /// the terminals wrote it (`\r` before line ends, typed input echoed); `stdin()` is ignored.
    pub fn output_in_pty(mut self, input: impl AsRef<[u8]>) -> Result<CommandOutput> {
        crate::pty::output_in_pty(&mut self.cmd, input.as_ref(), self.timeout)
    }

    /// Starts `ctr` without waiting, for interactive or long-running uses (`ctr run -t`,
    /// `ctr events`). The caller owns the child: configure stdio on
    /// [`command_mut`](Self::command_mut) first, and kill/wait it.
    pub fn spawn(mut self) -> Result<Child> {
        self.cmd.spawn().map_err(|source| HarnessError::Spawn {
            program: "ctr".into(),
            source,
        })
    }

    /// The underlying command, for what the builder does not cover (stdio of `spawn`).
    pub fn command_mut(&mut self) -> &mut Command {
        &mut self.cmd
    }
}
