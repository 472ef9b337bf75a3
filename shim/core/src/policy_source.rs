//! Which policy governs a container, read at the I/O edge (the policy core does no I/O).
//!
//! Order, as the runtime's contract says: the runtime options' `ConfigPath` (containerd's
//! per-handler `options` table or `ctr run --runtime-config-path`), else the node policy at
//! `/etc/gvisor-hardened/policy.toml` if it exists, else the policy embedded in the binary.
//! Any failure to read or parse the chosen file fails the Create: there is no fallback to a
//! weaker policy.

use std::io::Read;
use std::path::{Path, PathBuf};

use policy_injector::{Policy, PolicyError, DEFAULT_POLICY_TOML};
use sha2::{Digest, Sha256};

pub const NODE_POLICY_PATH: &str = "/etc/gvisor-hardened/policy.toml";
/// A policy is a small text file; anything larger is refused rather than parsed.
const MAX_POLICY_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "path")]
pub enum PolicySource {
    RuntimeOptions(PathBuf),
    Node(PathBuf),
    Embedded,
}

impl PolicySource {
    pub fn display_path(&self) -> String {
        match self {
            PolicySource::RuntimeOptions(p) | PolicySource::Node(p) => p.display().to_string(),
            PolicySource::Embedded => "<embedded default>".to_string(),
        }
    }

    /// The policy's name as an agent sees it in an egress refusal: the file's name without
    /// `.toml` (the installer names them after their RuntimeClass), or `default` for the
    /// embedded one.
    pub fn name(&self) -> String {
        match self {
            PolicySource::RuntimeOptions(p) | PolicySource::Node(p) => p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string()),
            PolicySource::Embedded => "default".to_string(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct LoadedPolicy {
    pub policy: Policy,
    pub source: PolicySource,
    /// sha256 of the exact bytes parsed (hex), recorded in every audit line.
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyLoadError {
    #[error("policy {path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("policy {path}: larger than {MAX_POLICY_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("policy {path}: not UTF-8 text")]
    NotUtf8 { path: PathBuf },
    #[error("policy {path}: {source}")]
    Invalid { path: PathBuf, source: PolicyError },
}

impl LoadedPolicy {
    /// How audit records name this policy: its path, its hash, its mode.
    pub fn audit_ref(&self) -> crate::audit::PolicyRef {
        crate::audit::PolicyRef {
            path: self.source.display_path(),
            sha256: self.sha256.clone(),
            mode: format!("{:?}", self.policy.mode).to_lowercase(),
        }
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Selects and loads the policy. `node_path` is a parameter so tests can point it elsewhere.
pub fn load(config_path: Option<&str>, node_path: &Path) -> Result<LoadedPolicy, PolicyLoadError> {
    if let Some(path) = config_path {
        let path = PathBuf::from(path);
        return load_file(&path).map(|(policy, sha256)| LoadedPolicy {
            policy,
            source: PolicySource::RuntimeOptions(path),
            sha256,
        });
    }
    match std::fs::symlink_metadata(node_path) {
        Ok(_) => load_file(node_path).map(|(policy, sha256)| LoadedPolicy {
            policy,
            source: PolicySource::Node(node_path.to_path_buf()),
            sha256,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(embedded()),
        // Present but unreadable (permissions, I/O error): refuse rather than fall back.
        Err(source) => Err(PolicyLoadError::Read {
            path: node_path.to_path_buf(),
            source,
        }),
    }
}

pub fn embedded() -> LoadedPolicy {
    LoadedPolicy {
        policy: Policy::default(),
        source: PolicySource::Embedded,
        sha256: sha256_hex(DEFAULT_POLICY_TOML.as_bytes()),
    }
}

fn load_file(path: &Path) -> Result<(Policy, String), PolicyLoadError> {
    let read_err = |source| PolicyLoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(PolicyLoadError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::str::from_utf8(&bytes).map_err(|_| PolicyLoadError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    let policy = Policy::from_toml_str(text).map_err(|source| PolicyLoadError::Invalid {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((policy, sha256_hex(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_is_named_after_its_file_or_default() {
        let file = PathBuf::from("/etc/gvisor-hardened/gvisor-hardened-agent.toml");
        assert_eq!(
            PolicySource::RuntimeOptions(file.clone()).name(),
            "gvisor-hardened-agent"
        );
        assert_eq!(PolicySource::Node(file).name(), "gvisor-hardened-agent");
        assert_eq!(PolicySource::Embedded.name(), "default");
    }

    #[test]
    fn missing_node_policy_selects_embedded_default() {
        let dir = tempfile::tempdir().unwrap();
        let loaded = load(None, &dir.path().join("policy.toml")).unwrap();
        assert_eq!(loaded.source, PolicySource::Embedded);
        assert_eq!(loaded.policy, Policy::default());
        assert_eq!(loaded.sha256, sha256_hex(DEFAULT_POLICY_TOML.as_bytes()));
    }

    #[test]
    fn node_policy_is_used_when_present() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, "mode = \"audit\"\n").unwrap();
        let loaded = load(None, &path).unwrap();
        assert_eq!(loaded.source, PolicySource::Node(path));
        assert_eq!(loaded.sha256, sha256_hex(b"mode = \"audit\"\n"));
    }

    #[test]
    fn config_path_wins_over_node_policy() {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("node.toml");
        let opt = dir.path().join("opt.toml");
        std::fs::write(&node, "this is not toml").unwrap();
        std::fs::write(&opt, "").unwrap();
        let loaded = load(Some(opt.to_str().unwrap()), &node).unwrap();
        assert_eq!(loaded.source, PolicySource::RuntimeOptions(opt));
    }

    #[test]
    fn broken_node_policy_fails_instead_of_falling_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, "[root]\nreadonly = maybe\n").unwrap();
        let err = load(None, &path).unwrap_err();
        assert!(matches!(err, PolicyLoadError::Invalid { .. }), "{err}");
        assert!(err.to_string().contains(path.to_str().unwrap()));
    }

    #[test]
    fn missing_config_path_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        let err = load(Some(missing.to_str().unwrap()), &dir.path().join("x")).unwrap_err();
        assert!(matches!(err, PolicyLoadError::Read { .. }));
    }

    #[test]
    fn oversized_policy_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.toml");
        std::fs::write(&path, vec![b'#'; (MAX_POLICY_BYTES + 1) as usize]).unwrap();
        let err = load(Some(path.to_str().unwrap()), &path).unwrap_err();
        assert!(matches!(err, PolicyLoadError::TooLarge { .. }));
    }
}
