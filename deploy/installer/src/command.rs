//! Running host commands: `containerd config default|dump` and the restart command.

use std::path::Path;
use std::process::Command;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum CommandError {
    #[error("`{cmd}` could not be started: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("`{cmd}` failed ({status}): {stderr}")]
    Failed {
        cmd: String,
        status: String,
        stderr: String,
    },
    #[error("empty command")]
    Empty,
}

/// Splits a command line on whitespace (no shell, no quoting: the configured commands are
/// fixed argument lists such as `nsenter -t 1 -m -- systemctl restart containerd`).
pub fn split(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

/// Runs argv and returns its stdout; a non-zero exit is an error carrying stderr.
pub fn run(argv: &[String]) -> Result<String, CommandError> {
    let (prog, args) = argv.split_first().ok_or(CommandError::Empty)?;
    let cmd = argv.join(" ");
    let out = Command::new(prog)
        .args(args)
        .output()
        .map_err(|source| CommandError::Spawn {
            cmd: cmd.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(CommandError::Failed {
            cmd,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The host's containerd binary, reached through the host-exec prefix so its version (and
/// therefore its merge semantics) is the node's, not the installer image's.
#[derive(Debug, Clone)]
pub struct Containerd {
    pub host_exec: Vec<String>,
    pub binary: String,
}

impl Containerd {
    fn argv(&self, args: &[&str]) -> Vec<String> {
        let mut v = self.host_exec.clone();
        v.push(self.binary.clone());
        v.extend(args.iter().map(|s| s.to_string()));
        v
    }

    /// `containerd config default`: the starting point for a node without a config.
    pub fn config_default(&self) -> Result<String, CommandError> {
        run(&self.argv(&["config", "default"]))
    }

    /// `containerd --config <host path> config dump`: the config after imports are merged.
    pub fn config_dump(&self, config: &Path) -> Result<String, CommandError> {
        let config = config.to_string_lossy();
        run(&self.argv(&["--config", &config, "config", "dump"]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_makes_an_argument_list() {
        assert_eq!(
            split(" nsenter -t 1 -m --  systemctl restart containerd"),
            vec![
                "nsenter",
                "-t",
                "1",
                "-m",
                "--",
                "systemctl",
                "restart",
                "containerd"
            ]
        );
    }

    #[test]
    fn failed_command_carries_stderr() {
        let err = run(&["sh".into(), "-c".into(), "echo oops >&2; exit 3".into()]).unwrap_err();
        assert!(err.to_string().contains("oops"), "{err}");
        assert!(err.to_string().contains("exit status: 3"), "{err}");
    }

    #[test]
    fn missing_program_is_a_spawn_error() {
        let err = run(&["/nonexistent/prog".into()]).unwrap_err();
        assert!(matches!(err, CommandError::Spawn { .. }));
    }

    #[test]
    fn config_dump_puts_the_prefix_first() {
        let c = Containerd {
            host_exec: split("nsenter -t 1 -m --"),
            binary: "containerd".into(),
        };
        assert_eq!(
            c.argv(&["--config", "/c", "config", "dump"]).join(" "),
            "nsenter -t 1 -m -- containerd --config /c config dump"
        );
    }
}
