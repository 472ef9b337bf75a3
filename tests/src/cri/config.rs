//! The CRI side of a private containerd: the CRI plugin tables, a CNI network of its own, the
//! test policies, and our runtime handlers registered by the node installer's config code.
//!
//! Everything lives in the instance directory, so parallel instances share nothing but the
//! kernel: each gets its own bridge name, subnet, IPAM store, policy files, audit log and runsc
//! root.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use gvisor_hardened_installer::config::{self as installer_config, merged, register};
use gvisor_hardened_installer::handlers::{Handler, DEFAULT_HANDLER, SHIM_BINARY, TOOL_HANDLER};
use toml_edit::{value, DocumentMut};

/// The default RuntimeClass policy as shipped (deploy/kustomize), before the test overrides.
pub const SHIPPED_DEFAULT_POLICY: &str =
    include_str!("../../../deploy/kustomize/runtimeclasses/policies/policy.toml");
/// The `gvisor-hardened-tool` policy as shipped.
pub const SHIPPED_TOOL_POLICY: &str =
    include_str!("../../../deploy/kustomize/runtimeclasses/policies/gvisor-hardened-tool.toml");

/// The runc handler of the test containerd (also its default runtime).
pub const RUNC_HANDLER: &str = "runc";

/// What the CRI containerd registers and runs.
#[derive(Debug, Clone)]
pub struct CriOptions {
    /// The hardened shim; `None` registers only runc (harness self-tests).
    pub shim_binary: Option<PathBuf>,
    /// Handler name and policy TOML, the default handler first. The harness points each
    /// policy's `[audit] path` and `[runsc] root` into the instance directory.
    pub policies: Vec<(String, String)>,
    /// containerd's log level (`debug` also starts shims with `-debug`).
    pub log_level: String,
    /// More of containerd's config, appended after the CRI tables (another runtime handler, a
    /// registry's hosts directory).
    pub extra_tables: String,
    /// The CNI bridge is the pods' gateway: it gets an address and the host a route to the pod
    /// subnet, so the host reaches pod IPs (the CRI validation suite connects to them). Off,
    /// nothing on the host routes there and parallel instances cannot conflict.
    pub bridge_gateway: bool,
}

impl Default for CriOptions {
    fn default() -> Self {
        CriOptions {
            shim_binary: None,
            policies: vec![
                (
                    DEFAULT_HANDLER.to_string(),
                    SHIPPED_DEFAULT_POLICY.to_string(),
                ),
                (TOOL_HANDLER.to_string(), SHIPPED_TOOL_POLICY.to_string()),
            ],
            log_level: "debug".to_string(),
            extra_tables: String::new(),
            bridge_gateway: false,
        }
    }
}

impl CriOptions {
    /// runc only (no hardened handler).
    pub fn runc_only() -> Self {
        CriOptions::default()
    }

    /// runc plus `gvisor-hardened` and `gvisor-hardened-tool` served by `shim`.
    pub fn with_shim(shim: impl Into<PathBuf>) -> Self {
        CriOptions {
            shim_binary: Some(shim.into()),
            ..CriOptions::default()
        }
    }
}

/// Where the CRI-specific files of one instance live, all under its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLayout {
    pub dir: PathBuf,
}

impl CriLayout {
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni/conf")
    }
    /// host-local IPAM's allocation store (instead of the host-global /var/lib/cni).
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.join("cni/ipam")
    }
    /// The installer's policy directory layout: `policy.toml` and `policies/<class>.toml`.
    pub fn policy_dir(&self) -> PathBuf {
        self.dir.join("policy")
    }
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.jsonl")
    }
    /// Base of the hardened shim's runsc roots (`<base>/<namespace>`).
    pub fn runsc_root_base(&self) -> PathBuf {
        self.dir.join("runsc")
    }
    /// `shim pool-drain <runsc root>`, as an operator runs it: every unclaimed warm sandbox of
    /// every pool under this layout deleted. The command's output, for the caller to judge.
    pub fn drain_pools(&self, shim: &Path) -> std::io::Result<std::process::Output> {
        Command::new(shim)
            .arg("pool-drain")
            .arg(self.runsc_root_base())
            .output()
    }
    /// How many warm sandboxes the pool of the policy at `policy` holds ready (0 before a pod
    /// of it wrote the pool's template).
    pub fn pool_ready(&self, policy: &Path) -> usize {
        self.pool_key_dir(policy)
            .and_then(|d| fs::read_dir(d.join("ready")).ok())
            .map_or(0, |rd| {
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
                    .count()
            })
    }
    /// The warm pool's key directory of the policy at `policy` (`<runsc root>/.pool/k8s.io/
    /// <key>`, the one whose template names that file), once a pod of it wrote one.
    pub fn pool_key_dir(&self, policy: &Path) -> Option<PathBuf> {
        let policy = policy.display().to_string();
        let ns = self
            .runsc_root_base()
            .join(".pool")
            .join(super::CRI_NAMESPACE);
        fs::read_dir(ns)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|d| {
                fs::read_to_string(d.join("template.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .is_some_and(|t| t["config_path"] == policy.as_str())
            })
    }
    /// runc's state root for the runc handler (instead of the host-global /run/containerd/runc).
    pub fn runc_root(&self) -> PathBuf {
        self.dir.join("runc")
    }
    /// Parent of the pods' log directories.
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.join("pods")
    }
    /// The shim as installed into the private `bin/` (the handlers' `runtime_path`).
    pub fn shim_path(&self) -> PathBuf {
        self.dir.join("bin").join(SHIM_BINARY)
    }
    /// The random part of the directory name (`gvh-<hex>`), for host-global names.
    fn suffix(&self) -> String {
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let hex: String = name.chars().filter(char::is_ascii_hexdigit).collect();
        format!("{hex:0>8}")
    }
    /// The CNI bridge of this instance (interface names are at most 15 bytes).
    pub fn bridge(&self) -> String {
        format!("gvhbr{}", &self.suffix()[..8])
    }
    /// CNI network name (also the IPAM store's subdirectory).
    pub fn network_name(&self) -> String {
        format!("gvh-{}", &self.suffix()[..8])
    }
    /// A /24 picked from 10.128.0.0/10 by the directory name. No route is installed for it
    /// (the bridge is not a gateway), so two instances on the same subnet do not conflict.
    pub fn subnet(&self) -> String {
        let s = self.suffix();
        let byte = |i: usize| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or(0);
        format!("10.{}.{}.0/24", 128 + byte(0) % 64, byte(2))
    }
}

fn toml_path(p: &Path) -> String {
    let s = p.to_string_lossy();
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The CRI plugin's tables: the settings this machine needs (notes/kubernetes.md), the local
/// pause image, runc as the default runtime with its state in our directory, and our CNI dir.
/// containerd 2.x (`containerd2`) splits them over `io.containerd.cri.v1.runtime` (runtimes,
/// CNI, the kernel-facing settings), `io.containerd.cri.v1.images` (the pinned pause image) and
/// `io.containerd.grpc.v1.cri` (the streaming server), in a version 3 config.
pub fn cri_tables(layout: &CriLayout, sandbox_image: &str, containerd2: bool) -> String {
    let runc_root = toml_path(&layout.runc_root());
    let conf_dir = toml_path(&layout.cni_conf_dir());
    if containerd2 {
        let rt = "plugins.\"io.containerd.cri.v1.runtime\"";
        return format!(
            r#"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{sandbox_image}"
[{rt}]
  # Root on these machines lacks CAP_SYS_RESOURCE; there is no AppArmor or SELinux.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [{rt}.containerd]
    default_runtime_name = "{RUNC_HANDLER}"
    [{rt}.containerd.runtimes.{RUNC_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [{rt}.containerd.runtimes.{RUNC_HANDLER}.options]
        Root = {runc_root}
  [{rt}.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = {conf_dir}
[plugins."io.containerd.grpc.v1.cri"]
  # Streaming (Exec/Attach/PortForward URLs) on loopback, on a free port per instance.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#
        );
    }
    format!(
        r#"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  # Root on these machines lacks CAP_SYS_RESOURCE; there is no AppArmor or SELinux.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  # Streaming (Exec/Attach/PortForward URLs) on loopback, on a free port per instance.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "{RUNC_HANDLER}"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{RUNC_HANDLER}]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.{RUNC_HANDLER}.options]
        Root = {runc_root}
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = {conf_dir}
"#
    )
}

/// The CNI network: a bridge (not a gateway unless `gateway`, no masquerading: no iptables
/// rules), host-local IPAM storing its leases in our directory, and loopback. CRI wants an IP
/// on the pod's eth0, so loopback alone is not enough.
pub fn cni_conflist(layout: &CriLayout, gateway: bool) -> String {
    let conf = serde_json::json!({
        "cniVersion": "0.4.0",
        "name": layout.network_name(),
        "plugins": [
            {
                "type": "bridge",
                "bridge": layout.bridge(),
                "isGateway": gateway,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": layout.subnet() }]],
                    "dataDir": layout.ipam_dir(),
                },
            },
            { "type": "loopback" },
        ],
    });
    serde_json::to_string_pretty(&conf).expect("a JSON value serialises")
}

/// A shipped policy with the test overrides: audit log and runsc root inside the directory.
/// Edited with toml_edit so the shipped text (and its comments) stays as it is.
pub fn test_policy(shipped: &str, layout: &CriLayout) -> Result<String, String> {
    let mut doc: DocumentMut = shipped
        .parse()
        .map_err(|e| format!("policy is not TOML: {e}"))?;
    for (table, key, path) in [
        ("audit", "path", layout.audit_log()),
        ("runsc", "root", layout.runsc_root_base()),
    ] {
        // A table of its own at the end, not an inline table under `version`.
        let t = doc.entry(table).or_insert_with(toml_edit::table);
        t[key] = value(path.display().to_string());
    }
    Ok(doc.to_string())
}

/// The handlers as the installer would register them for this instance: `runtime_path` is the
/// shim in our `bin/`, each `ConfigPath` a policy file in our policy directory.
pub fn handlers(layout: &CriLayout, opts: &CriOptions) -> Vec<Handler> {
    let Some((default, _)) = opts.policies.first() else {
        return Vec::new();
    };
    let classes: Vec<String> = opts.policies[1..].iter().map(|(n, _)| n.clone()).collect();
    let mut set = Handler::standard_set(&layout.policy_dir(), &layout.shim_path(), &classes);
    set[0].name = default.clone();
    set
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// The config hook of a CRI containerd: writes the CNI config and the policies, appends the CRI
/// tables to the harness's config, registers the handlers with the installer's `register`, and
/// checks the merged result with the installer's `check_merged` (`containerd config dump`), as
/// the installer does before it restarts a node's containerd.
pub fn prepare(
    dir: &Path,
    base_config: String,
    opts: &CriOptions,
    sandbox_image: &str,
) -> Result<String, String> {
    let layout = CriLayout {
        dir: dir.to_path_buf(),
    };
    for d in [
        layout.ipam_dir(),
        layout.runsc_root_base(),
        layout.runc_root(),
        layout.pod_logs(),
    ] {
        fs::create_dir_all(&d).map_err(|e| format!("creating {}: {e}", d.display()))?;
    }
    write(
        &layout.cni_conf_dir().join("10-gvh.conflist"),
        &cni_conflist(&layout, opts.bridge_gateway),
    )?;

    let mut text = base_config;
    text.push_str(&cri_tables(
        &layout,
        sandbox_image,
        crate::stack::Stack::selected().containerd2(),
    ));
    text.push_str(&opts.extra_tables);
    let mut doc = installer_config::parse(&text).map_err(|e| e.to_string())?;
    let version = installer_config::detect_version(&doc).map_err(|e| e.to_string())?;

    let handlers = if opts.shim_binary.is_some() {
        handlers(&layout, opts)
    } else {
        Vec::new()
    };
    for (handler, (_, shipped)) in handlers.iter().zip(&opts.policies) {
        write(&handler.config_path, &test_policy(shipped, &layout)?)?;
    }
    if !handlers.is_empty() {
        register::register(&mut doc, version, &handlers).map_err(|e| e.to_string())?;
    }
    let config = doc.to_string();

    let candidate = dir.join("config.candidate.toml");
    write(&candidate, &config)?;
    let containerd = crate::stack::bin("containerd").map_err(|e| e.to_string())?;
    let dump = Command::new(containerd)
        .arg("--config")
        .arg(&candidate)
        .args(["config", "dump"])
        .output()
        .map_err(|e| format!("running `containerd config dump`: {e}"))?;
    if !dump.status.success() {
        return Err(format!(
            "`containerd config dump` failed: {}",
            String::from_utf8_lossy(&dump.stderr)
        ));
    }
    merged::check_merged(&String::from_utf8_lossy(&dump.stdout), &handlers)
        .map_err(|e| e.to_string())?;
    fs::remove_file(&candidate).map_err(|e| format!("removing {}: {e}", candidate.display()))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> CriLayout {
        CriLayout {
            dir: PathBuf::from("/tmp/gvh-0123456789ab"),
        }
    }

    #[test]
    fn host_global_names_derive_from_the_directory() {
        let l = layout();
        assert_eq!(l.bridge(), "gvhbr01234567");
        assert!(l.bridge().len() <= 15);
        assert_eq!(l.subnet(), "10.129.35.0/24");
        let other = CriLayout {
            dir: PathBuf::from("/tmp/gvh-fedcba987654"),
        };
        assert_ne!(l.bridge(), other.bridge());
        assert_ne!(l.subnet(), other.subnet());
    }

    #[test]
    fn conflist_keeps_ipam_state_in_the_directory() {
        let v: serde_json::Value = serde_json::from_str(&cni_conflist(&layout(), false)).unwrap();
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["isGateway"], false);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["dataDir"], "/tmp/gvh-0123456789ab/cni/ipam");
        assert_eq!(v["plugins"][1]["type"], "loopback");
    }

    #[test]
    fn test_policies_keep_the_shipped_text_and_point_into_the_directory() {
        let p = test_policy(SHIPPED_TOOL_POLICY, &layout()).unwrap();
        assert!(p.starts_with(SHIPPED_TOOL_POLICY), "{p}");
        assert!(p.contains("\n[audit]\n"), "{p}");
        assert!(
            p.contains("path = \"/tmp/gvh-0123456789ab/audit.jsonl\""),
            "{p}"
        );
        assert!(p.contains("root = \"/tmp/gvh-0123456789ab/runsc\""), "{p}");
    }

    #[test]
    fn handlers_follow_the_installer_layout() {
        let opts = CriOptions::with_shim("/x/shim");
        let hs = handlers(&layout(), &opts);
        assert_eq!(hs.len(), 2);
        assert_eq!(hs[0].name, DEFAULT_HANDLER);
        assert_eq!(
            hs[0].config_path,
            Path::new("/tmp/gvh-0123456789ab/policy/policy.toml")
        );
        assert_eq!(hs[1].name, TOOL_HANDLER);
        assert_eq!(
            hs[1].config_path,
            Path::new("/tmp/gvh-0123456789ab/policy/policies/gvisor-hardened-tool.toml")
        );
        assert_eq!(
            hs[1].runtime_path,
            Path::new("/tmp/gvh-0123456789ab/bin/containerd-shim-gvisor-hardened-v1")
        );
    }

    #[test]
    fn cri_tables_register_runc_with_its_root_in_the_directory() {
        for containerd2 in [false, true] {
            let t = cri_tables(&layout(), "localhost/p:1", containerd2);
            assert!(t.contains("\"localhost/p:1\""));
            assert!(t.contains("Root = \"/tmp/gvh-0123456789ab/runc\""));
            assert!(t.contains("restrict_oom_score_adj = true"));
            assert!(t.contains("conf_dir = \"/tmp/gvh-0123456789ab/cni/conf\""));
        }
        let v3 = cri_tables(&layout(), "localhost/p:1", true);
        assert!(v3.contains("[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.runc]"));
        assert!(v3.contains("[plugins.\"io.containerd.cri.v1.images\".pinned_images]"));
    }
}
