//! The runtime handlers the installer registers, and the names shared with the manifests.
//!
//! Everything a RuntimeClass, the DaemonSet or an admission policy must agree on lives here, so
//! the manifest tests can compare the YAML against these constants.

use std::path::{Path, PathBuf};

/// containerd runtime type of the shim: containerd turns it into the binary name
/// `containerd-shim-gvisor-hardened-v1`.
pub const RUNTIME_TYPE: &str = "io.containerd.gvisor-hardened.v1";
/// Type URL of the options table, as gVisor's shim expects it: CRI marshals the runtime's
/// `options` into a protobuf Any of this type and hands it to the shim in CreateTaskRequest.
pub const OPTIONS_TYPE_URL: &str = "io.containerd.runsc.v1.options";
/// Pod annotations CRI forwards to the shim. CRI drops every annotation not listed here, so the
/// per-workload tightening annotations would never reach the policy without it.
pub const POD_ANNOTATIONS: &str = "gvisor-hardened.dev/*";
/// The handler with the default policy.
pub const DEFAULT_HANDLER: &str = "gvisor-hardened";
/// The stricter handler for short-lived tool calls.
pub const TOOL_HANDLER: &str = "gvisor-hardened-tool";
/// The handler for agent sandboxes with an egress allowlist (shipped empty).
pub const AGENT_HANDLER: &str = "gvisor-hardened-agent";
/// The node label set once the handlers are verified over CRI; RuntimeClasses select on it.
pub const NODE_LABEL: &str = "gvisor-hardened.dev/installed";
pub const NODE_LABEL_VALUE: &str = "true";
/// The shim binary's name on the host (what containerd derives from [`RUNTIME_TYPE`]).
pub const SHIM_BINARY: &str = "containerd-shim-gvisor-hardened-v1";
/// File name of the default policy, in the source directory and on the host.
pub const DEFAULT_POLICY_FILE: &str = "policy.toml";

/// One CRI runtime handler to register: its name (the RuntimeClass `handler`) and the policy file
/// (host path) the shim gets as `options.ConfigPath`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    pub name: String,
    pub config_path: PathBuf,
    /// Host path of the shim binary, written as `runtime_path` so containerd does not depend on
    /// its own PATH to find the shim.
    pub runtime_path: PathBuf,
}

impl Handler {
    /// The handler set for a policy directory on the host: the default handler uses
    /// `<policy_dir>/policy.toml`, every other class `<policy_dir>/policies/<class>.toml`.
    pub fn standard_set(policy_dir: &Path, shim_path: &Path, classes: &[String]) -> Vec<Handler> {
        let mut out = vec![Handler {
            name: DEFAULT_HANDLER.to_string(),
            config_path: policy_dir.join(DEFAULT_POLICY_FILE),
            runtime_path: shim_path.to_path_buf(),
        }];
        for class in classes {
            out.push(Handler {
                name: class.clone(),
                config_path: class_policy_path(policy_dir, class),
                runtime_path: shim_path.to_path_buf(),
            });
        }
        out
    }
}

/// Where a class's policy lives under the host policy directory.
pub fn class_policy_path(policy_dir: &Path, class: &str) -> PathBuf {
    policy_dir.join("policies").join(format!("{class}.toml"))
}

/// RFC 1123 DNS label: what Kubernetes requires of `RuntimeClass.handler`, and safe as a bare TOML
/// key and a file name.
pub fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_labels_accept_our_handler_names() {
        assert!(is_dns_label(DEFAULT_HANDLER));
        assert!(is_dns_label(TOOL_HANDLER));
    }

    #[test]
    fn dns_labels_reject_bad_names() {
        for bad in [
            "",
            "-a",
            "a-",
            "Upper",
            "dot.ted",
            "under_score",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "{bad:?} accepted");
        }
    }

    #[test]
    fn standard_set_maps_classes_to_policy_files() {
        let set = Handler::standard_set(
            Path::new("/etc/gvisor-hardened"),
            Path::new("/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
            &[TOOL_HANDLER.to_string()],
        );
        assert_eq!(set.len(), 2);
        assert_eq!(
            set[0].config_path,
            Path::new("/etc/gvisor-hardened/policy.toml")
        );
        assert_eq!(
            set[1].config_path,
            Path::new("/etc/gvisor-hardened/policies/gvisor-hardened-tool.toml")
        );
    }
}
