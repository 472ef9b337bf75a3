//! Top-level runsc flags. Only allowlisted flags are representable: there is no field, variant
//! or free-form map that could emit `--ignore-cgroups` (limits would not be enforced) or
//! `--allow-flag-override` (annotations could then override our flags).
//!
//! Go's flag package parses `--name=value` and `--name value` alike, but a boolean flag only takes
//! a value in the `=` form, so every flag with a value is emitted as `--name=value`.

use std::ffi::OsString;
use std::path::PathBuf;

use super::args::Args;

/// A flag value with one fixed spelling per variant: `as_str` gives runsc's spelling, `parse` reads
/// it back (for policies), and `ALL` lists the accepted values for error messages.
macro_rules! flag_value {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            pub const ALL: &'static [&'static str] = &[$($text),+];

            pub fn as_str(&self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

flag_value! {
    /// `--platform`: how the sentry intercepts syscalls.
    Platform {
        Ptrace = "ptrace",
        Kvm = "kvm",
        /// Default in current releases; absent in 20221219.
        Systrap = "systrap",
    }
}

flag_value! {
    /// `--network`.
    Network {
        /// Loopback only.
        None = "none",
        /// gVisor's netstack on the sandbox's network namespace.
        Sandbox = "sandbox",
        /// The host stack of the namespace runsc runs in.
        Host = "host",
    }
}

flag_value! {
    /// `--host-uds`: which host Unix sockets the sandbox may use.
    HostUds {
        None = "none",
        Open = "open",
        Create = "create",
        All = "all",
    }
}

flag_value! {
    /// `--host-fifo`: only "none" is representable (the other value, `open`, lets the sandbox
    /// open host FIFOs in its bind mounts).
    HostFifo {
        None = "none",
    }
}

flag_value! {
    /// `--character-device-policy` (current releases): only "emulated-only" is representable
    /// (`prefer-emulated` and `passthrough` open host character devices from the mounts).
    CharacterDevices {
        EmulatedOnly = "emulated-only",
    }
}

flag_value! {
    /// `--overlay2={mount}:{medium}`.
    Overlay {
        /// No overlay; writes go where the mount says.
        Off = "none",
        /// Writes to the root filesystem stay in sandbox memory.
        RootMemory = "root:memory",
        /// Every mount is overlaid in memory.
        AllMemory = "all:memory",
        /// Current default: the upper layer is a file in the rootfs itself.
        RootSelf = "root:self",
    }
}

flag_value! {
    /// `--log-format` / `--debug-log-format`.
    LogFormat {
        Text = "text",
        Json = "json",
        JsonK8s = "json-k8s",
    }
}

/// Further top-level flags a policy may set. Each is harmless to isolation; anything not listed
/// here is refused by [`ExtraFlag::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExtraFlag {
    /// `--buffer-pooling`.
    BufferPooling(bool),
    /// `--cpu-num-from-quota`: size the sandbox's CPU count from the CFS quota.
    CpuNumFromQuota(bool),
    /// `--dcache=N`: the sentry's dentry cache size (-1: per-mount caches).
    Dcache(i32),
    /// `--fdlimit=N`: host fd ceiling for sentry and gofer (-1: none).
    FdLimit(i32),
    /// `--file-access=exclusive|shared` for the root mount.
    FileAccess(FileAccess),
    /// `--file-access-mounts=exclusive|shared` for the other mounts.
    FileAccessMounts(FileAccess),
    /// `--gso`.
    Gso(bool),
    /// `--num-network-channels=N`.
    NumNetworkChannels(u32),
    /// `--software-gso`.
    SoftwareGso(bool),
    /// `--watchdog-action=log|panic`.
    WatchdogAction(WatchdogAction),
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
            ExtraFlag::BufferPooling(_) => "buffer-pooling",
            ExtraFlag::CpuNumFromQuota(_) => "cpu-num-from-quota",
            ExtraFlag::Dcache(_) => "dcache",
            ExtraFlag::FdLimit(_) => "fdlimit",
            ExtraFlag::FileAccess(_) => "file-access",
            ExtraFlag::FileAccessMounts(_) => "file-access-mounts",
            ExtraFlag::Gso(_) => "gso",
            ExtraFlag::NumNetworkChannels(_) => "num-network-channels",
            ExtraFlag::SoftwareGso(_) => "software-gso",
            ExtraFlag::WatchdogAction(_) => "watchdog-action",
        }
    }

    /// Parses a `name = value` pair from a policy. Names may be given with or without dashes.
    /// (`directfs` is a global flag of its own: see `GlobalFlags::directfs`.)
    pub fn parse(name: &str, value: &str) -> Result<ExtraFlag, FlagError> {
        let name = name.trim_start_matches('-');
        let bad = || FlagError::BadValue {
            name: name.to_string(),
            value: value.to_string(),
        };
        let boolean = |v: &str| parse_bool(v).ok_or_else(bad);
        let int = |v: &str| v.parse::<i32>().ok().filter(|n| *n >= -1).ok_or_else(bad);
        let access = |v: &str| match v {
            "exclusive" => Ok(FileAccess::Exclusive),
            "shared" => Ok(FileAccess::Shared),
            _ => Err(bad()),
        };
        Ok(match name {
            "buffer-pooling" => ExtraFlag::BufferPooling(boolean(value)?),
            "cpu-num-from-quota" => ExtraFlag::CpuNumFromQuota(boolean(value)?),
            "dcache" => ExtraFlag::Dcache(int(value)?),
            "fdlimit" => ExtraFlag::FdLimit(int(value)?),
            "file-access" => ExtraFlag::FileAccess(access(value)?),
            "file-access-mounts" => ExtraFlag::FileAccessMounts(access(value)?),
            "gso" => ExtraFlag::Gso(boolean(value)?),
            "num-network-channels" => {
                ExtraFlag::NumNetworkChannels(value.parse::<u32>().map_err(|_| bad())?)
            }
            "software-gso" => ExtraFlag::SoftwareGso(boolean(value)?),
            "watchdog-action" => ExtraFlag::WatchdogAction(match value {
                "log" => WatchdogAction::Log,
                "panic" => WatchdogAction::Panic,
                _ => return Err(bad()),
            }),
            other => return Err(FlagError::NotAllowed(other.to_string())),
        })
    }

    pub(super) fn value(&self) -> String {
        let access = |a: &FileAccess| match a {
            FileAccess::Exclusive => "exclusive",
            FileAccess::Shared => "shared",
        };
        match self {
            ExtraFlag::BufferPooling(b)
            | ExtraFlag::CpuNumFromQuota(b)
            | ExtraFlag::Gso(b)
            | ExtraFlag::SoftwareGso(b) => b.to_string(),
            ExtraFlag::Dcache(n) | ExtraFlag::FdLimit(n) => n.to_string(),
            ExtraFlag::NumNetworkChannels(n) => n.to_string(),
            ExtraFlag::FileAccess(a) | ExtraFlag::FileAccessMounts(a) => access(a).to_string(),
            ExtraFlag::WatchdogAction(WatchdogAction::Log) => "log".into(),
            ExtraFlag::WatchdogAction(WatchdogAction::Panic) => "panic".into(),
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

/// Top-level runsc flags. `None` means "leave runsc's default"; the ones that grant access
/// (`net_raw`, `host_uds`, `host_fifo`, `character_devices`) are emitted with their closed value
/// wherever the release has them, so no release's default decides.
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
    /// `--host-fifo=none`; `None` when the release has no such flag (the same default).
    pub host_fifo: Option<HostFifo>,
    /// `--character-device-policy=emulated-only`; `None` where the release has no such flag
    /// (20221219: only the sentry's emulated devices exist).
    pub character_devices: Option<CharacterDevices>,
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
    /// Hardened defaults: seccomp enforced, no raw sockets, no host Unix sockets, FIFOs or
    /// character devices.
    pub fn new(root: impl Into<PathBuf>) -> GlobalFlags {
        GlobalFlags {
            root: root.into(),
            platform: None,
            network: None,
            oci_seccomp: true,
            net_raw: false,
            host_uds: Some(HostUds::None),
            host_fifo: Some(HostFifo::None),
            character_devices: Some(CharacterDevices::EmulatedOnly),
            overlay: None,
            // The gofer mediates every file access unless the policy turns directfs on:
            // with directfs the sentry runs as uid 0 with CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH,
            // CAP_FOWNER, CAP_CHOWN and CAP_FSETID over a full identity uid map; without it, as
            // uid 65534 with no capability (measured, policy-injector/README.md).
            directfs: Some(false),
            debug: false,
            debug_log: None,
            log: None,
            log_format: None,
            extra: Vec::new(),
        }
    }

    /// For a command run without asking the binary what it supports (the shim's `delete`
    /// action, after the shim that knew is gone): `--root` and the flags every release has,
    /// none of which such a command needs to be safe. [`GlobalFlags::new`]'s closed values for
    /// flags only some releases know would make an older runsc refuse the whole command.
    pub fn for_cleanup(root: impl Into<PathBuf>) -> GlobalFlags {
        GlobalFlags {
            host_fifo: None,
            character_devices: None,
            directfs: None,
            ..GlobalFlags::new(root)
        }
    }

    /// [`to_args`](Self::to_args) as text, for the audit and the pool's key.
    pub fn to_arg_strings(&self) -> Vec<String> {
        self.to_args()
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
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
        if let Some(host_fifo) = self.host_fifo {
            args.value("host-fifo", host_fifo.as_str());
        }
        if let Some(devices) = self.character_devices {
            args.value("character-device-policy", devices.as_str());
        }
        if let Some(overlay) = self.overlay {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    #[test]
    fn default_global_flags_are_hardened() {
        assert_eq!(
            strings(GlobalFlags::new("/run/gh/runsc/default").to_args()),
            [
                "--root=/run/gh/runsc/default",
                "--oci-seccomp",
                "--net-raw=false",
                "--host-uds=none",
                "--host-fifo=none",
                "--character-device-policy=emulated-only",
                "--directfs=false"
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
            ExtraFlag::FileAccessMounts(FileAccess::Shared),
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
                "--host-fifo=none",
                "--character-device-policy=emulated-only",
                "--overlay2=root:memory",
                "--directfs=false",
                "--fdlimit=4096",
                "--file-access-mounts=shared",
            ]
        );
    }

    #[test]
    fn every_extra_flag_a_policy_may_set_is_representable() {
        // The policy's allowlist and this enum must agree, or a policy that loads fine would
        // fail every Create. directfs is a global flag of its own.
        let sample = |name: &str| match name {
            "file-access" | "file-access-mounts" => "shared",
            "watchdog-action" => "log",
            "dcache" | "fdlimit" | "num-network-channels" => "4",
            _ => "true",
        };
        for name in policy_injector::policy::ALLOWED_EXTRA_FLAGS {
            if *name == "directfs" {
                continue;
            }
            let flag =
                ExtraFlag::parse(name, sample(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(flag.name(), *name);
        }
    }

    #[test]
    fn cleanup_flags_are_the_ones_every_release_has() {
        assert_eq!(
            strings(GlobalFlags::for_cleanup("/r").to_args()),
            [
                "--root=/r",
                "--oci-seccomp",
                "--net-raw=false",
                "--host-uds=none"
            ]
        );
    }

    #[test]
    fn seccomp_off_and_closed_flags_unknown_to_the_release_are_omitted() {
        let mut g = GlobalFlags::new("/r");
        g.oci_seccomp = false;
        g.host_uds = None;
        g.host_fifo = None;
        g.character_devices = None;
        g.directfs = None;
        assert_eq!(strings(g.to_args()), ["--root=/r", "--net-raw=false"]);
    }

    #[test]
    fn flag_values_round_trip_and_unknown_spellings_are_refused() {
        for v in Overlay::ALL {
            assert_eq!(Overlay::parse(v).unwrap().as_str(), *v);
        }
        for v in Platform::ALL {
            assert_eq!(Platform::parse(v).unwrap().as_str(), *v);
        }
        assert_eq!(Network::parse("none"), Some(Network::None));
        assert_eq!(HostUds::parse("all"), Some(HostUds::All));
        assert_eq!(LogFormat::parse("json-k8s"), Some(LogFormat::JsonK8s));
        assert_eq!(Platform::parse("PTRACE"), None);
        assert_eq!(Overlay::parse("root:/tmp/x"), None);
    }

    #[test]
    fn every_flag_the_policy_does_not_allow_is_unrepresentable() {
        // The policy's decision table covers every flag of both releases; whatever it does not
        // allow in extra_flags has no ExtraFlag, in any spelling.
        use policy_injector::policy::runsc_flags::{FlagDecision, RUNSC_FLAGS};
        for (name, decision) in RUNSC_FLAGS {
            if *decision == FlagDecision::Allowed {
                continue;
            }
            for spelling in [name.to_string(), format!("--{name}"), format!("-{name}")] {
                assert!(
                    matches!(
                        ExtraFlag::parse(&spelling, "true"),
                        Err(FlagError::NotAllowed(_))
                    ),
                    "{spelling} must be refused"
                );
            }
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
        // -1 is runsc's own "no limit" default; anything below is garbage.
        assert_eq!(
            ExtraFlag::parse("fdlimit", "-1").unwrap(),
            ExtraFlag::FdLimit(-1)
        );
        assert!(matches!(
            ExtraFlag::parse("fdlimit", "-2"),
            Err(FlagError::BadValue { .. })
        ));
        assert!(matches!(
            ExtraFlag::parse("file-access", "everything"),
            Err(FlagError::BadValue { .. })
        ));
    }
}
