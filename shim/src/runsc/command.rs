//! Typed runsc command lines.
//!
//! [`GlobalFlags`] holds the top-level flags the shim may pass and [`Subcommand`] the operations it
//! runs; together they build the exact argv. Only allowlisted flags are representable: there is no
//! field, variant or free-form map that could emit `--ignore-cgroups` (limits would not be enforced)
//! or `--allow-flag-override` (annotations could then override our flags).
//!
//! Go's flag package parses `--name=value` and `--name value` alike, but a boolean flag only takes a
//! value in the `=` form, so every flag with a value is emitted as `--name=value`.

use std::ffi::OsString;
use std::path::PathBuf;

/// The platform the sentry uses to intercept syscalls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Platform {
    Ptrace,
    Kvm,
    Systrap,
}

impl Platform {
    pub fn as_str(&self) -> &'static str {
        match self {
            Platform::Ptrace => "ptrace",
            Platform::Kvm => "kvm",
            Platform::Systrap => "systrap",
        }
    }

    pub fn parse(s: &str) -> Option<Platform> {
        match s {
            "ptrace" => Some(Platform::Ptrace),
            "kvm" => Some(Platform::Kvm),
            "systrap" => Some(Platform::Systrap),
            _ => None,
        }
    }
}

/// `--network`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Loopback only.
    None,
    /// gVisor's netstack on the sandbox's network namespace.
    Sandbox,
    /// The host stack of the namespace runsc runs in.
    Host,
}

impl Network {
    pub fn as_str(&self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Sandbox => "sandbox",
            Network::Host => "host",
        }
    }
}

/// `--host-uds`: which host Unix sockets the sandbox may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostUds {
    None,
    Open,
    Create,
    All,
}

impl HostUds {
    pub fn as_str(&self) -> &'static str {
        match self {
            HostUds::None => "none",
            HostUds::Open => "open",
            HostUds::Create => "create",
            HostUds::All => "all",
        }
    }
}

/// `--overlay2={mount}:{medium}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlay {
    /// `none`: no overlay; writes go where the mount says.
    Off,
    /// `root:memory`: writes to the root filesystem stay in sandbox memory.
    RootMemory,
    /// `all:memory`: every mount is overlaid in memory.
    AllMemory,
    /// `root:self` (current default): the upper layer is a file in the rootfs itself.
    RootSelf,
}

impl Overlay {
    pub fn as_str(&self) -> &'static str {
        match self {
            Overlay::Off => "none",
            Overlay::RootMemory => "root:memory",
            Overlay::AllMemory => "all:memory",
            Overlay::RootSelf => "root:self",
        }
    }
}

/// `--log-format` / `--debug-log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
    JsonK8s,
}

impl LogFormat {
    pub fn as_str(&self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
            LogFormat::JsonK8s => "json-k8s",
        }
    }
}

/// Further top-level flags a policy may set. Each is harmless to isolation; anything not listed
/// here is refused by [`ExtraFlag::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraFlag {
    /// `--debug-command=create,start`: limit debug logs to these commands.
    DebugCommand(String),
    /// `--panic-log=PATH`.
    PanicLog(PathBuf),
    /// `--fdlimit=N`: host fd ceiling for sentry and gofer.
    FdLimit(u32),
    /// `--cpu-num-from-quota`: size the sandbox's CPU count from the CFS quota.
    CpuNumFromQuota(bool),
    /// `--num-network-channels=N`.
    NumNetworkChannels(u32),
    /// `--watchdog-action=log|panic`.
    WatchdogAction(WatchdogAction),
    /// `--file-access=exclusive|shared` for the root mount.
    FileAccess(FileAccess),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchdogAction {
    Log,
    Panic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    Exclusive,
    Shared,
}

/// A flag name/value a policy asked for that is not on the allowlist or has a bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("runsc flag --{0} is not allowed by the shim (not on its allowlist)")]
    NotAllowed(String),
    #[error("runsc flag --{name}: invalid value {value:?}")]
    BadValue { name: String, value: String },
}

impl ExtraFlag {
    /// The flag's name without dashes, as runsc spells it.
    pub fn name(&self) -> &'static str {
        match self {
            ExtraFlag::DebugCommand(_) => "debug-command",
            ExtraFlag::PanicLog(_) => "panic-log",
            ExtraFlag::FdLimit(_) => "fdlimit",
            ExtraFlag::CpuNumFromQuota(_) => "cpu-num-from-quota",
            ExtraFlag::NumNetworkChannels(_) => "num-network-channels",
            ExtraFlag::WatchdogAction(_) => "watchdog-action",
            ExtraFlag::FileAccess(_) => "file-access",
        }
    }

    /// Parses a `name = value` pair from a policy. Names may be given with or without dashes.
    pub fn parse(name: &str, value: &str) -> Result<ExtraFlag, FlagError> {
        let name = name.trim_start_matches('-');
        let bad = || FlagError::BadValue {
            name: name.to_string(),
            value: value.to_string(),
        };
        let number = |v: &str| v.parse::<u32>().map_err(|_| bad());
        Ok(match name {
            "debug-command" => ExtraFlag::DebugCommand(value.to_string()),
            "panic-log" => ExtraFlag::PanicLog(PathBuf::from(value)),
            "fdlimit" => ExtraFlag::FdLimit(number(value)?),
            "cpu-num-from-quota" => ExtraFlag::CpuNumFromQuota(parse_bool(value).ok_or_else(bad)?),
            "num-network-channels" => ExtraFlag::NumNetworkChannels(number(value)?),
            "watchdog-action" => ExtraFlag::WatchdogAction(match value {
                "log" => WatchdogAction::Log,
                "panic" => WatchdogAction::Panic,
                _ => return Err(bad()),
            }),
            "file-access" => ExtraFlag::FileAccess(match value {
                "exclusive" => FileAccess::Exclusive,
                "shared" => FileAccess::Shared,
                _ => return Err(bad()),
            }),
            other => return Err(FlagError::NotAllowed(other.to_string())),
        })
    }

    fn value(&self) -> String {
        match self {
            ExtraFlag::DebugCommand(v) => v.clone(),
            ExtraFlag::PanicLog(p) => p.display().to_string(),
            ExtraFlag::FdLimit(n) | ExtraFlag::NumNetworkChannels(n) => n.to_string(),
            ExtraFlag::CpuNumFromQuota(b) => b.to_string(),
            ExtraFlag::WatchdogAction(WatchdogAction::Log) => "log".into(),
            ExtraFlag::WatchdogAction(WatchdogAction::Panic) => "panic".into(),
            ExtraFlag::FileAccess(FileAccess::Exclusive) => "exclusive".into(),
            ExtraFlag::FileAccess(FileAccess::Shared) => "shared".into(),
        }
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// Top-level runsc flags. `None` means "leave runsc's default"; the security-relevant ones
/// (`net_raw`, `host_uds`) are always emitted so the default of a given release does not matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalFlags {
    /// `--root`: where runsc keeps its state.
    pub root: PathBuf,
    pub platform: Option<Platform>,
    pub network: Option<Network>,
    /// `--oci-seccomp`: without it runsc silently ignores the spec's seccomp profile.
    pub oci_seccomp: bool,
    /// `--net-raw`: always emitted, `false` keeps CAP_NET_RAW out of containers.
    pub net_raw: bool,
    /// `--host-uds`; `None` when the release has no such flag (its default is "no access").
    pub host_uds: Option<HostUds>,
    pub overlay: Option<Overlay>,
    /// `--directfs`; `None` when not set or not known to the release.
    pub directfs: Option<bool>,
    pub debug: bool,
    pub debug_log: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub log_format: Option<LogFormat>,
    pub extra: Vec<ExtraFlag>,
}

impl GlobalFlags {
    /// Hardened defaults: seccomp enforced, no raw sockets, no host Unix sockets.
    pub fn new(root: impl Into<PathBuf>) -> GlobalFlags {
        GlobalFlags {
            root: root.into(),
            platform: None,
            network: None,
            oci_seccomp: true,
            net_raw: false,
            host_uds: Some(HostUds::None),
            overlay: None,
            directfs: None,
            debug: false,
            debug_log: None,
            log: None,
            log_format: None,
            extra: Vec::new(),
        }
    }

    pub fn to_args(&self) -> Vec<OsString> {
        let mut args = Args::default();
        args.value("root", self.root.as_os_str());
        if let Some(log) = &self.log {
            args.value("log", log.as_os_str());
        }
        if let Some(format) = self.log_format {
            args.value("log-format", format.as_str());
        }
        if self.debug {
            args.switch("debug");
        }
        if let Some(path) = &self.debug_log {
            args.value("debug-log", path.as_os_str());
        }
        if let Some(platform) = self.platform {
            args.value("platform", platform.as_str());
        }
        if let Some(network) = self.network {
            args.value("network", network.as_str());
        }
        if self.oci_seccomp {
            args.switch("oci-seccomp");
        }
        args.value("net-raw", if self.net_raw { "true" } else { "false" });
        if let Some(host_uds) = self.host_uds {
            args.value("host-uds", host_uds.as_str());
        }
        if let Some(overlay) = &self.overlay {
            args.value("overlay2", overlay.as_str());
        }
        if let Some(directfs) = self.directfs {
            args.value("directfs", if directfs { "true" } else { "false" });
        }
        for flag in &self.extra {
            args.value(flag.name(), flag.value());
        }
        args.0
    }
}

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
        pid_file: PathBuf,
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
            Subcommand::Flags | Subcommand::Help { .. } => None,
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
                args.value("pid-file", pid_file.as_os_str());
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
            Subcommand::Flags => {}
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

#[derive(Default)]
struct Args(Vec<OsString>);

impl Args {
    fn word(&mut self, w: impl Into<OsString>) {
        self.0.push(w.into());
    }

    fn switch(&mut self, name: &str) {
        self.0.push(format!("--{name}").into());
    }

    fn value(&mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) {
        let mut arg = OsString::from(format!("--{name}="));
        arg.push(value.as_ref());
        self.0.push(arg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    fn sub(s: Subcommand) -> Vec<String> {
        strings(s.to_args())
    }

    #[test]
    fn default_global_flags_are_hardened() {
        assert_eq!(
            strings(GlobalFlags::new("/run/gh/runsc/default").to_args()),
            [
                "--root=/run/gh/runsc/default",
                "--oci-seccomp",
                "--net-raw=false",
                "--host-uds=none"
            ]
        );
    }

    #[test]
    fn every_global_flag_is_emitted_in_a_fixed_order() {
        let mut g = GlobalFlags::new("/r");
        g.platform = Some(Platform::Systrap);
        g.network = Some(Network::None);
        g.overlay = Some(Overlay::RootMemory);
        g.directfs = Some(false);
        g.debug = true;
        g.debug_log = Some("/var/log/runsc/".into());
        g.log = Some("/run/x/log.json".into());
        g.log_format = Some(LogFormat::Json);
        g.extra = vec![
            ExtraFlag::FdLimit(4096),
            ExtraFlag::DebugCommand("create,start".into()),
        ];
        assert_eq!(
            strings(g.to_args()),
            [
                "--root=/r",
                "--log=/run/x/log.json",
                "--log-format=json",
                "--debug",
                "--debug-log=/var/log/runsc/",
                "--platform=systrap",
                "--network=none",
                "--oci-seccomp",
                "--net-raw=false",
                "--host-uds=none",
                "--overlay2=root:memory",
                "--directfs=false",
                "--fdlimit=4096",
                "--debug-command=create,start",
            ]
        );
    }

    #[test]
    fn seccomp_off_and_host_uds_unknown_are_omitted() {
        let mut g = GlobalFlags::new("/r");
        g.oci_seccomp = false;
        g.host_uds = None;
        assert_eq!(strings(g.to_args()), ["--root=/r", "--net-raw=false"]);
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
                pid_file: "/b/e1.pid".into(),
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
                pid_file: "/p.pid".into(),
                internal_pid_file: None,
                detach: false,
                console_socket: None,
            }),
            ["exec", "--process=/p.json", "--pid-file=/p.pid", "c"]
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
    fn flags_and_help_args() {
        assert_eq!(sub(Subcommand::Flags), ["flags"]);
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
                "start",
                "c"
            ]
        );
    }

    #[test]
    fn dangerous_flags_are_refused_by_the_allowlist() {
        for name in [
            "ignore-cgroups",
            "--allow-flag-override",
            "TESTONLY-unsafe-nonroot",
            "rootless",
            "net-raw",
            "host-uds",
            "profile",
            "network",
        ] {
            assert!(
                matches!(
                    ExtraFlag::parse(name, "true"),
                    Err(FlagError::NotAllowed(_))
                ),
                "{name} must be refused"
            );
        }
    }

    #[test]
    fn allowlisted_flags_parse_and_bad_values_are_refused() {
        assert_eq!(
            ExtraFlag::parse("--fdlimit", "512").unwrap(),
            ExtraFlag::FdLimit(512)
        );
        assert_eq!(
            ExtraFlag::parse("watchdog-action", "panic").unwrap(),
            ExtraFlag::WatchdogAction(WatchdogAction::Panic)
        );
        assert!(matches!(
            ExtraFlag::parse("fdlimit", "-1"),
            Err(FlagError::BadValue { .. })
        ));
        assert!(matches!(
            ExtraFlag::parse("file-access", "everything"),
            Err(FlagError::BadValue { .. })
        ));
    }

    #[test]
    fn no_argv_ever_contains_the_forbidden_flags() {
        // Build the widest argv we can and check the two flags never appear in any spelling.
        let mut g = GlobalFlags::new("/r");
        g.extra = vec![
            ExtraFlag::CpuNumFromQuota(true),
            ExtraFlag::NumNetworkChannels(2),
            ExtraFlag::FileAccess(FileAccess::Shared),
            ExtraFlag::PanicLog("/p".into()),
        ];
        let args = strings(argv(&g, &Subcommand::Flags));
        assert!(args
            .iter()
            .all(|a| !a.contains("ignore-cgroups") && !a.contains("allow-flag-override")));
    }
}
