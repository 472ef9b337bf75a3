//! Feature parsing and reconciling against the captured outputs of runsc 20221219 and of the
//! current runsc (`fixtures/`).

use super::*;
use crate::runsc::flags::{CharacterDevices, ExtraFlag, FileAccess, HostFifo, LogFormat};
use crate::runsc::flags::{Network, WatchdogAction};

const OLD_FLAGS: &str = include_str!("fixtures/20221219/flags.txt");
const OLD_HELP: &str = include_str!("fixtures/20221219/help.txt");
const OLD_PLATFORMS: &str = include_str!("fixtures/20221219/platforms.txt");
const NEW_FLAGS: &str = include_str!("fixtures/20260905-160fafc42237/flags.txt");
const NEW_HELP: &str = include_str!("fixtures/20260905-160fafc42237/help.txt");
const NEW_PLATFORMS: &str = include_str!("fixtures/20260905-160fafc42237/platforms.txt");

fn old() -> Features {
    Features::parse(OLD_FLAGS, OLD_HELP, OLD_PLATFORMS)
}

fn new() -> Features {
    Features::parse(NEW_FLAGS, NEW_HELP, NEW_PLATFORMS)
}

fn strings(flags: &GlobalFlags) -> Vec<String> {
    flags
        .to_args()
        .into_iter()
        .map(|a| a.into_string().unwrap())
        .collect()
}

#[test]
fn release_20221219_flags_are_parsed() {
    let f = old();
    for flag in [
        "root",
        "oci-seccomp",
        "net-raw",
        "host-uds",
        "host-fifo",
        "overlay2",
        "network",
        "platform",
        "debug-log",
        "log-format",
        "ignore-cgroups",
    ] {
        assert!(f.has_flag(flag), "missing {flag}");
    }
    assert!(!f.has_flag("directfs"));
    assert!(!f.has_flag("character-device-policy"));
    // Usage lines are not flags.
    assert!(!f.has_flag("EXPERIMENTAL."));
    assert!(!f.flags.iter().any(|n| n.starts_with('-')));
    assert_eq!(f.flags.len(), 68); // `grep -c "^  -" flags.txt`
}

#[test]
fn current_release_flags_are_parsed() {
    let f = new();
    for flag in [
        "root",
        "oci-seccomp",
        "net-raw",
        "host-uds",
        "host-fifo",
        "character-device-policy",
        "overlay2",
        "directfs",
        "network",
        "platform",
        "cpu-num-from-quota",
        "nvproxy",
        "tpuproxy",
        "host-settings",
        "allow-flag-override",
        "TESTONLY-unsafe-nonroot",
        // "  -h\tequivalent to the 'help' flag": name and usage on one line.
        "h",
        // "  -net-raw runsc exec": a back-quoted word of the usage stands in for the type.
        "net-raw",
        "metric-server",
    ] {
        assert!(f.has_flag(flag), "missing {flag}");
    }
    assert!(!f.flags.iter().any(|n| n.starts_with('-') || n.is_empty()));
    assert_eq!(f.flags.len(), 119); // `grep -c "^  -" flags.txt`
}

#[test]
fn release_20221219_has_no_update_and_no_systrap() {
    let f = old();
    assert!(f.has_subcommand("create"));
    assert!(f.has_subcommand("wait"));
    assert!(f.has_subcommand("events"));
    assert!(!f.supports_update());
    // Help topics are not subcommands.
    assert!(!f.has_subcommand("platforms"));
    assert_eq!(
        f.platforms.iter().map(String::as_str).collect::<Vec<_>>(),
        ["kvm", "ptrace"]
    );
    assert!(!f.has_platform(Platform::Systrap));
}

#[test]
fn current_release_has_systrap_directfs_and_update() {
    let f = new();
    assert!(f.has_flag("directfs"));
    assert!(f.supports_update());
    assert_eq!(
        f.platforms.iter().map(String::as_str).collect::<Vec<_>>(),
        ["kvm", "ptrace", "slimvm", "systrap"]
    );
    // Every "Subcommands for ..." section counts; help topics do not.
    for sub in [
        "create", "exec", "wait", "events", "update", "debug", "nvproxy", "boot",
    ] {
        assert!(f.has_subcommand(sub), "{sub}");
    }
    assert!(!f.has_subcommand("platforms"));
    assert!(!f.has_subcommand("syscalls"));
}

#[test]
fn platforms_fall_back_to_the_flag_help_without_a_platforms_topic() {
    let f = Features::parse(OLD_FLAGS, OLD_HELP, "");
    assert_eq!(
        f.platforms.iter().map(String::as_str).collect::<Vec<_>>(),
        ["kvm", "ptrace"]
    );
    // "specifies which platform to use: systrap (default), ptrace, kvm. (default ...)"
    let f = Features::parse(NEW_FLAGS, NEW_HELP, "");
    assert_eq!(
        f.platforms.iter().map(String::as_str).collect::<Vec<_>>(),
        ["kvm", "ptrace", "systrap"]
    );
}

#[test]
fn hardened_defaults_on_each_release_only_gain_the_platform() {
    let wanted = GlobalFlags::new("/run/gh");
    let (flags, adj) = new().reconcile(&wanted).unwrap();
    assert_eq!(
        flags,
        GlobalFlags {
            platform: Some(Platform::Systrap),
            ..wanted.clone()
        }
    );
    assert!(adj.is_empty());
    // 20221219 has no --character-device-policy (its only devices are the emulated ones) and
    // no --directfs (the gofer mediates every file access).
    let (flags, adj) = old().reconcile(&wanted).unwrap();
    assert_eq!(
        flags,
        GlobalFlags {
            platform: Some(Platform::Ptrace),
            character_devices: None,
            directfs: None,
            ..wanted
        }
    );
    assert_eq!(
        adj.iter().map(|a| a.flag).collect::<Vec<_>>(),
        ["character-device-policy", "directfs"]
    );
}

#[test]
fn the_platform_is_systrap_where_listed_else_ptrace_and_a_policy_choice_is_kept() {
    let wanted = GlobalFlags::new("/r");
    assert_eq!(
        new().reconcile(&wanted).unwrap().0.platform,
        Some(Platform::Systrap)
    );
    assert_eq!(
        old().reconcile(&wanted).unwrap().0.platform,
        Some(Platform::Ptrace)
    );
    let mut ptrace = wanted.clone();
    ptrace.platform = Some(Platform::Ptrace);
    assert_eq!(
        new().reconcile(&ptrace).unwrap().0.platform,
        Some(Platform::Ptrace)
    );
    // A listing with neither leaves runsc's own default rather than guess kvm.
    let f = Features::parse(OLD_FLAGS, OLD_HELP, "kvm\n");
    assert_eq!(f.reconcile(&wanted).unwrap().0.platform, None);
}

/// The widest set of flags the shim can be asked for.
fn widest() -> GlobalFlags {
    let mut g = GlobalFlags::new("/r");
    g.network = Some(Network::None);
    g.overlay = Some(Overlay::RootMemory);
    g.directfs = Some(false);
    g.debug = true;
    g.debug_log = Some("/var/log/runsc/".into());
    g.log = Some("/b/runsc.log.json".into());
    g.log_format = Some(LogFormat::Json);
    g.extra = vec![
        ExtraFlag::BufferPooling(true),
        ExtraFlag::CpuNumFromQuota(true),
        ExtraFlag::Dcache(100),
        ExtraFlag::FdLimit(4096),
        ExtraFlag::FileAccess(FileAccess::Shared),
        ExtraFlag::FileAccessMounts(FileAccess::Exclusive),
        ExtraFlag::Gso(false),
        ExtraFlag::NumNetworkChannels(2),
        ExtraFlag::SoftwareGso(false),
        ExtraFlag::WatchdogAction(WatchdogAction::Panic),
    ];
    g
}

#[test]
fn every_flag_passed_is_one_the_release_lists() {
    for (name, f) in [("20221219", old()), ("current", new())] {
        let (flags, _) = f.reconcile(&widest()).unwrap();
        for arg in strings(&flags) {
            let flag = arg.trim_start_matches('-').split('=').next().unwrap();
            assert!(
                f.has_flag(flag),
                "{name}: {arg} is not a flag of this release"
            );
        }
    }
}

#[test]
fn every_flag_of_both_releases_has_a_decision_and_the_allowed_ones_open_nothing() {
    use policy_injector::policy::runsc_flags::{FlagDecision, RUNSC_FLAGS};
    for (name, f) in [("20221219", old()), ("current", new())] {
        for flag in &f.flags {
            let decided = RUNSC_FLAGS.iter().find(|(n, _)| n == flag);
            assert!(
                decided.is_some(),
                "--{flag} of runsc {name} is in no row of policy_injector's RUNSC_FLAGS: decide it"
            );
        }
    }
    // What the shim itself pins is pinned to the closed value, and none of those pins is a
    // flag a policy could set.
    let args = strings(&GlobalFlags::new("/r"));
    for (flag, value) in [
        ("net-raw", "false"),
        ("host-uds", "none"),
        ("host-fifo", HostFifo::None.as_str()),
        (
            "character-device-policy",
            CharacterDevices::EmulatedOnly.as_str(),
        ),
    ] {
        assert!(args.contains(&format!("--{flag}={value}")), "{args:?}");
        assert!(matches!(
            policy_injector::policy::runsc_flags::decision(flag),
            FlagDecision::Weakens(_)
        ));
    }
}

#[test]
fn directfs_is_off_by_default_dropped_where_unknown_and_kept_where_known() {
    let mut wanted = GlobalFlags::new("/r");
    assert_eq!(wanted.directfs, Some(false));
    wanted.directfs = Some(true);
    assert_eq!(new().reconcile(&wanted).unwrap().0.directfs, Some(true));
    wanted.directfs = Some(false);
    let (flags, adj) = old().reconcile(&wanted).unwrap();
    assert_eq!(flags.directfs, None);
    assert!(adj.iter().any(|a| a.flag == "directfs"));
    let (flags, adj) = new().reconcile(&wanted).unwrap();
    assert_eq!(flags.directfs, Some(false));
    assert!(adj.is_empty());
}

#[test]
fn systrap_on_the_old_release_fails_closed() {
    let mut wanted = GlobalFlags::new("/r");
    wanted.platform = Some(Platform::Systrap);
    let err = old().reconcile(&wanted).unwrap_err();
    assert_eq!(
        err,
        FeatureError::PlatformUnavailable {
            wanted: "systrap".into(),
            available: "kvm, ptrace".into()
        }
    );
    assert!(new().reconcile(&wanted).is_ok());
}

#[test]
fn missing_oci_seccomp_fails_closed() {
    for (flags, help, platforms) in [
        (OLD_FLAGS, OLD_HELP, OLD_PLATFORMS),
        (NEW_FLAGS, NEW_HELP, NEW_PLATFORMS),
    ] {
        let flags = flags.replace("  -oci-seccomp\n", "");
        let f = Features::parse(&flags, help, platforms);
        assert!(matches!(
            f.reconcile(&GlobalFlags::new("/r")),
            Err(FeatureError::MissingFlag {
                flag: "oci-seccomp",
                ..
            })
        ));
    }
}

#[test]
fn missing_net_raw_fails_closed() {
    for (flags, help, platforms) in [
        (OLD_FLAGS, OLD_HELP, OLD_PLATFORMS),
        (NEW_FLAGS, NEW_HELP, NEW_PLATFORMS),
    ] {
        let flags = flags.replace("  -net-raw runsc exec\n", "");
        let f = Features::parse(&flags, help, platforms);
        assert!(!f.has_flag("net-raw"));
        assert!(matches!(
            f.reconcile(&GlobalFlags::new("/r")),
            Err(FeatureError::MissingFlag {
                flag: "net-raw",
                ..
            })
        ));
    }
}

#[test]
fn missing_host_uds_is_a_no_op_only_for_none() {
    let flags = OLD_FLAGS.replace("  -host-uds value\n", "");
    let f = Features::parse(&flags, OLD_HELP, OLD_PLATFORMS);
    let (out, adj) = f.reconcile(&GlobalFlags::new("/r")).unwrap();
    assert_eq!(out.host_uds, None);
    assert!(adj.iter().any(|a| a.flag == "host-uds"));
    let mut open = GlobalFlags::new("/r");
    open.host_uds = Some(HostUds::Open);
    assert!(f.reconcile(&open).is_err());
}

#[test]
fn missing_host_fifo_is_left_out() {
    let flags = NEW_FLAGS.replace("  -host-fifo value\n", "");
    let f = Features::parse(&flags, NEW_HELP, NEW_PLATFORMS);
    let (out, adj) = f.reconcile(&GlobalFlags::new("/r")).unwrap();
    assert_eq!(out.host_fifo, None);
    assert_eq!(
        adj.iter().map(|a| a.flag).collect::<Vec<_>>(),
        ["host-fifo"]
    );
}

#[test]
fn overlay_needs_overlay2_unless_off() {
    let flags = OLD_FLAGS.replace("  -overlay2 value\n", "");
    let f = Features::parse(&flags, OLD_HELP, OLD_PLATFORMS);
    let mut wanted = GlobalFlags::new("/r");
    wanted.overlay = Some(Overlay::RootMemory);
    assert!(matches!(
        f.reconcile(&wanted),
        Err(FeatureError::MissingFlag {
            flag: "overlay2",
            ..
        })
    ));
    wanted.overlay = Some(Overlay::Off);
    assert_eq!(f.reconcile(&wanted).unwrap().0.overlay, None);
    // Both real releases have it.
    wanted.overlay = Some(Overlay::RootMemory);
    assert!(old().reconcile(&wanted).is_ok());
    assert!(new().reconcile(&wanted).is_ok());
}

#[test]
fn extra_flags_must_be_known_to_the_binary() {
    let mut wanted = GlobalFlags::new("/r");
    wanted.extra = vec![ExtraFlag::CpuNumFromQuota(true)];
    assert!(old().reconcile(&wanted).is_ok());
    assert!(new().reconcile(&wanted).is_ok());
    let flags = NEW_FLAGS.replace("  -cpu-num-from-quota\n", "");
    let f = Features::parse(&flags, NEW_HELP, NEW_PLATFORMS);
    assert_eq!(
        f.reconcile(&wanted).unwrap_err(),
        FeatureError::UnknownExtraFlag("cpu-num-from-quota")
    );
}

#[test]
fn empty_flag_listing_is_an_error_not_a_pass() {
    let f = Features::parse("", OLD_HELP, OLD_PLATFORMS);
    assert_eq!(
        f.reconcile(&GlobalFlags::new("/r")).unwrap_err(),
        FeatureError::NoFlagsListed
    );
}
