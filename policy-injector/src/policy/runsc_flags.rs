//! Every top-level runsc flag, decided: which ones a policy may add through `[runsc]
//! extra_flags`, which ones other policy keys own, and why each of the rest is refused.
//!
//! The table covers the union of the flags of runsc 20221219 (Debian's) and of the current
//! runsc this project builds (`hack/deps.sh`), read from their `runsc flags` output; the shim's
//! tests check that no flag of either listing is missing here. The same table gives the reason
//! when a flag reaches us another way: runsc-hardened's command line (Docker's `runtimeArgs`,
//! Podman's `--runtime-flag`) names it in its refusal, and the attack catalogue has a row for
//! every [`FlagDecision::Weakens`] flag. `dev.gvisor.*` annotations never reach runsc (the
//! annotations rule strips them), so no flag can be set per container either.

use super::issue::{invalid, Issue};
use super::Policy;

/// What the runtime does with one runsc flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagDecision {
    /// A policy may set it in `[runsc] extra_flags` (a tuning knob that opens nothing).
    Allowed,
    /// Set through this other policy key, or by the runtime itself; refused in `extra_flags`.
    PolicyKey(&'static str),
    /// Weakens the sandbox or reaches into the host: refused on every path, kept off (or pinned
    /// to its safe value) on runsc's command line, with a row in the attack catalogue.
    Weakens(&'static str),
    /// Refused for another reason (debugging and tracing, checkpoint/restore, no effect, no use
    /// here); none of them is set, so runsc's default applies.
    Refused(&'static str),
}

impl FlagDecision {
    /// Why the flag cannot be set in `extra_flags`; `None` for allowed flags.
    pub fn refusal(self) -> Option<String> {
        match self {
            FlagDecision::Allowed => None,
            FlagDecision::PolicyKey(key) => Some(format!("set {key} instead")),
            FlagDecision::Weakens(why) => Some(format!("it weakens the sandbox: {why}")),
            FlagDecision::Refused(why) => Some(why.to_string()),
        }
    }
}

use FlagDecision::{Allowed, PolicyKey, Refused, Weakens};

const DEBUGGING: FlagDecision = Refused(
    "debugging, profiling, tracing and logging flags stay off: they write host files, copy the workload's data into logs, or loosen the sentry's seccomp filter ([runsc] debug is the supported switch)",
);
const TEST_ONLY: FlagDecision =
    Weakens("a TEST ONLY flag (\"do not ever use\"): untested sentry features or test hooks");
const CHECKPOINT: FlagDecision =
    Refused("checkpoint/restore settings: the runtime never checkpoints a sandbox");
const NO_EFFECT: FlagDecision = Refused("deprecated: it has no effect in current runsc");
const CGROUPS: FlagDecision = Refused(
    "the runtime gives runsc the sandbox's cgroup (linux.cgroupsPath, cgroupfs) and nothing else: the host cgroup is the only ceiling",
);
const NETWORK_TUNING: FlagDecision = Refused(
    "network device tuning for --network=sandbox: not on the allowlist (num-network-channels, gso and software-gso are)",
);
const NOT_NEEDED: FlagDecision =
    Refused("not on the allowlist: no use for it under this runtime's policy yet");
const DEVICE_PROXY: FlagDecision = Weakens(
    "a device proxy passes the host's GPU/TPU/RDMA driver interface (ioctls on host device files) into the sandbox",
);
const OWN_LOG: FlagDecision = Refused(
    "the runtime owns runsc's log (--log, --log-format: where it reads runsc's errors from)",
);

/// Every runsc flag of 20221219 and of the current runsc, with its decision. Sorted as `runsc
/// flags` prints them.
pub const RUNSC_FLAGS: &[(&str, FlagDecision)] = &[
    ("EXPERIMENTAL-afxdp", Weakens("attaches the sandbox to a host network device through an AF_XDP socket")),
    ("EXPERIMENTAL-xdp", Weakens("redirect:<dev> and tunnel:<dev> attach the sandbox to a host network device through XDP")),
    ("EXPERIMENTAL-xdp-need-wakeup", Weakens("an XDP setting: the sandbox attached to a host network device")),
    ("TESTONLY-afs-syscall-panic", TEST_ONLY),
    ("TESTONLY-allow-packet-endpoint-write", Weakens("writes on AF_PACKET sockets let the workload craft arbitrary frames")),
    ("TESTONLY-autosave-image-path", TEST_ONLY),
    ("TESTONLY-autosave-resume", TEST_ONLY),
    ("TESTONLY-nftables", TEST_ONLY),
    ("TESTONLY-test-name-env", TEST_ONLY),
    ("TESTONLY-unsafe-nonroot", Weakens("skips many of the measures that isolate the host from the sandbox")),
    ("allow-connected-on-save", CHECKPOINT),
    ("allow-flag-override", Weakens("lets dev.gvisor.flag.* annotations in a spec override any runsc flag")),
    ("allow-live-tcp-migration", CHECKPOINT),
    ("allow-packet-socket-write", Weakens("writes on AF_PACKET sockets let the workload craft arbitrary frames")),
    ("allow-rootfs-tar-annotation", Weakens("lets a spec annotation name a host tar file to build the root filesystem from")),
    ("allow-suid", Weakens("setuid and setgid binaries would raise the process's ids inside the sandbox")),
    ("alsologtostderr", DEBUGGING),
    ("app-huge-pages", NOT_NEEDED),
    ("buffer-pooling", Allowed),
    ("cgroupfs", NO_EFFECT),
    ("character-device-policy", Weakens("prefer-emulated and passthrough open host character devices from the bind mounts")),
    ("control-rpc-stop-timeout", NOT_NEEDED),
    ("coverage-fd", DEBUGGING),
    ("coverage-report", DEBUGGING),
    ("cpu-num-from-quota", Allowed),
    ("dcache", Allowed),
    ("debug", PolicyKey("[runsc] debug")),
    ("debug-command", DEBUGGING),
    ("debug-log", PolicyKey("[runsc] debug_log_dir")),
    ("debug-log-fd", DEBUGGING),
    ("debug-log-format", DEBUGGING),
    ("debug-to-user-log", DEBUGGING),
    ("directfs", Allowed),
    ("enable-core-tags", NOT_NEEDED),
    ("fdlimit", Allowed),
    ("file-access", Allowed),
    ("file-access-mounts", Allowed),
    ("final-metrics-log", DEBUGGING),
    ("fsgofer-host-uds", Weakens("the old spelling of host-uds=all: the sandbox could open and create host Unix sockets")),
    ("fuse", NO_EFFECT),
    ("gofer-network-namespace", Weakens("host puts the gofer, which holds the container's files, into the host's network namespace")),
    ("gso", Allowed),
    ("gvisor-gro", NETWORK_TUNING),
    ("gvisor-marker-file", NOT_NEEDED),
    ("h", Refused("not a sandbox setting")),
    ("help", Refused("not a sandbox setting")),
    ("host-fifo", Weakens("open lets the sandbox open host FIFOs in its bind mounts; always none")),
    ("host-settings", Weakens("adjust and enforce change the host kernel's settings")),
    ("host-uds", Weakens("the sandbox could open or create host Unix sockets in its bind mounts; always none")),
    ("ignore-cgroups", Weakens("runsc then enforces no memory, CPU or pids limit")),
    ("in-sandbox-cgroup", CGROUPS),
    ("iouring", TEST_ONLY),
    ("kvm-use-cpu-nums", NOT_NEEDED),
    ("lisafs", NO_EFFECT),
    ("log", OWN_LOG),
    ("log-fd", OWN_LOG),
    ("log-format", OWN_LOG),
    ("log-packets", DEBUGGING),
    ("metric-server", Weakens("exports the sandbox's metrics on a host network address or Unix socket")),
    ("mount-cgroup-v2", CGROUPS),
    ("net-disconnect-ok", CHECKPOINT),
    ("net-raw", Weakens("raw sockets (CAP_NET_RAW) let the workload craft packets; always false")),
    ("network", PolicyKey("[network] mode (host only by the operator's policy, never by a spec)")),
    ("network-processors-per-channel", NETWORK_TUNING),
    ("num-network-channels", Allowed),
    ("nvproxy", DEVICE_PROXY),
    ("nvproxy-allow-unsupported-driver", DEVICE_PROXY),
    ("nvproxy-allowed-driver-capabilities", DEVICE_PROXY),
    ("nvproxy-docker", Weakens("injects nvidia-container-runtime-hook, a hook that runs on the host, and the GPU device proxy")),
    ("nvproxy-driver-version", DEVICE_PROXY),
    ("oci-seccomp", PolicyKey("[seccomp] (always on when the spec has a profile, and the policy injects one)")),
    ("overlay", PolicyKey("[runsc] overlay")),
    ("overlay2", PolicyKey("[runsc] overlay")),
    ("override-procs", NOT_NEEDED),
    ("panic-log", DEBUGGING),
    ("panic-log-fd", DEBUGGING),
    ("panic-signal", DEBUGGING),
    ("pause-external-networking", NOT_NEEDED),
    ("pcap-log", DEBUGGING),
    ("platform", PolicyKey("[runsc] platform")),
    ("platform_device_path", Weakens("names a host device file for the platform to open (/dev/kvm by default)")),
    ("pod-init-config", Weakens("runsc reads a host file of extra steps to take when the pod is created")),
    ("profile", Weakens("the profiler loosens the sentry's seccomp filter (\"DO NOT USE IN PRODUCTION\")")),
    ("profile-block", DEBUGGING),
    ("profile-cpu", DEBUGGING),
    ("profile-gc-interval", DEBUGGING),
    ("profile-heap", DEBUGGING),
    ("profile-mutex", DEBUGGING),
    ("profiling-metrics", DEBUGGING),
    ("profiling-metrics-log", DEBUGGING),
    ("profiling-metrics-rate-us", DEBUGGING),
    ("qdisc", NETWORK_TUNING),
    ("qdisc-tbf-burst", NETWORK_TUNING),
    ("qdisc-tbf-rate", NETWORK_TUNING),
    ("rdmaproxy", DEVICE_PROXY),
    ("ref-leak-mode", DEBUGGING),
    ("reproduce-nat", Weakens("copies the NAT table of runsc's host network namespace into the sandbox")),
    ("reproduce-nftables", Weakens("copies the nftables rules of runsc's host network namespace into the sandbox")),
    ("restore-spec-validation", CHECKPOINT),
    ("root", PolicyKey("[runsc] root")),
    ("rootless", Weakens("sandbox and gofer may keep the caller's privileges instead of dropping to an unprivileged user")),
    ("rx-checksum-offload", NETWORK_TUNING),
    ("save-restore-netstack", NO_EFFECT),
    ("shared-root", Refused("state shared across sandboxes stays under [runsc] root")),
    ("sidecar-release-enforcement-policy", Refused("which helper binaries runsc trusts stays runsc's release default")),
    ("sidecar-usage-policy", Refused("which helper binaries runsc trusts stays runsc's release default")),
    ("software-gso", Allowed),
    ("strace", DEBUGGING),
    ("strace-event", DEBUGGING),
    ("strace-log-size", DEBUGGING),
    ("strace-syscalls", DEBUGGING),
    ("systemd-cgroup", CGROUPS),
    ("systrap-disable-fast-path", NOT_NEEDED),
    ("systrap-disable-syscall-patching", NOT_NEEDED),
    ("tpuproxy", DEVICE_PROXY),
    ("trace", DEBUGGING),
    ("traceback", DEBUGGING),
    ("tx-checksum-offload", NETWORK_TUNING),
    ("version", Refused("not a sandbox setting")),
    ("vfs2", NO_EFFECT),
    ("watchdog-action", Allowed),
];

/// runsc flags a policy may add. Each tunes performance or compatibility; none weakens the
/// sandbox boundary or hides what runsc does. The shim spells each of them as a typed flag and
/// tests that it can represent every entry here.
pub const ALLOWED_EXTRA_FLAGS: &[&str] = &[
    "buffer-pooling",
    "cpu-num-from-quota",
    "dcache",
    "directfs",
    "fdlimit",
    "file-access",
    "file-access-mounts",
    "gso",
    "num-network-channels",
    "software-gso",
    "watchdog-action",
];

/// The decision for `flag` (with or without leading dashes, as runsc spells it). A name this
/// table does not know is decided by its family (`TESTONLY-*`, `nvproxy*`, `debug*`...), and
/// otherwise refused as unknown: a flag of a newer runsc stays off until someone decides it.
pub fn decision(flag: &str) -> FlagDecision {
    let name = flag.trim_start_matches('-');
    if let Some((_, d)) = RUNSC_FLAGS.iter().find(|(n, _)| *n == name) {
        return *d;
    }
    let family = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    if family(&["TESTONLY", "unsafe", "EXPERIMENTAL"]) {
        TEST_ONLY
    } else if family(&["nvproxy", "tpuproxy", "rdmaproxy"]) {
        DEVICE_PROXY
    } else if family(&["allow-", "host-"]) {
        Weakens("an unknown flag that allows something or reaches the host")
    } else if family(&[
        "debug", "log", "profile", "trace", "strace", "pcap", "panic",
    ]) {
        DEBUGGING
    } else {
        Refused(
            "not a runsc flag this version of the runtime has decided on (see ALLOWED_EXTRA_FLAGS)",
        )
    }
}

/// The flags that weaken the sandbox, with the reason: what the attack catalogue covers.
pub fn weakening_flags() -> impl Iterator<Item = (&'static str, &'static str)> {
    RUNSC_FLAGS.iter().filter_map(|(name, d)| match d {
        Weakens(why) => Some((*name, *why)),
        _ => None,
    })
}

/// The values each allowed extra flag takes, checked when the policy loads so a typo fails
/// `check-policy` rather than the first Create.
fn value_ok(flag: &str, value: &str) -> bool {
    let boolean = matches!(value, "true" | "false");
    match flag {
        "buffer-pooling" | "cpu-num-from-quota" | "directfs" | "gso" | "software-gso" => boolean,
        "dcache" => value.parse::<i32>().is_ok_and(|n| n >= -1),
        "fdlimit" => value.parse::<i32>().is_ok_and(|n| n >= -1),
        "num-network-channels" => value.parse::<u32>().is_ok_and(|n| (1..=64).contains(&n)),
        "file-access" | "file-access-mounts" => matches!(value, "exclusive" | "shared"),
        "watchdog-action" => matches!(value, "log" | "panic"),
        _ => false,
    }
}

/// `[runsc] extra_flags`: each name allowed and written as runsc spells it, each value valid.
pub(super) fn check_extra_flags(p: &Policy) -> Result<(), Issue> {
    for (flag, value) in &p.runsc.extra_flags {
        let key = format!("runsc.extra_flags.{flag}");
        let name = flag.trim_start_matches('-');
        if let Some(why) = decision(name).refusal() {
            return Err(invalid(key, format!("flag --{name} is not allowed: {why}")));
        }
        if name != flag {
            return Err(invalid(
                key,
                format!("write the flag without dashes: {name}"),
            ));
        }
        if !ALLOWED_EXTRA_FLAGS.contains(&name) {
            // The table and the allowlist disagree: refuse rather than pass an unchecked flag.
            return Err(invalid(
                key,
                format!(
                    "flag --{name} is not on the allowlist ({})",
                    ALLOWED_EXTRA_FLAGS.join(", ")
                ),
            ));
        }
        if !value_ok(name, value) {
            return Err(invalid(key, format!("bad value {value:?} for --{name}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_and_has_no_duplicates() {
        for pair in RUNSC_FLAGS.windows(2) {
            assert!(pair[0].0 < pair[1].0, "{} before {}", pair[0].0, pair[1].0);
        }
    }

    #[test]
    fn the_allowlist_is_exactly_the_allowed_entries_of_the_table() {
        let allowed: Vec<&str> = RUNSC_FLAGS
            .iter()
            .filter(|(_, d)| *d == Allowed)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(allowed, ALLOWED_EXTRA_FLAGS);
        for name in ALLOWED_EXTRA_FLAGS {
            assert!(value_ok(name, sample_value(name)), "{name}");
        }
    }

    fn sample_value(name: &str) -> &'static str {
        match name {
            "file-access" | "file-access-mounts" => "shared",
            "watchdog-action" => "log",
            "dcache" | "fdlimit" | "num-network-channels" => "4",
            _ => "true",
        }
    }

    #[test]
    fn what_opens_the_host_is_a_weakening_flag() {
        for name in [
            "allow-flag-override",
            "net-raw",
            "allow-packet-socket-write",
            "TESTONLY-allow-packet-endpoint-write",
            "host-uds",
            "fsgofer-host-uds",
            "host-fifo",
            "host-settings",
            "ignore-cgroups",
            "nvproxy",
            "nvproxy-docker",
            "tpuproxy",
            "rdmaproxy",
            "TESTONLY-unsafe-nonroot",
            "rootless",
            "allow-suid",
            "character-device-policy",
            "gofer-network-namespace",
            "profile",
            "metric-server",
        ] {
            assert!(matches!(decision(name), Weakens(_)), "{name}");
        }
    }

    #[test]
    fn every_flag_but_the_allowed_ones_is_refused_in_extra_flags_naming_it() {
        for (name, d) in RUNSC_FLAGS {
            for spelling in [name.to_string(), format!("--{name}")] {
                let src = format!("[runsc.extra_flags]\n{spelling:?} = \"true\"\n");
                let result = Policy::from_toml_str(&src);
                if *d == Allowed && spelling == *name {
                    // Only its value can be wrong here ("true" is not a number or a mode).
                    continue;
                }
                let e = result.expect_err(&spelling).to_string();
                assert!(
                    e.contains(&format!("runsc.extra_flags.{spelling}")) && e.contains(name),
                    "{spelling}: {e}"
                );
            }
        }
        let e = Policy::from_toml_str("[runsc.extra_flags]\nhost-uds = \"all\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("weakens the sandbox") && e.contains("host Unix sockets"),
            "{e}"
        );
        let e = Policy::from_toml_str("[runsc.extra_flags]\n\"--fdlimit\" = 64\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("without dashes"), "{e}");
        assert!(
            Policy::from_toml_str("[runsc.extra_flags]\nfdlimit = 64\ndirectfs = false\n").is_ok()
        );
    }

    #[test]
    fn unknown_flags_are_decided_by_family_and_never_allowed() {
        assert_eq!(decision("TESTONLY-new-thing"), TEST_ONLY);
        assert_eq!(decision("unsafe-anything"), TEST_ONLY);
        assert_eq!(decision("nvproxy-new-knob"), DEVICE_PROXY);
        assert!(matches!(decision("allow-everything"), Weakens(_)));
        assert!(matches!(decision("host-network-magic"), Weakens(_)));
        assert_eq!(decision("debug-new"), DEBUGGING);
        assert!(matches!(decision("made-up"), Refused(_)));
        // Dashes do not change the decision.
        assert_eq!(decision("--net-raw"), decision("net-raw"));
    }
}
