//! Semantic checks of a parsed policy: values of the right type that still cannot be used.

use super::issue::{check_abs_path, contradiction, invalid, Issue};
use super::Policy;
use crate::glob::PathGlob;

const KNOWN_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

pub(crate) const NAMESPACE_TYPES: &[&str] = &[
    "pid", "network", "mount", "ipc", "uts", "user", "cgroup", "time",
];

/// The prefix of this runtime's own tightening annotations.
pub(crate) const OWN_ANNOTATION_PREFIX: &str = "gvisor-hardened.dev/";

fn check_globs(key: &str, patterns: &[String]) -> Result<(), Issue> {
    for (i, p) in patterns.iter().enumerate() {
        PathGlob::new(p).map_err(|e| invalid(format!("{key}[{i}]"), e))?;
    }
    Ok(())
}

fn check_unique(key: &str, items: &[String]) -> Result<(), Issue> {
    for (i, item) in items.iter().enumerate() {
        if items[..i].contains(item) {
            return Err(invalid(
                format!("{key}[{i}]"),
                format!("{item:?} is listed twice"),
            ));
        }
    }
    Ok(())
}

pub(crate) fn validate(p: &Policy) -> Result<(), Issue> {
    if p.version != 1 {
        return Err(invalid(
            "version",
            format!("unsupported policy version {} (only 1 exists)", p.version),
        ));
    }
    check_globs("root.allowed_host_paths", &p.root.allowed_host_paths)?;
    capabilities(p)?;
    user(p)?;
    scratch(p)?;
    mounts(p)?;
    resources(p)?;
    rlimits(p)?;
    namespaces(p)?;
    seccomp(p)?;
    annotations(p)?;
    sysctls(p)?;
    lifetime(p)?;
    environment(p)?;
    runsc(p)?;
    audit(p)?;
    super::evidence::validate(p)?;
    super::workspace::validate(p)?;
    super::egress::validate(p)?;
    super::pool::validate(p)?;
    if !["error", "warn", "info", "debug", "trace"].contains(&p.log.level.as_str()) {
        return Err(invalid(
            "log.level",
            format!(
                "unknown level {:?} (use error, warn, info, debug or trace)",
                p.log.level
            ),
        ));
    }
    Ok(())
}

/// Below this a rotated file would hold a handful of records: rotation would churn files and
/// `keep` would cover minutes of history.
const MIN_AUDIT_MAX_SIZE: u64 = 64 << 10;
/// Rotation renames each kept file once per rotation, under the lock every shim waits on.
const MAX_AUDIT_KEEP: u32 = 1000;

fn audit(p: &Policy) -> Result<(), Issue> {
    if !p.audit.path.starts_with('/') {
        return Err(invalid("audit.path", "must be an absolute path"));
    }
    if p.audit.max_size.0 < MIN_AUDIT_MAX_SIZE {
        return Err(invalid(
            "audit.max_size",
            format!("must be at least {}Ki", MIN_AUDIT_MAX_SIZE >> 10),
        ));
    }
    if p.audit.keep == 0 || p.audit.keep > MAX_AUDIT_KEEP {
        // Without a rotated file the first record of a new file would link to nothing on disk.
        return Err(invalid(
            "audit.keep",
            format!("must be between 1 and {MAX_AUDIT_KEEP}"),
        ));
    }
    if !p.audit.signing_key.is_empty() && !p.audit.signing_key.starts_with('/') {
        return Err(invalid(
            "audit.signing_key",
            "must be an absolute path (or \"\" for no signing)",
        ));
    }
    Ok(())
}

fn capabilities(p: &Policy) -> Result<(), Issue> {
    for (i, cap) in p.capabilities.allow.iter().enumerate() {
        if !KNOWN_CAPS.contains(&cap.as_str()) {
            let hint = if KNOWN_CAPS.contains(&format!("CAP_{cap}").as_str()) {
                format!(" (write \"CAP_{cap}\")")
            } else {
                String::new()
            };
            return Err(invalid(
                format!("capabilities.allow[{i}]"),
                format!("unknown capability {cap:?}{hint}"),
            ));
        }
    }
    check_unique("capabilities.allow", &p.capabilities.allow)
}

fn user(p: &Policy) -> Result<(), Issue> {
    if p.user.uid == 0 {
        return Err(invalid("user.uid", "0 would run containers as root"));
    }
    if p.user.gid == 0 {
        return Err(invalid(
            "user.gid",
            "0 would run containers in the root group",
        ));
    }
    Ok(())
}

fn scratch(p: &Policy) -> Result<(), Issue> {
    if p.scratch.max_tmpfs.0 == 0 {
        return Err(invalid(
            "scratch.max_tmpfs",
            "0 bytes would leave every other tmpfs unusable",
        ));
    }
    for (i, t) in p.scratch.tmpfs.iter().enumerate() {
        let key = |f: &str| format!("scratch.tmpfs[{i}].{f}");
        check_abs_path(&key("path"), &t.path)?;
        if t.path == "/" {
            return Err(invalid(
                key("path"),
                "a tmpfs over / would hide the root filesystem",
            ));
        }
        if p.scratch.tmpfs[..i].iter().any(|o| o.path == t.path) {
            return Err(invalid(
                key("path"),
                format!("{:?} is listed twice", t.path),
            ));
        }
        if t.size.0 == 0 {
            return Err(invalid(key("size"), "0 bytes is not a usable tmpfs"));
        }
        for opt in &t.options {
            if opt == "suid" || opt == "dev" {
                return Err(contradiction(
                    &[&key("options"), "mounts"],
                    format!("option {opt:?}: every mount gets nosuid,nodev"),
                ));
            }
            if opt.starts_with("size=") {
                return Err(invalid(key("options"), "set the size with the `size` key"));
            }
            if opt.starts_with("nr_inodes=") || opt.starts_with("nr_blocks=") {
                return Err(invalid(
                    key("options"),
                    format!("{opt:?}: runsc ignores it (measured with runsc 20221219: 200000 files in a tmpfs with nr_inodes=100); the sandbox's memory limit bounds the number of files"),
                ));
            }
            if opt.is_empty() || opt.contains(',') {
                return Err(invalid(
                    key("options"),
                    format!("bad option {opt:?}: one option per entry"),
                ));
            }
        }
    }
    Ok(())
}

fn mounts(p: &Policy) -> Result<(), Issue> {
    let m = &p.mounts;
    check_globs("mounts.writable_sources", &m.writable_sources)?;
    check_globs("mounts.denied_sources", &m.denied_sources)?;
    for (key, list) in [("mounts.protect", &m.protect), ("mounts.mask", &m.mask)] {
        for (i, p) in list.iter().enumerate() {
            crate::tree_glob::TreeGlob::new(p).map_err(|e| invalid(format!("{key}[{i}]"), e))?;
        }
        check_unique(key, list)?;
    }
    for (i, t) in m.allowed_types.iter().enumerate() {
        if t.is_empty() || t.contains(char::is_whitespace) {
            return Err(invalid(
                format!("mounts.allowed_types[{i}]"),
                format!("bad mount type {t:?}"),
            ));
        }
    }
    for (i, d) in m.credential_destinations.iter().enumerate() {
        check_abs_path(&format!("mounts.credential_destinations[{i}]"), d)?;
    }
    check_abs_path("mounts.kubelet_root", &m.kubelet_root)?;
    // An operator who wants emptyDir writable but also lists it as denied has written two
    // answers to one question.
    for w in &m.writable_sources {
        if m.denied_sources.contains(w) {
            return Err(contradiction(
                &["mounts.writable_sources", "mounts.denied_sources"],
                format!("{w:?} is both writable and denied"),
            ));
        }
    }
    Ok(())
}

fn resources(p: &Policy) -> Result<(), Issue> {
    let r = &p.resources;
    if r.memory.0 == 0 {
        return Err(invalid(
            "resources.memory",
            "0 bytes leaves nothing to run in",
        ));
    }
    // Below this the kernel refuses the memory cgroup limit (and runsc needs far more).
    if r.memory.0 < (4 << 20) {
        return Err(invalid(
            "resources.memory",
            "below 4Mi, no sandbox can start",
        ));
    }
    if r.memory.0 > i64::MAX as u64 {
        return Err(invalid(
            "resources.memory",
            "does not fit the OCI limit field",
        ));
    }
    if r.cpu.0 == 0 {
        return Err(invalid("resources.cpu", "0 CPUs leaves nothing to run on"));
    }
    // quota = cpu * period / 1000 must fit; with the maximal period of 1s that is cpu*1000.
    if r.cpu.0 > 1 << 40 {
        return Err(invalid("resources.cpu", "value too large"));
    }
    if r.processes == 0 {
        return Err(invalid(
            "resources.processes",
            "0 processes leaves nothing to run",
        ));
    }
    for (key, v) in [
        ("resources.pids_per_process", r.pids_per_process),
        (
            "resources.pids_per_process_systrap",
            r.pids_per_process_systrap,
        ),
    ] {
        if v == 0 {
            return Err(invalid(
                key,
                "every guest process costs host tasks under runsc; 0 would size the limit wrongly",
            ));
        }
    }
    let total = r
        .pids_per_process
        .max(r.pids_per_process_systrap)
        .checked_mul(r.processes)
        .and_then(|v| v.checked_add(r.pids_base))
        .filter(|v| *v <= i64::MAX as u64);
    if total.is_none() {
        return Err(contradiction(
            &[
                "resources.processes",
                "resources.pids_per_process",
                "resources.pids_base",
            ],
            "pids_base + pids_per_process * processes overflows the pids limit",
        ));
    }
    Ok(())
}

fn rlimits(p: &Policy) -> Result<(), Issue> {
    if p.rlimits.nofile == 0 {
        return Err(invalid(
            "rlimits.nofile",
            "0 would leave no file descriptor, not even stdio",
        ));
    }
    Ok(())
}

fn namespaces(p: &Policy) -> Result<(), Issue> {
    for (i, t) in p.namespaces.reject_host.iter().enumerate() {
        if !NAMESPACE_TYPES.contains(&t.as_str()) {
            return Err(invalid(
                format!("namespaces.reject_host[{i}]"),
                format!(
                    "unknown namespace type {t:?} (use {})",
                    NAMESPACE_TYPES.join(", ")
                ),
            ));
        }
    }
    check_unique("namespaces.reject_host", &p.namespaces.reject_host)?;
    check_globs("namespaces.allowed_paths", &p.namespaces.allowed_paths)
}

fn seccomp(p: &Policy) -> Result<(), Issue> {
    for (i, name) in p.seccomp.deny.iter().enumerate() {
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok {
            return Err(invalid(
                format!("seccomp.deny[{i}]"),
                format!("{name:?} is not a syscall name"),
            ));
        }
        for special in ["clone", "clone3", "unshare"] {
            if name == special {
                return Err(invalid(
                    format!("seccomp.deny[{i}]"),
                    format!("{name} is handled by the profile itself (CLONE_NEWUSER is refused); denying it outright breaks every process"),
                ));
            }
        }
    }
    check_unique("seccomp.deny", &p.seccomp.deny)?;
    if p.seccomp.override_spec && !p.seccomp.inject_default {
        return Err(contradiction(
            &["seccomp.override_spec", "seccomp.inject_default"],
            "overriding the spec's profile needs the default profile to override it with",
        ));
    }
    Ok(())
}

fn annotations(p: &Policy) -> Result<(), Issue> {
    let prefixes = &p.annotations.strip_prefixes;
    for (i, pre) in prefixes.iter().enumerate() {
        if pre.is_empty() {
            return Err(invalid(
                format!("annotations.strip_prefixes[{i}]"),
                "an empty prefix would strip every annotation",
            ));
        }
        if OWN_ANNOTATION_PREFIX.starts_with(pre.as_str()) || pre.starts_with(OWN_ANNOTATION_PREFIX)
        {
            return Err(contradiction(
                &[&format!("annotations.strip_prefixes[{i}]"), "resources.processes"],
                format!("{pre:?} would strip the {OWN_ANNOTATION_PREFIX}* annotations that tighten limits and record the process budget"),
            ));
        }
    }
    if !prefixes
        .iter()
        .any(|pre| "dev.gvisor.".starts_with(pre.as_str()))
    {
        return Err(invalid(
            "annotations.strip_prefixes",
            "must cover \"dev.gvisor.\": those annotations can override runsc flags and mounts",
        ));
    }
    Ok(())
}

fn sysctls(p: &Policy) -> Result<(), Issue> {
    for (i, name) in p.sysctls.allow.iter().enumerate() {
        let ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if !ok {
            return Err(invalid(
                format!("sysctls.allow[{i}]"),
                format!("{name:?} is not a sysctl name"),
            ));
        }
    }
    check_unique("sysctls.allow", &p.sysctls.allow)
}

fn lifetime(p: &Policy) -> Result<(), Issue> {
    if p.lifetime.max_runtime.0.is_zero() {
        return Err(invalid(
            "lifetime.max_runtime",
            "0 would stop every container at once",
        ));
    }
    Ok(())
}

fn environment(p: &Policy) -> Result<(), Issue> {
    for (i, pat) in p.environment.secret_patterns.iter().enumerate() {
        if pat.is_empty() || pat.contains('=') || pat.chars().all(|c| c == '*') {
            return Err(invalid(
                format!("environment.secret_patterns[{i}]"),
                format!("{pat:?} is not a usable name pattern"),
            ));
        }
    }
    for (name, value) in &p.environment.defaults {
        let key = format!("environment.defaults.{name}");
        if name.is_empty() || name.contains(['=', '\0']) || value.contains('\0') {
            return Err(invalid(key, "not a usable variable"));
        }
        if let Some(pat) = p
            .environment
            .secret_patterns
            .iter()
            .find(|pat| crate::glob::wildcard_match_ignore_case(pat, name))
        {
            return Err(invalid(
                key,
                format!("the name matches secret pattern {pat}: a policy plants no secrets"),
            ));
        }
    }
    Ok(())
}

fn runsc(p: &Policy) -> Result<(), Issue> {
    let r = &p.runsc;
    if r.path.is_empty() {
        return Err(invalid("runsc.path", "empty path"));
    }
    check_abs_path("runsc.root", &r.root)?;
    if !["", "ptrace", "kvm", "systrap"].contains(&r.platform.as_str()) {
        return Err(invalid(
            "runsc.platform",
            format!(
                "unknown platform {:?} (use \"\", ptrace, kvm or systrap)",
                r.platform
            ),
        ));
    }
    let overlay_ok = match r.overlay.as_str() {
        "auto" | "none" => true,
        other => match other.split_once(':') {
            Some(("root" | "all", "memory" | "self")) => true,
            Some(("root" | "all", dir)) => dir.starts_with('/'),
            _ => false,
        },
    };
    if !overlay_ok {
        return Err(invalid(
            "runsc.overlay",
            format!("unknown overlay {:?} (use auto, none, root:memory, root:self, all:memory, all:self)", r.overlay),
        ));
    }
    if !p.root.readonly && r.overlay == "none" {
        return Err(contradiction(
            &["runsc.overlay", "root.readonly"],
            "with a writable root and no overlay, container writes land in the host's copy of the rootfs",
        ));
    }
    super::runsc_flags::check_extra_flags(p)?;
    check_abs_path("runsc.debug_log_dir", r.debug_log_dir.trim_end_matches('/'))?;
    Ok(())
}
