//! The installer's view of a node whose containerd is a [`PrivateContainerd`]: image-side
//! sources and host-side destinations, all inside the instance's temp dir.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use gvisor_hardened_installer::command::Containerd;
use gvisor_hardened_installer::cri;
use gvisor_hardened_installer::handlers::{Handler, AGENT_HANDLER, TOOL_HANDLER};
use gvisor_hardened_installer::install::{Labeller, Node};
use gvisor_hardened_installer::layout::Layout;
use gvisor_hardened_installer::sources::Sources;

use super::containerd::PrivateContainerd;

/// With a warm pool, so uninstall drains it (through the stand-in shim, which records that).
pub const TOOL_POLICY: &str = "# stricter class for tool calls\nversion = 1\n[resources]\nmemory = \"512Mi\"\ncpu = \"1\"\nprocesses = 64\n[lifetime]\nmax_runtime = \"10m\"\n[pool]\nsize = 1\n";
/// The agent class as shipped (egress allowlist empty).
pub const AGENT_POLICY: &str =
    include_str!("../../../kustomize/runtimeclasses/policies/gvisor-hardened-agent.toml");

/// The classes [`node`] installs besides the default handler, in the installer's order.
pub fn classes() -> Vec<String> {
    vec![AGENT_HANDLER.to_string(), TOOL_HANDLER.to_string()]
}

/// Installer sources (image side: a stand-in shim and forwarder, the default, tool and agent policies) and a
/// node layout, all inside the instance's temp dir. The shim is a stand-in: CRI `Status` lists
/// registered runtimes without executing their shims.
pub fn node(ctd: &PrivateContainerd, labeller: Option<Labeller>) -> Node {
    let d = ctd.path();
    let src = d.join("image");
    fs::create_dir_all(src.join("policies")).unwrap();
    fs::write(
        src.join("shim"),
        // Records how it was run (`<shim>.calls` beside it): uninstall's pool drain.
        b"#!/bin/sh\necho \"$@\" >> \"$0.calls\"\necho stand-in shim >&2\nexit 1\n",
    )
    .unwrap();
    fs::write(src.join("forwarder"), b"stand-in forwarder\n").unwrap();
    fs::write(src.join("policies/policy.toml"), "version = 1\n").unwrap();
    fs::write(src.join("policies/gvisor-hardened-tool.toml"), TOOL_POLICY).unwrap();
    fs::write(
        src.join("policies/gvisor-hardened-agent.toml"),
        AGENT_POLICY,
    )
    .unwrap();
    Node {
        layout: Layout {
            host_root: PathBuf::from("/"),
            containerd_config: ctd.config_path(),
            shim_path: d.join("host/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
            forwarder_path: d.join("host/usr/local/lib/gvisor-hardened/gvisor-hardened-forwarder"),
            policy_dir: d.join("host/etc/gvisor-hardened"),
            state_dir: d.join("host/var/lib/gvisor-hardened"),
            cri_socket: ctd.socket(),
        },
        sources: Sources {
            shim: src.join("shim"),
            forwarder: src.join("forwarder"),
            policy_dir: src.join("policies"),
            allow_audit_mode: false,
        },
        containerd: Containerd {
            host_exec: vec![],
            binary: ctd.binary().display().to_string(),
        },
        restart: ctd.restart_command(),
        cri_timeout: Duration::from_secs(30),
        labeller,
        log: Box::new(|l| eprintln!("installer: {l}")),
    }
}

/// The handlers [`node`] registers.
pub fn handlers(node: &Node) -> Vec<Handler> {
    node.layout.handlers(&classes())
}

pub fn status(ctd: &PrivateContainerd) -> cri::CriStatus {
    cri::status(&ctd.socket(), Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()))
}

/// CRI shows exactly runc and `handlers` (ours with our runtime type and policy paths).
pub fn assert_cri_shows(ctd: &PrivateContainerd, handlers: &[Handler]) {
    assert_cri_shows_with_runc_handlers(ctd, handlers, &[]);
}

/// [`assert_cri_shows`], plus `runc_handlers`: further handlers of runc's runtime type (an
/// operator's, which the installer must leave working).
pub fn assert_cri_shows_with_runc_handlers(
    ctd: &PrivateContainerd,
    handlers: &[Handler],
    runc_handlers: &[&str],
) {
    let s = status(ctd);
    assert!(s.runtime_ready, "{s:?}");
    let mut want: Vec<&str> = handlers.iter().map(|h| h.name.as_str()).collect();
    want.push("runc");
    want.extend(runc_handlers);
    want.sort();
    assert_eq!(
        s.runtimes.keys().map(String::as_str).collect::<Vec<_>>(),
        want
    );
    for r in runc_handlers.iter().chain(&["runc"]) {
        assert_eq!(s.runtimes[*r], "io.containerd.runc.v2", "{r}");
    }
    for h in handlers {
        assert_eq!(
            s.runtimes[&h.name],
            gvisor_hardened_installer::handlers::RUNTIME_TYPE
        );
        assert_eq!(
            PathBuf::from(&s.config_paths[&h.name]),
            h.config_path,
            "{}",
            h.name
        );
    }
}
