//! The runtimes compared, per stack, and the `ctr run` each one's container gets.
//!
//! - **hardened**: our shim with the coding-agent preset (`policy-injector/src/policy/presets/
//!   coding-agent.toml`: read-only root, uid 1000, tmpfs scratch, the workspace bind writable
//!   with git protection, loopback only), plus an egress allowlist of the two upstream names
//!   (the proxy resolves them through the policy's `hosts`; `require_sni` on), the platform and,
//!   for labelled trade-off rows, one runsc flag (`directfs = true`, or `file-access-mounts =
//!   "exclusive"`: the sentry trusts what it cached of the workspace bind instead of asking the
//!   gofer again, so a change made from the host while the sandbox runs may go unseen). Only the
//!   audit log and the writable root move into the bench's directory.
//! - **plain runsc**: containerd's Go shim driving the same runsc binary with nothing but the
//!   platform chosen (its defaults otherwise: directfs, its own rootfs overlay, gVisor's netstack
//!   in the container's network namespace), in a [`ClientNet`](crate::upstream::ClientNet).
//! - **runc**: the Go shim and runc, in a [`ClientNet`](crate::upstream::ClientNet).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gvisor_hardened_tests::egress::forwarder_binary;
use gvisor_hardened_tests::run::RUNC_RUNTIME;
use gvisor_hardened_tests::stack::Stack;
use gvisor_hardened_tests::{Containerd, Runtime};
use toml_edit::{value, Array, DocumentMut, InlineTable, Item, Table};

use crate::upstream::{BenchResult, Upstream, NAMES};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Our shim; `platform` as in `[runsc] platform` ("" = the shim's choice).
    Hardened {
        platform: &'static str,
        /// `[runsc] extra_flags` beyond the preset (trade-off rows, not the default).
        extra_flags: &'static [(&'static str, &'static str)],
    },
    /// The Go shim + the stack's runsc, `--platform` and `--network` only when named.
    PlainRunsc {
        platform: Option<&'static str>,
        network: Option<&'static str>,
    },
    Runc,
}

#[derive(Debug, Clone)]
pub struct Variant {
    pub key: &'static str,
    pub label: &'static str,
    pub kind: Kind,
    /// The platform the row ran on, for the tables.
    pub platform: &'static str,
}

const fn v(key: &'static str, label: &'static str, kind: Kind, platform: &'static str) -> Variant {
    Variant {
        key,
        label,
        kind,
        platform,
    }
}

/// The rows of a run on `stack`.
pub fn for_stack(stack: Stack) -> Vec<Variant> {
    match stack {
        Stack::Current => vec![
            v(
                "hardened_systrap",
                "gvisor-hardened, systrap (default policy: directfs off)",
                Kind::Hardened {
                    platform: "systrap",
                    extra_flags: &[],
                },
                "systrap",
            ),
            v(
                "hardened_ptrace",
                "gvisor-hardened, ptrace",
                Kind::Hardened {
                    platform: "ptrace",
                    extra_flags: &[],
                },
                "ptrace",
            ),
            v(
                "hardened_systrap_directfs",
                "gvisor-hardened, systrap, `directfs = true` (trade-off row, not the default)",
                Kind::Hardened {
                    platform: "systrap",
                    extra_flags: &[("directfs", "true")],
                },
                "systrap",
            ),
            v(
                "hardened_systrap_exclusive",
                "gvisor-hardened, systrap, `file-access-mounts = \"exclusive\"` (trade-off row, not the default)",
                Kind::Hardened {
                    platform: "systrap",
                    extra_flags: &[("file-access-mounts", "exclusive")],
                },
                "systrap",
            ),
            v(
                "runsc_systrap",
                "plain runsc, its defaults (systrap, directfs on)",
                Kind::PlainRunsc {
                    platform: None,
                    network: None,
                },
                "systrap",
            ),
            v(
                "runsc_ptrace",
                "plain runsc, ptrace (directfs on)",
                Kind::PlainRunsc {
                    platform: Some("ptrace"),
                    network: None,
                },
                "ptrace",
            ),
            v("runc", "runc", Kind::Runc, "-"),
        ],
        Stack::Compat => vec![
            v(
                "hardened_ptrace",
                "gvisor-hardened, ptrace",
                Kind::Hardened {
                    platform: "",
                    extra_flags: &[],
                },
                "ptrace",
            ),
            // runsc 20221219's own netstack (--network=sandbox) refuses to start on kernel 6.x
            // ("cannot run with network enabled in root network namespace", also inside a
            // namespace of its own): the host kernel's stack of the container's namespace is
            // the one network it can use here.
            v(
                "runsc_ptrace",
                "plain runsc 20221219, its defaults (ptrace) but `--network=host` in the container's own namespace",
                Kind::PlainRunsc {
                    platform: None,
                    network: Some("host"),
                },
                "ptrace",
            ),
            v("runc", "runc", Kind::Runc, "-"),
        ],
    }
}

/// The coding-agent preset with the bench's changes (see the module's comment).
pub fn hardened_policy(
    dir: &Path,
    key: &str,
    platform: &str,
    extra_flags: &[(&str, &str)],
    workspaces: &Path,
    up: &Upstream,
) -> BenchResult<PathBuf> {
    let preset = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../policy-injector/src/policy/presets/coding-agent.toml");
    let mut doc: DocumentMut = fs::read_to_string(&preset)?.parse()?;
    let mut audit = Table::new();
    audit["path"] = value(dir.join("audit.jsonl").display().to_string());
    doc["audit"] = Item::Table(audit);
    let mut writable = Array::new();
    writable.push(format!("{}/**", workspaces.display()));
    doc["mounts"]["writable_sources"] = value(writable);
    let mut runsc = Table::new();
    runsc["platform"] = value(platform);
    if !extra_flags.is_empty() {
        let mut extra = InlineTable::new();
        for &(flag, v) in extra_flags {
            extra.insert(flag, v.into());
        }
        runsc["extra_flags"] = value(extra);
    }
    doc["runsc"] = Item::Table(runsc);
    let mut egress = Table::new();
    let mut allow = Array::new();
    let mut hosts = InlineTable::new();
    for n in NAMES {
        allow.push(n);
        hosts.insert(n, up.addr().into());
    }
    let mut cidrs = Array::new();
    cidrs.push(up.ns.cidr());
    egress["allow"] = value(allow);
    egress["allow_cidrs"] = value(cidrs);
    egress["hosts"] = value(hosts);
    egress["require_sni"] = value(true);
    egress["forwarder"] = value(forwarder_binary().display().to_string());
    doc["network"]["egress"] = Item::Table(egress);
    let path = dir.join(format!("policy-{key}.toml"));
    fs::write(&path, doc.to_string())?;
    Ok(path)
}

/// `exec RUNSC [--platform=P] [--network=N] "$@"`: the Go shim's runc binary for plain runsc.
pub fn plain_runsc_wrapper(
    dir: &Path,
    key: &str,
    platform: Option<&str>,
    network: Option<&str>,
) -> BenchResult<PathBuf> {
    let runsc = gvisor_hardened_tests::stack::bin("runsc")?;
    let mut flag = platform.map_or(String::new(), |p| format!(" --platform={p}"));
    if let Some(n) = network {
        flag.push_str(&format!(" --network={n}"));
    }
    let path = dir.join(format!("runsc-{key}"));
    fs::write(
        &path,
        format!("#!/bin/sh\nexec {}{flag} \"$@\"\n", runsc.display()),
    )?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

/// The runtime and the extra `ctr run` flags of one variant (the mounts common to all are
/// added by the caller). `policy` / `wrapper` are what [`hardened_policy`] and
/// [`plain_runsc_wrapper`] wrote for it; `netns` the container's [`ClientNet`] path and `hosts`
/// the file naming the upstreams, for the two without a proxy.
pub fn runtime_and_flags(
    c: &Containerd,
    var: &Variant,
    policy: Option<&Path>,
    wrapper: Option<&Path>,
    netns: Option<&Path>,
    hosts: &Path,
) -> (Runtime, Vec<String>) {
    let mut flags = Vec::new();
    let direct = |flags: &mut Vec<String>| {
        if let Some(ns) = netns {
            flags.push("--with-ns".into());
            flags.push(format!("network:{}", ns.display()));
        }
        flags.push("--mount".into());
        flags.push(format!(
            "type=bind,src={},dst=/etc/hosts,options=rbind:ro",
            hosts.display()
        ));
    };
    let runtime = match var.kind {
        Kind::Hardened { .. } => Runtime::hardened_with_policy(policy.expect("a hardened policy")),
        Kind::PlainRunsc { .. } => {
            flags.push("--runc-binary".into());
            flags.push(wrapper.expect("a wrapper").display().to_string());
            flags.push("--runc-root".into());
            flags.push(
                c.runtimes_dir()
                    .join(format!("agent-{}", var.key))
                    .display()
                    .to_string(),
            );
            direct(&mut flags);
            Runtime::Named(RUNC_RUNTIME.to_string())
        }
        Kind::Runc => {
            direct(&mut flags);
            Runtime::Runc
        }
    };
    (runtime, flags)
}
