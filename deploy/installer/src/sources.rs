//! What the installer copies onto the node: the shim binary and the policy files.

use std::fs;
use std::path::{Path, PathBuf};

use crate::handlers::{is_dns_label, DEFAULT_HANDLER, DEFAULT_POLICY_FILE};

/// Installer-view paths of the files to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// The shim binary shipped in the installer image.
    pub shim: PathBuf,
    /// The static egress forwarder shipped in the installer image.
    pub forwarder: PathBuf,
    /// A directory with `policy.toml` (the default handler's policy) and one `<class>.toml` per
    /// extra RuntimeClass handler: the image's defaults or the mounted policies ConfigMap.
    pub policy_dir: PathBuf,
    /// Install policies with `mode = "audit"` too. Off by default: audit mode turns every rule
    /// off (specs run as written, decisions are only logged), so it must be asked for.
    pub allow_audit_mode: bool,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            shim: PathBuf::from("/opt/gvisor-hardened/bin/containerd-shim-gvisor-hardened-v1"),
            forwarder: PathBuf::from("/opt/gvisor-hardened/bin/gvisor-hardened-forwarder"),
            policy_dir: PathBuf::from("/opt/gvisor-hardened/policies"),
            allow_audit_mode: false,
        }
    }
}

/// A policy file to install: the class it serves and its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySource {
    /// `None` for the default policy (`policy.toml`).
    pub class: Option<String>,
    pub path: PathBuf,
    /// The policy is in audit mode (only possible with `allow_audit_mode`).
    pub audit_mode: bool,
}

impl Sources {
    /// Checks the sources before anything is written and lists the policy files. Fails closed:
    /// a missing shim or forwarder (every sandbox with egress bind-mounts it), a missing
    /// default policy, a policy that is not TOML, an audit-mode
    /// policy without `allow_audit_mode`, or a class name that is not a DNS label stops the
    /// install.
    pub fn validate(&self) -> Result<Vec<PolicySource>, String> {
        for (what, path) in [
            ("shim binary", &self.shim),
            ("forwarder binary", &self.forwarder),
        ] {
            let meta = fs::metadata(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
            if !meta.is_file() {
                return Err(format!("{what} {} is not a file", path.display()));
            }
        }
        let entries = fs::read_dir(&self.policy_dir)
            .map_err(|e| format!("policy directory {}: {e}", self.policy_dir.display()))?;
        let mut out = Vec::new();
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("{}: {e}", self.policy_dir.display()))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            // ConfigMap mounts carry `..data` symlinks and dot-dirs: only plain *.toml count.
            if name.starts_with('.') || !name.ends_with(".toml") {
                continue;
            }
            names.push(name);
        }
        names.sort();
        if !names.iter().any(|n| n == DEFAULT_POLICY_FILE) {
            return Err(format!(
                "{} has no {DEFAULT_POLICY_FILE} (the `{DEFAULT_HANDLER}` handler's policy)",
                self.policy_dir.display()
            ));
        }
        for name in names {
            let path = self.policy_dir.join(&name);
            let audit_mode = check_policy(&path, self.allow_audit_mode)?;
            if name == DEFAULT_POLICY_FILE {
                out.insert(
                    0,
                    PolicySource {
                        class: None,
                        path,
                        audit_mode,
                    },
                );
                continue;
            }
            let class = name.trim_end_matches(".toml").to_string();
            if !is_dns_label(&class) || class == DEFAULT_HANDLER {
                return Err(format!(
                    "policy file {}: `{class}` is not usable as a RuntimeClass handler name \
                     (must be a DNS label other than `{DEFAULT_HANDLER}`)",
                    path.display()
                ));
            }
            out.push(PolicySource {
                class: Some(class),
                path,
                audit_mode,
            });
        }
        Ok(out)
    }
}

/// A policy the shim would refuse must not be installed: every Create under its handler would
/// fail. The same strict parser the shim uses checks it here. Nor may an audit-mode policy
/// arrive on a node unasked: one `mode = "audit"` line in a ConfigMap would turn the hardening
/// of every pod under that handler off. Returns whether the policy is in audit mode.
fn check_policy(path: &Path, allow_audit_mode: bool) -> Result<bool, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("policy {}: {e}", path.display()))?;
    let policy = policy_injector::Policy::from_toml_str(&text)
        .map_err(|e| format!("policy {}: {e}", path.display()))?;
    let audit = policy.mode == policy_injector::Mode::Audit;
    if audit && !allow_audit_mode {
        return Err(format!(
            "policy {}: mode = \"audit\" turns all hardening off (containers run with their \
             specs unchanged, decisions are only logged); pass --allow-audit-mode to install it \
             anyway",
            path.display()
        ));
    }
    Ok(audit)
}

/// The extra classes among the policy sources.
pub fn classes(policies: &[PolicySource]) -> Vec<String> {
    policies.iter().filter_map(|p| p.class.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources(dir: &Path) -> Sources {
        fs::write(dir.join("shim"), b"#!/bin/sh\n").unwrap();
        fs::write(dir.join("forwarder"), b"\x7fELF").unwrap();
        fs::create_dir_all(dir.join("p")).unwrap();
        Sources {
            shim: dir.join("shim"),
            forwarder: dir.join("forwarder"),
            policy_dir: dir.join("p"),
            allow_audit_mode: false,
        }
    }

    #[test]
    fn default_policy_first_then_classes_sorted() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path());
        for f in ["zeta.toml", "policy.toml", "gvisor-hardened-tool.toml"] {
            fs::write(s.policy_dir.join(f), "version = 1\n").unwrap();
        }
        fs::write(s.policy_dir.join("README"), "ignored").unwrap();
        let p = s.validate().unwrap();
        assert_eq!(p[0].class, None);
        assert_eq!(classes(&p), vec!["gvisor-hardened-tool", "zeta"]);
    }

    #[test]
    fn missing_default_policy_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path());
        fs::write(s.policy_dir.join("x.toml"), "").unwrap();
        assert!(s.validate().unwrap_err().contains("has no policy.toml"));
    }

    #[test]
    fn class_names_must_be_dns_labels() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path());
        fs::write(s.policy_dir.join("policy.toml"), "").unwrap();
        fs::write(s.policy_dir.join("Bad_Name.toml"), "").unwrap();
        assert!(s.validate().unwrap_err().contains("DNS label"));
    }

    #[test]
    fn broken_toml_policy_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path());
        fs::write(s.policy_dir.join("policy.toml"), "[[[").unwrap();
        let err = s.validate().unwrap_err();
        assert!(
            err.contains("policy.toml") && err.contains("line 1"),
            "{err}"
        );
    }

    #[test]
    fn policy_the_shim_would_refuse_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path());
        // Valid TOML, invalid policy: an unknown key and a bad size.
        fs::write(
            s.policy_dir.join("policy.toml"),
            "[resources]\nmemory = \"2 gigs\"\n",
        )
        .unwrap();
        let err = s.validate().unwrap_err();
        assert!(err.contains("resources.memory"), "{err}");
        fs::write(
            s.policy_dir.join("policy.toml"),
            "[root]\nread_only = true\n",
        )
        .unwrap();
        let err = s.validate().unwrap_err();
        assert!(err.contains("read_only"), "{err}");
    }

    #[test]
    fn audit_mode_policy_is_refused_without_the_flag() {
        let d = tempfile::tempdir().unwrap();
        let s = sources(d.path());
        fs::write(s.policy_dir.join("policy.toml"), "version = 1\n").unwrap();
        fs::write(
            s.policy_dir.join("gvisor-hardened-tool.toml"),
            "version = 1\nmode = \"audit\"\n",
        )
        .unwrap();
        let err = s.validate().unwrap_err();
        assert!(
            err.contains("gvisor-hardened-tool.toml")
                && err.contains("mode = \"audit\" turns all hardening off")
                && err.contains("--allow-audit-mode"),
            "{err}"
        );
    }

    #[test]
    fn audit_mode_policy_is_installed_with_the_flag_and_marked() {
        let d = tempfile::tempdir().unwrap();
        let s = Sources {
            allow_audit_mode: true,
            ..sources(d.path())
        };
        fs::write(s.policy_dir.join("policy.toml"), "mode = \"audit\"\n").unwrap();
        fs::write(s.policy_dir.join("strict.toml"), "mode = \"enforce\"\n").unwrap();
        let p = s.validate().unwrap();
        assert_eq!(
            p.iter()
                .map(|p| (p.class.as_deref(), p.audit_mode))
                .collect::<Vec<_>>(),
            [(None, true), (Some("strict"), false)]
        );
    }

    #[test]
    fn missing_shim_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = Sources {
            shim: d.path().join("nope"),
            ..sources(d.path())
        };
        assert!(s.validate().unwrap_err().contains("shim binary"));
    }

    #[test]
    fn missing_forwarder_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = Sources {
            forwarder: d.path().join("nope"),
            ..sources(d.path())
        };
        fs::write(s.policy_dir.join("policy.toml"), "version = 1\n").unwrap();
        let err = s.validate().unwrap_err();
        assert!(
            err.starts_with("forwarder binary ") && err.contains("nope"),
            "{err}"
        );
    }
}
