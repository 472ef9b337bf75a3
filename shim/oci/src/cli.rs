//! runsc-hardened's command line as data: the runc-compatible calls Docker (through
//! containerd's runc shim) and Podman (through conmon) make, parsed by hand into
//! [`Invocation`]. No logic beyond reading the words; the table test at the bottom holds every
//! argv seen from both engines (`shared/notes/docker-podman.md`).
//!
//! Flag syntax is Go's (runc's urfave/cli): `--name value`, `--name=value`, one or two dashes,
//! booleans bare or `=true|false`. Global flags come before the subcommand, the subcommand's
//! flags before its positional arguments.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub global: Global,
    pub command: Command,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Global {
    /// Where runsc-hardened keeps its per-container state (`<root>/<id>/`).
    pub root: Option<PathBuf>,
    /// Where errors go for the engine to show (`{"level":"error","msg":...}` lines).
    pub log: Option<PathBuf>,
    pub log_format: LogFormat,
    pub systemd_cgroup: bool,
    /// Ours: the policy file (`runtimeArgs` in daemon.json, `--runtime-flag policy=...`).
    pub policy: Option<PathBuf>,
}

/// Where `update --resources` reads the LinuxResources JSON from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Stdin,
    File(PathBuf),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Version,
    Create {
        id: String,
        bundle: PathBuf,
        pid_file: Option<PathBuf>,
        console_socket: Option<PathBuf>,
        preserve_fds: u32,
    },
    Start {
        id: String,
    },
    State {
        id: String,
    },
    Kill {
        id: String,
        signal: i32,
        all: bool,
    },
    Delete {
        id: String,
        force: bool,
    },
    Exec {
        id: String,
        process: PathBuf,
        detach: bool,
        pid_file: Option<PathBuf>,
        console_socket: Option<PathBuf>,
        /// Asked for and dropped: runsc 20221219 refuses it, and the process file's `terminal`
        /// already says the same.
        tty: bool,
        preserve_fds: u32,
    },
    Ps {
        id: String,
        json: bool,
    },
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    Update {
        id: String,
        resources: Source,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    #[error("no subcommand given")]
    NoSubcommand,
    #[error("unknown subcommand {0:?}")]
    UnknownSubcommand(String),
    #[error("{command}: unknown flag {flag:?}")]
    UnknownFlag { command: String, flag: String },
    #[error("{command}: flag --{flag} needs a value")]
    MissingValue { command: String, flag: String },
    #[error("{command}: --{flag}: bad value {value:?}")]
    BadValue {
        command: String,
        flag: String,
        value: String,
    },
    #[error("{command}: expected {expected}, got {got:?}")]
    Arguments {
        command: String,
        expected: &'static str,
        got: Vec<String>,
    },
    #[error("{command}: {what} is not supported by runsc-hardened")]
    Unsupported { command: String, what: String },
    /// A runsc flag given to runsc-hardened (Docker's `runtimeArgs`, Podman's
    /// `--runtime-flag`): refused, never passed on; the policy alone sets runsc's flags.
    #[error(
        "--{flag} is a runsc flag; runsc-hardened takes none from the engine (daemon.json runtimeArgs, podman --runtime-flag) and passes none on: {why}"
    )]
    RunscFlag { flag: String, why: String },
}

/// The words of one command (global or a subcommand's), consumed flag by flag.
struct Words<'a> {
    command: &'a str,
    words: std::iter::Peekable<std::vec::IntoIter<String>>,
}

/// A flag as written: its name without dashes and an inline `=value`.
struct Flag {
    name: String,
    inline: Option<String>,
}

impl Words<'_> {
    /// The next word if it is a flag (not `-` alone, not after `--`).
    fn next_flag(&mut self) -> Option<Flag> {
        let w = self.words.peek()?;
        if w == "--" {
            self.words.next();
            return None;
        }
        if !w.starts_with('-') || w == "-" {
            return None;
        }
        let w = self.words.next().expect("peeked");
        let body = w.trim_start_matches('-');
        Some(match body.split_once('=') {
            Some((n, v)) => Flag {
                name: n.to_string(),
                inline: Some(v.to_string()),
            },
            None => Flag {
                name: body.to_string(),
                inline: None,
            },
        })
    }

    fn value(&mut self, flag: &Flag) -> Result<String, CliError> {
        match &flag.inline {
            Some(v) => Ok(v.clone()),
            None => self.words.next().ok_or_else(|| CliError::MissingValue {
                command: self.command.to_string(),
                flag: flag.name.clone(),
            }),
        }
    }

    fn boolean(&self, flag: &Flag) -> Result<bool, CliError> {
        match flag.inline.as_deref() {
            None | Some("true") | Some("1") => Ok(true),
            Some("false") | Some("0") => Ok(false),
            Some(v) => Err(self.bad(flag, v)),
        }
    }

    fn number(&mut self, flag: &Flag) -> Result<u32, CliError> {
        let v = self.value(flag)?;
        v.parse().map_err(|_| self.bad(flag, &v))
    }

    fn bad(&self, flag: &Flag, value: &str) -> CliError {
        CliError::BadValue {
            command: self.command.to_string(),
            flag: flag.name.clone(),
            value: value.to_string(),
        }
    }

    fn unknown(&self, flag: &Flag) -> CliError {
        CliError::UnknownFlag {
            command: self.command.to_string(),
            flag: flag.name.clone(),
        }
    }

    fn rest(self) -> Vec<String> {
        self.words.collect()
    }
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Invocation, CliError> {
    let mut words = Words {
        command: "runsc-hardened",
        words: args.into_iter().collect::<Vec<_>>().into_iter().peekable(),
    };
    let mut global = Global::default();
    while let Some(flag) = words.next_flag() {
        match flag.name.as_str() {
            "root" => global.root = Some(words.value(&flag)?.into()),
            "log" => global.log = Some(words.value(&flag)?.into()),
            "log-format" => {
                global.log_format = match words.value(&flag)?.as_str() {
                    "json" => LogFormat::Json,
                    "text" => LogFormat::Text,
                    other => return Err(words.bad(&flag, other)),
                }
            }
            "systemd-cgroup" => global.systemd_cgroup = words.boolean(&flag)?,
            "policy" => global.policy = Some(words.value(&flag)?.into()),
            // runc's own debug switch: runsc-hardened logs its errors either way.
            "debug" => {
                words.boolean(&flag)?;
            }
            "version" | "v" => {
                return Ok(Invocation {
                    global,
                    command: Command::Version,
                })
            }
            name => return Err(runsc_flag(name).unwrap_or_else(|| words.unknown(&flag))),
        }
    }
    let sub = words.words.next().ok_or(CliError::NoSubcommand)?;
    let rest = words.rest();
    let command = match sub.as_str() {
        "create" => create(rest)?,
        "exec" => exec(rest)?,
        "kill" => kill(rest)?,
        "delete" => delete(rest)?,
        "ps" => ps(rest)?,
        "update" => update(rest)?,
        "start" | "state" | "pause" | "resume" => {
            let id = only_id(&sub, rest)?;
            match sub.as_str() {
                "start" => Command::Start { id },
                "state" => Command::State { id },
                "pause" => Command::Pause { id },
                _ => Command::Resume { id },
            }
        }
        other => return Err(CliError::UnknownSubcommand(other.to_string())),
    };
    Ok(Invocation { global, command })
}

/// The refusal of a global flag that is one of runsc's (see `policy_injector`'s decision table),
/// with the reason; `None` for a word runsc does not know either.
fn runsc_flag(name: &str) -> Option<CliError> {
    use policy_injector::policy::runsc_flags::{decision, FlagDecision, RUNSC_FLAGS};
    if !RUNSC_FLAGS.iter().any(|(n, _)| *n == name) {
        return None;
    }
    let why = match decision(name) {
        FlagDecision::Allowed => {
            "a policy may set it in [runsc] extra_flags (runsc-hardened --policy=FILE)".to_string()
        }
        d => format!(
            "{} (runsc's flags come from the policy's [runsc] section)",
            d.refusal().unwrap_or_default()
        ),
    };
    Some(CliError::RunscFlag {
        flag: name.to_string(),
        why,
    })
}

fn sub_words(command: &str, rest: Vec<String>) -> Words<'_> {
    Words {
        command,
        words: rest.into_iter().peekable(),
    }
}

fn one_id(command: &str, rest: Vec<String>) -> Result<String, CliError> {
    match <[String; 1]>::try_from(rest) {
        Ok([id]) => Ok(id),
        Err(got) => Err(CliError::Arguments {
            command: command.to_string(),
            expected: "one container id",
            got,
        }),
    }
}

fn only_id(command: &str, rest: Vec<String>) -> Result<String, CliError> {
    let mut w = sub_words(command, rest);
    if let Some(flag) = w.next_flag() {
        return Err(w.unknown(&flag));
    }
    one_id(command, w.rest())
}

fn create(rest: Vec<String>) -> Result<Command, CliError> {
    let mut w = sub_words("create", rest);
    let (mut bundle, mut pid_file, mut console_socket, mut preserve_fds) = (None, None, None, 0);
    while let Some(flag) = w.next_flag() {
        match flag.name.as_str() {
            "bundle" | "b" => bundle = Some(PathBuf::from(w.value(&flag)?)),
            "pid-file" => pid_file = Some(w.value(&flag)?.into()),
            "console-socket" => console_socket = Some(w.value(&flag)?.into()),
            "preserve-fds" => preserve_fds = w.number(&flag)?,
            // Host-kernel setup that has no meaning for a gVisor sandbox.
            "no-pivot" | "no-new-keyring" => {
                w.boolean(&flag)?;
            }
            _ => return Err(w.unknown(&flag)),
        }
    }
    let id = one_id("create", w.rest())?;
    Ok(Command::Create {
        id,
        // runc's default: the current directory.
        bundle: bundle.unwrap_or_else(|| PathBuf::from(".")),
        pid_file,
        console_socket,
        preserve_fds,
    })
}

fn exec(rest: Vec<String>) -> Result<Command, CliError> {
    let mut w = sub_words("exec", rest);
    let (mut process, mut detach, mut pid_file, mut console_socket, mut tty, mut preserve_fds) =
        (None, false, None, None, false, 0);
    while let Some(flag) = w.next_flag() {
        match flag.name.as_str() {
            "process" | "p" => process = Some(PathBuf::from(w.value(&flag)?)),
            "detach" | "d" => detach = w.boolean(&flag)?,
            "pid-file" => pid_file = Some(w.value(&flag)?.into()),
            "console-socket" => console_socket = Some(w.value(&flag)?.into()),
            "tty" | "t" => tty = w.boolean(&flag)?,
            "preserve-fds" => preserve_fds = w.number(&flag)?,
            _ => return Err(w.unknown(&flag)),
        }
    }
    let rest = w.rest();
    let Some(process) = process else {
        return Err(CliError::Unsupported {
            command: "exec".into(),
            what: "exec without --process (a command line instead of a process file)".into(),
        });
    };
    Ok(Command::Exec {
        id: one_id("exec", rest)?,
        process,
        detach,
        pid_file,
        console_socket,
        tty,
        preserve_fds,
    })
}

fn kill(rest: Vec<String>) -> Result<Command, CliError> {
    let mut w = sub_words("kill", rest);
    let mut all = false;
    while let Some(flag) = w.next_flag() {
        match flag.name.as_str() {
            "all" | "a" => all = w.boolean(&flag)?,
            _ => return Err(w.unknown(&flag)),
        }
    }
    let rest = w.rest();
    let (id, signal) = match rest.as_slice() {
        [id] => (id.clone(), libc::SIGTERM),
        [id, sig] => (
            id.clone(),
            parse_signal(sig).ok_or_else(|| CliError::BadValue {
                command: "kill".into(),
                flag: "signal".into(),
                value: sig.clone(),
            })?,
        ),
        _ => {
            return Err(CliError::Arguments {
                command: "kill".into(),
                expected: "a container id and an optional signal",
                got: rest,
            })
        }
    };
    Ok(Command::Kill { id, signal, all })
}

fn delete(rest: Vec<String>) -> Result<Command, CliError> {
    let mut w = sub_words("delete", rest);
    let mut force = false;
    while let Some(flag) = w.next_flag() {
        match flag.name.as_str() {
            "force" | "f" => force = w.boolean(&flag)?,
            _ => return Err(w.unknown(&flag)),
        }
    }
    Ok(Command::Delete {
        id: one_id("delete", w.rest())?,
        force,
    })
}

fn ps(rest: Vec<String>) -> Result<Command, CliError> {
    let mut w = sub_words("ps", rest);
    let mut json = false;
    while let Some(flag) = w.next_flag() {
        match flag.name.as_str() {
            "format" | "f" => {
                json = match w.value(&flag)?.as_str() {
                    "json" => true,
                    "table" => false,
                    other => return Err(w.bad(&flag, other)),
                }
            }
            _ => return Err(w.unknown(&flag)),
        }
    }
    let rest = w.rest();
    // runc passes anything after the id to ps(1) for the table format; there is no ps(1)
    // view of a sandbox's processes to give it to.
    if rest.len() > 1 {
        return Err(CliError::Unsupported {
            command: "ps".into(),
            what: format!("ps(1) options {:?}", &rest[1..]),
        });
    }
    Ok(Command::Ps {
        id: one_id("ps", rest)?,
        json,
    })
}

fn update(rest: Vec<String>) -> Result<Command, CliError> {
    let mut w = sub_words("update", rest);
    let mut resources = None;
    while let Some(flag) = w.next_flag() {
        match flag.name.as_str() {
            "resources" | "r" => {
                resources = Some(match w.value(&flag)?.as_str() {
                    "-" => Source::Stdin,
                    path => Source::File(path.into()),
                })
            }
            // runc's per-limit flags: neither engine uses them.
            other => {
                return Err(CliError::Unsupported {
                    command: "update".into(),
                    what: format!("--{other} (pass the limits with --resources)"),
                })
            }
        }
    }
    let resources = resources.ok_or_else(|| CliError::Unsupported {
        command: "update".into(),
        what: "update without --resources".into(),
    })?;
    Ok(Command::Update {
        id: one_id("update", w.rest())?,
        resources,
    })
}

/// Where the engine wants errors, read from `args` without parsing them: for a command line that
/// failed to parse (Docker's wrapper puts daemon.json `runtimeArgs` before its own `--log`, so
/// a refused flag comes before the log flags are read). Best effort: the last `--log` and
/// `--log-format` given, in any of Go's spellings.
pub fn log_flags_of(args: &[String]) -> (Option<PathBuf>, LogFormat) {
    let (mut log, mut format) = (None, LogFormat::Text);
    let mut words = args.iter();
    while let Some(w) = words.next() {
        if !w.starts_with('-') {
            continue;
        }
        let body = w.trim_start_matches('-');
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        if name != "log" && name != "log-format" {
            continue;
        }
        let Some(value) = inline.or_else(|| words.next().cloned()) else {
            break;
        };
        if name == "log" {
            log = Some(PathBuf::from(value));
        } else if value == "json" {
            format = LogFormat::Json;
        }
    }
    (log, format)
}

/// `9`, `KILL`, `SIGKILL`, `sigkill`.
pub fn parse_signal(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let upper = s.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    Some(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "ABRT" => libc::SIGABRT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "PIPE" => libc::SIGPIPE,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "WINCH" => libc::SIGWINCH,
        _ => return None,
    })
}

#[cfg(test)]
#[path = "cli_tests.rs"]
mod tests;
