//! Typed runsc command lines: [`Subcommand`] and the argv it builds after the global flags
//! ([`super::flags::GlobalFlags`]); an exact test per subcommand.

use std::ffi::OsString;
use std::path::PathBuf;

use super::args::Args;
use super::flags::GlobalFlags;

/// Which process `runsc wait` waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitTarget {
    /// The container's init.
    Init,
    /// A pid in the container's pid namespace (`--pid`).
    Pid(i32),
    /// A pid in the sandbox's root pid namespace (`--rootpid`).
    RootPid(i32),
}

/// One runsc operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subcommand {
    Create {
        id: String,
        bundle: PathBuf,
        pid_file: PathBuf,
        console_socket: Option<PathBuf>,
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
        pid: Option<i32>,
    },
    Delete {
        id: String,
        force: bool,
    },
    Exec {
        id: String,
        process_json: PathBuf,
        /// runsc's host pid (with `--detach`, its `runsc-exec` child's); an attached exec's
        /// runsc is the caller's own child and needs none.
        pid_file: Option<PathBuf>,
        internal_pid_file: Option<PathBuf>,
        detach: bool,
        console_socket: Option<PathBuf>,
    },
    /// `ps --format=json`: the pids as a JSON array.
    Ps {
        id: String,
    },
    /// `events --stats`: one stats event, then exit.
    Stats {
        id: String,
    },
    Pause {
        id: String,
    },
    Resume {
        id: String,
    },
    Wait {
        id: String,
        target: WaitTarget,
    },
    /// `update --resources=-`: the LinuxResources JSON comes on stdin. Only in releases that have it.
    Update {
        id: String,
    },
    Flags,
    Help {
        topic: Option<String>,
    },
    /// `features`: the OCI runtime features document (JSON on stdout). Only in releases that
    /// have it (20221219 has not).
    Features,
}

impl Subcommand {
    /// The subcommand's name, for errors and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Subcommand::Create { .. } => "create",
            Subcommand::Start { .. } => "start",
            Subcommand::State { .. } => "state",
            Subcommand::Kill { .. } => "kill",
            Subcommand::Delete { .. } => "delete",
            Subcommand::Exec { .. } => "exec",
            Subcommand::Ps { .. } => "ps",
            Subcommand::Stats { .. } => "events",
            Subcommand::Pause { .. } => "pause",
            Subcommand::Resume { .. } => "resume",
            Subcommand::Wait { .. } => "wait",
            Subcommand::Update { .. } => "update",
            Subcommand::Flags => "flags",
            Subcommand::Help { .. } => "help",
            Subcommand::Features => "features",
        }
    }

    /// The container id the command is about, if any.
    pub fn id(&self) -> Option<&str> {
        match self {
            Subcommand::Create { id, .. }
            | Subcommand::Start { id }
            | Subcommand::State { id }
            | Subcommand::Kill { id, .. }
            | Subcommand::Delete { id, .. }
            | Subcommand::Exec { id, .. }
            | Subcommand::Ps { id }
            | Subcommand::Stats { id }
            | Subcommand::Pause { id }
            | Subcommand::Resume { id }
            | Subcommand::Wait { id, .. }
            | Subcommand::Update { id } => Some(id),
            Subcommand::Flags | Subcommand::Help { .. } | Subcommand::Features => None,
        }
    }

    /// The subcommand, its flags, then its positional arguments.
    pub fn to_args(&self) -> Vec<OsString> {
        let mut args = Args::default();
        args.word(self.name());
        match self {
            Subcommand::Create {
                id,
                bundle,
                pid_file,
                console_socket,
            } => {
                args.value("bundle", bundle.as_os_str());
                args.value("pid-file", pid_file.as_os_str());
                if let Some(socket) = console_socket {
                    args.value("console-socket", socket.as_os_str());
                }
                args.word(id);
            }
            Subcommand::Start { id }
            | Subcommand::State { id }
            | Subcommand::Pause { id }
            | Subcommand::Resume { id } => args.word(id),
            Subcommand::Kill {
                id,
                signal,
                all,
                pid,
            } => {
                if *all {
                    args.switch("all");
                }
                if let Some(pid) = pid {
                    args.value("pid", pid.to_string());
                }
                args.word(id);
                args.word(signal.to_string());
            }
            Subcommand::Delete { id, force } => {
                if *force {
                    args.switch("force");
                }
                args.word(id);
            }
            Subcommand::Exec {
                id,
                process_json,
                pid_file,
                internal_pid_file,
                detach,
                console_socket,
            } => {
                args.value("process", process_json.as_os_str());
                if let Some(path) = pid_file {
                    args.value("pid-file", path.as_os_str());
                }
                if let Some(path) = internal_pid_file {
                    args.value("internal-pid-file", path.as_os_str());
                }
                if *detach {
                    args.switch("detach");
                }
                if let Some(socket) = console_socket {
                    args.value("console-socket", socket.as_os_str());
                }
                args.word(id);
            }
            Subcommand::Ps { id } => {
                args.value("format", "json");
                args.word(id);
            }
            Subcommand::Stats { id } => {
                args.switch("stats");
                args.word(id);
            }
            Subcommand::Wait { id, target } => {
                match target {
                    WaitTarget::Init => {}
                    WaitTarget::Pid(pid) => args.value("pid", pid.to_string()),
                    WaitTarget::RootPid(pid) => args.value("rootpid", pid.to_string()),
                }
                args.word(id);
            }
            Subcommand::Update { id } => {
                args.value("resources", "-");
                args.word(id);
            }
            Subcommand::Flags | Subcommand::Features => {}
            Subcommand::Help { topic } => {
                if let Some(topic) = topic {
                    args.word(topic);
                }
            }
        }
        args.0
    }
}

/// The full argv after the binary: global flags, then the subcommand.
pub fn argv(global: &GlobalFlags, sub: &Subcommand) -> Vec<OsString> {
    let mut args = global.to_args();
    args.extend(sub.to_args());
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runsc::flags::{ExtraFlag, FileAccess};

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    fn sub(s: Subcommand) -> Vec<String> {
        strings(s.to_args())
    }

    #[test]
    fn create_args() {
        assert_eq!(
            sub(Subcommand::Create {
                id: "c1".into(),
                bundle: "/b".into(),
                pid_file: "/b/init.pid".into(),
                console_socket: None,
            }),
            ["create", "--bundle=/b", "--pid-file=/b/init.pid", "c1"]
        );
        assert_eq!(
            sub(Subcommand::Create {
                id: "c1".into(),
                bundle: "/b".into(),
                pid_file: "/b/init.pid".into(),
                console_socket: Some("/tmp/pty.sock".into()),
            }),
            [
                "create",
                "--bundle=/b",
                "--pid-file=/b/init.pid",
                "--console-socket=/tmp/pty.sock",
                "c1"
            ]
        );
    }

    #[test]
    fn start_state_pause_resume_args() {
        assert_eq!(sub(Subcommand::Start { id: "c".into() }), ["start", "c"]);
        assert_eq!(sub(Subcommand::State { id: "c".into() }), ["state", "c"]);
        assert_eq!(sub(Subcommand::Pause { id: "c".into() }), ["pause", "c"]);
        assert_eq!(sub(Subcommand::Resume { id: "c".into() }), ["resume", "c"]);
    }

    #[test]
    fn kill_args_put_the_signal_after_the_id() {
        assert_eq!(
            sub(Subcommand::Kill {
                id: "c".into(),
                signal: 15,
                all: false,
                pid: None
            }),
            ["kill", "c", "15"]
        );
        assert_eq!(
            sub(Subcommand::Kill {
                id: "c".into(),
                signal: 9,
                all: true,
                pid: Some(7)
            }),
            ["kill", "--all", "--pid=7", "c", "9"]
        );
    }

    #[test]
    fn delete_args() {
        assert_eq!(
            sub(Subcommand::Delete {
                id: "c".into(),
                force: true
            }),
            ["delete", "--force", "c"]
        );
        assert_eq!(
            sub(Subcommand::Delete {
                id: "c".into(),
                force: false
            }),
            ["delete", "c"]
        );
    }

    #[test]
    fn exec_args() {
        assert_eq!(
            sub(Subcommand::Exec {
                id: "c".into(),
                process_json: "/b/e1.json".into(),
                pid_file: Some("/b/e1.pid".into()),
                internal_pid_file: Some("/b/e1.ipid".into()),
                detach: true,
                console_socket: Some("/s".into()),
            }),
            [
                "exec",
                "--process=/b/e1.json",
                "--pid-file=/b/e1.pid",
                "--internal-pid-file=/b/e1.ipid",
                "--detach",
                "--console-socket=/s",
                "c"
            ]
        );
        assert_eq!(
            sub(Subcommand::Exec {
                id: "c".into(),
                process_json: "/p.json".into(),
                pid_file: Some("/p.pid".into()),
                internal_pid_file: None,
                detach: false,
                console_socket: None,
            }),
            ["exec", "--process=/p.json", "--pid-file=/p.pid", "c"]
        );
        // An attached exec: no host pid file, the guest pid only.
        assert_eq!(
            sub(Subcommand::Exec {
                id: "c".into(),
                process_json: "/p.json".into(),
                pid_file: None,
                internal_pid_file: Some("/p.gpid".into()),
                detach: false,
                console_socket: None,
            }),
            [
                "exec",
                "--process=/p.json",
                "--internal-pid-file=/p.gpid",
                "c"
            ]
        );
    }

    #[test]
    fn ps_stats_update_args() {
        assert_eq!(
            sub(Subcommand::Ps { id: "c".into() }),
            ["ps", "--format=json", "c"]
        );
        assert_eq!(
            sub(Subcommand::Stats { id: "c".into() }),
            ["events", "--stats", "c"]
        );
        assert_eq!(
            sub(Subcommand::Update { id: "c".into() }),
            ["update", "--resources=-", "c"]
        );
    }

    #[test]
    fn wait_args_per_target() {
        let w = |target| {
            sub(Subcommand::Wait {
                id: "c".into(),
                target,
            })
        };
        assert_eq!(w(WaitTarget::Init), ["wait", "c"]);
        assert_eq!(w(WaitTarget::Pid(3)), ["wait", "--pid=3", "c"]);
        assert_eq!(w(WaitTarget::RootPid(40)), ["wait", "--rootpid=40", "c"]);
    }

    #[test]
    fn flags_help_and_features_args() {
        assert_eq!(sub(Subcommand::Flags), ["flags"]);
        assert_eq!(sub(Subcommand::Features), ["features"]);
        assert_eq!(sub(Subcommand::Help { topic: None }), ["help"]);
        assert_eq!(
            sub(Subcommand::Help {
                topic: Some("platforms".into())
            }),
            ["help", "platforms"]
        );
    }

    #[test]
    fn argv_puts_global_flags_before_the_subcommand() {
        let args = strings(argv(
            &GlobalFlags::new("/r"),
            &Subcommand::Start { id: "c".into() },
        ));
        assert_eq!(
            args,
            [
                "--root=/r",
                "--oci-seccomp",
                "--net-raw=false",
                "--host-uds=none",
                "--host-fifo=none",
                "--character-device-policy=emulated-only",
                "--directfs=false",
                "start",
                "c"
            ]
        );
    }

    #[test]
    fn no_argv_ever_contains_the_forbidden_flags() {
        // Build the widest argv we can and check the two flags never appear in any spelling.
        let mut g = GlobalFlags::new("/r");
        g.extra = vec![
            ExtraFlag::CpuNumFromQuota(true),
            ExtraFlag::NumNetworkChannels(2),
            ExtraFlag::FileAccess(FileAccess::Shared),
            ExtraFlag::Dcache(-1),
        ];
        let args = strings(argv(&g, &Subcommand::Flags));
        assert!(args
            .iter()
            .all(|a| !a.contains("ignore-cgroups") && !a.contains("allow-flag-override")));
    }
}
