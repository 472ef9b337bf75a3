//! Options of a private containerd, the layout of its directory and its config.toml.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Plugins every private containerd disables. `internal.v1.opt` would create /opt/containerd
/// and put it on containerd's PATH (outside our directory); the other snapshotters are not
/// used and only add noise (or kernel-module probes) to the log.
const ALWAYS_DISABLED: &[&str] = &[
    "io.containerd.internal.v1.opt",
    "io.containerd.snapshotter.v1.aufs",
    "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
];

/// The CRI plugin, disabled unless [`ContainerdOptions::cri`].
pub const CRI_PLUGIN: &str = "io.containerd.grpc.v1.cri";

/// containerd 2.x split CRI into these, and its pod sandbox controller depends on them.
const CRI_PLUGINS_2X: &[&str] = &[
    "io.containerd.cri.v1.runtime",
    "io.containerd.cri.v1.images",
    "io.containerd.podsandbox.controller.v1.podsandbox",
];

/// containerd 2.x's NRI plugin listens on the host-global /var/run/nri/nri.sock.
const NRI_PLUGIN: &str = "io.containerd.nri.v1.nri";

/// Final say over a private containerd's config.toml: called with the instance directory (which
/// exists, with `bin/`, `root/`, `state/`...) and the rendered config (`extra_config` included),
/// before containerd starts. It returns the config to write and may create files in the
/// directory (CNI configs, policies). The CRI harness registers its runtime handlers here
/// through the node installer's own config code.
#[derive(Clone)]
pub struct ConfigHook(
    #[allow(clippy::type_complexity)]
    pub  Arc<dyn Fn(&Path, String) -> std::result::Result<String, String> + Send + Sync>,
);

impl ConfigHook {
    pub fn new(
        f: impl Fn(&Path, String) -> std::result::Result<String, String> + Send + Sync + 'static,
    ) -> Self {
        ConfigHook(Arc::new(f))
    }
}

impl fmt::Debug for ConfigHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConfigHook(..)")
    }
}

/// How to start a private containerd.
#[derive(Debug, Clone)]
pub struct ContainerdOptions {
    /// The shim binary to install as `bin/containerd-shim-gvisor-hardened-v1`, so that the
    /// runtime `io.containerd.gvisor-hardened.v1` resolves to it. `None`: no hardened runtime.
    pub shim_binary: Option<PathBuf>,
    /// Keep the CRI plugin enabled (its configuration goes in `extra_config`).
    pub cri: bool,
    /// TOML appended verbatim to the generated config.toml (version 2), e.g. CRI plugin tables.
    pub extra_config: String,
    /// containerd namespace for `ctr`. `None`: a fresh unique name (`gvh-<hex>`), which keeps
    /// host-global paths derived from it (cgroups `/<ns>/<id>`, runsc roots) apart between
    /// parallel tests, and lets shutdown clean those paths. With a given name, shutdown leaves
    /// the `/<ns>` cgroups and the hardened runsc root alone (they may not be ours).
    pub namespace: Option<String>,
    /// containerd's log level; `debug` also makes containerd start shims with `-debug`.
    pub log_level: String,
    /// Extra environment of containerd (inherited by the shims it starts).
    pub env: Vec<(String, String)>,
    /// Deadline for containerd to become ready.
    pub start_timeout: Duration,
    /// Rewrites the rendered config (and prepares files) once the directory exists.
    pub config_hook: Option<ConfigHook>,
}

impl Default for ContainerdOptions {
    fn default() -> Self {
        ContainerdOptions {
            shim_binary: None,
            cri: false,
            extra_config: String::new(),
            namespace: None,
            log_level: "debug".to_string(),
            env: Vec::new(),
            start_timeout: Duration::from_secs(30),
            config_hook: None,
        }
    }
}

impl ContainerdOptions {
    /// Default options with the hardened shim binary installed.
    pub fn with_shim(shim_binary: impl Into<PathBuf>) -> Self {
        ContainerdOptions {
            shim_binary: Some(shim_binary.into()),
            ..ContainerdOptions::default()
        }
    }
}

/// Where everything of one private containerd lives, all under one directory.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub dir: PathBuf,
}

impl Layout {
    pub fn bin(&self) -> PathBuf {
        self.dir.join("bin")
    }
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }
    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }
    pub fn tmp(&self) -> PathBuf {
        self.dir.join("tmp")
    }
    /// Roots of the runc shim's runtimes (`--runc-root`), one subdirectory each.
    pub fn runtimes(&self) -> PathBuf {
        self.dir.join("runtimes")
    }
    /// ctr's stdio fifos (`--fifo-dir`).
    pub fn fifo(&self) -> PathBuf {
        self.dir.join("fifo")
    }
    pub fn grpc_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }
    pub fn ttrpc_socket(&self) -> PathBuf {
        self.dir.join("containerd.sock.ttrpc")
    }
    pub fn config(&self) -> PathBuf {
        self.dir.join("config.toml")
    }
    pub fn log(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }
    /// Directories created before containerd starts.
    pub fn dirs(&self) -> [PathBuf; 6] {
        [
            self.bin(),
            self.root(),
            self.state(),
            self.tmp(),
            self.runtimes(),
            self.fifo(),
        ]
    }
}

/// A TOML basic string.
fn toml_str(s: &Path) -> String {
    let s = s.to_string_lossy();
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The config.toml of a private containerd: its own root, state, temp dir and sockets, no
/// debug socket, no metrics, and the CRI plugin only on request. `containerd2`: a containerd
/// 2.x config (version 3, the split CRI plugins, NRI off), else a 1.x one (version 2).
pub(crate) fn render(layout: &Layout, opts: &ContainerdOptions, containerd2: bool) -> String {
    let mut disabled: Vec<&str> = ALWAYS_DISABLED.to_vec();
    if !opts.cri {
        disabled.push(CRI_PLUGIN);
        if containerd2 {
            disabled.extend(CRI_PLUGINS_2X);
        }
    }
    if containerd2 {
        disabled.push(NRI_PLUGIN);
    }
    let disabled = disabled
        .iter()
        .map(|p| format!("\"{p}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut config = format!(
        r#"# Generated by the gvisor-hardened test harness.
version = {version}
root = {root}
state = {state}
temp = {tmp}
disabled_plugins = [{disabled}]

[grpc]
  address = {grpc}

[ttrpc]
  address = {ttrpc}

[debug]
  address = ""
  level = "{level}"

[metrics]
  address = ""
"#,
        root = toml_str(&layout.root()),
        state = toml_str(&layout.state()),
        tmp = toml_str(&layout.tmp()),
        grpc = toml_str(&layout.grpc_socket()),
        ttrpc = toml_str(&layout.ttrpc_socket()),
        level = opts.log_level,
        version = if containerd2 { 3 } else { 2 },
    );
    if !opts.extra_config.is_empty() {
        config.push_str("\n# extra_config\n");
        config.push_str(&opts.extra_config);
        config.push('\n');
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            dir: PathBuf::from("/tmp/gvh-x"),
        }
    }

    #[test]
    fn config_keeps_every_path_inside_the_directory() {
        let c = render(&layout(), &ContainerdOptions::default(), false);
        for key in ["root", "state", "temp"] {
            assert!(
                c.lines()
                    .any(|l| l.starts_with(&format!("{key} = \"/tmp/gvh-x/"))),
                "{key} in\n{c}"
            );
        }
        assert!(c.contains("address = \"/tmp/gvh-x/containerd.sock\""));
        assert!(c.contains("address = \"/tmp/gvh-x/containerd.sock.ttrpc\""));
        assert!(c.starts_with("# Generated") && c.contains("\nversion = 2\n"));
    }

    #[test]
    fn debug_socket_and_metrics_are_off() {
        let c = render(&layout(), &ContainerdOptions::default(), false);
        let after = |section: &str| {
            c.split(section)
                .nth(1)
                .unwrap()
                .lines()
                .nth(1)
                .unwrap()
                .to_string()
        };
        assert_eq!(after("[debug]").trim(), "address = \"\"");
        assert_eq!(after("[metrics]").trim(), "address = \"\"");
    }

    #[test]
    fn cri_is_disabled_unless_asked_for() {
        let off = render(&layout(), &ContainerdOptions::default(), false);
        assert!(off.contains(&format!("\"{CRI_PLUGIN}\"")));
        let on = render(
            &layout(),
            &ContainerdOptions {
                cri: true,
                ..ContainerdOptions::default()
            },
            false,
        );
        assert!(!on.contains(&format!("\"{CRI_PLUGIN}\"")));
        assert!(on.contains("io.containerd.internal.v1.opt"));
    }

    #[test]
    fn a_containerd_2_config_is_version_3_without_cri_or_nri_unless_asked() {
        let c = render(&layout(), &ContainerdOptions::default(), true);
        assert!(c.contains("\nversion = 3\n"), "{c}");
        for p in [
            "io.containerd.cri.v1.runtime",
            "io.containerd.cri.v1.images",
            NRI_PLUGIN,
        ] {
            assert!(c.contains(&format!("\"{p}\"")), "{p} in\n{c}");
        }
        let on = render(
            &layout(),
            &ContainerdOptions {
                cri: true,
                ..ContainerdOptions::default()
            },
            true,
        );
        assert!(!on.contains("\"io.containerd.cri.v1.runtime\""));
    }

    #[test]
    fn extra_config_is_appended() {
        let c = render(
            &layout(),
            &ContainerdOptions {
                extra_config: "[plugins.\"x\"]\n  a = 1".into(),
                ..ContainerdOptions::default()
            },
            false,
        );
        assert!(c.trim_end().ends_with("[plugins.\"x\"]\n  a = 1"));
    }
}
