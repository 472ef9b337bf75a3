//! Where things live on the node, and how host paths map into the installer's view.
//!
//! Every path in [`Layout`] is a *host* path: what containerd, the shim and the config file see.
//! The installer reaches them under `host_root` (the DaemonSet mounts the host's `/` there).
//! Commands run through the host-exec prefix (`nsenter -t 1 -m --`) see host paths directly.

use std::path::{Path, PathBuf};

use crate::handlers::{class_policy_path, Handler, DEFAULT_POLICY_FILE, SHIM_BINARY};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Where the host's `/` is mounted in the installer (`/` when run on the host itself).
    pub host_root: PathBuf,
    pub containerd_config: PathBuf,
    pub shim_path: PathBuf,
    /// The static egress forwarder, where policies expect it (`[network.egress] forwarder`,
    /// default [`policy_injector::egress::DEFAULT_FORWARDER`]): the shim bind-mounts it into
    /// every sandbox with egress.
    pub forwarder_path: PathBuf,
    pub policy_dir: PathBuf,
    pub state_dir: PathBuf,
    pub cri_socket: PathBuf,
}

impl Default for Layout {
    fn default() -> Self {
        Layout {
            host_root: PathBuf::from("/host"),
            containerd_config: PathBuf::from("/etc/containerd/config.toml"),
            shim_path: Path::new("/usr/local/bin").join(SHIM_BINARY),
            forwarder_path: PathBuf::from(policy_injector::egress::DEFAULT_FORWARDER),
            policy_dir: PathBuf::from("/etc/gvisor-hardened"),
            state_dir: PathBuf::from("/var/lib/gvisor-hardened"),
            cri_socket: PathBuf::from("/run/containerd/containerd.sock"),
        }
    }
}

impl Layout {
    /// The installer's path for a host path.
    pub fn on_host(&self, host_path: &Path) -> PathBuf {
        let rel = host_path.strip_prefix("/").unwrap_or(host_path);
        self.host_root.join(rel)
    }

    /// Original config bytes, kept beside the config until uninstall restores them.
    pub fn backup_path(&self) -> PathBuf {
        sibling(&self.containerd_config, ".gvisor-hardened.orig")
    }

    /// The edited config before it replaces the real one: `containerd config dump` reads it
    /// from the same directory, so relative imports resolve as they will after the rename.
    pub fn candidate_path(&self) -> PathBuf {
        sibling(&self.containerd_config, ".gvisor-hardened.candidate")
    }

    pub fn state_file(&self) -> PathBuf {
        self.state_dir.join("installer-state.json")
    }

    pub fn default_policy_path(&self) -> PathBuf {
        self.policy_dir.join(DEFAULT_POLICY_FILE)
    }

    pub fn class_policy_path(&self, class: &str) -> PathBuf {
        class_policy_path(&self.policy_dir, class)
    }

    pub fn handlers(&self, classes: &[String]) -> Vec<Handler> {
        Handler::standard_set(&self.policy_dir, &self.shim_path, classes)
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_paths_map_under_the_host_root() {
        let l = Layout::default();
        assert_eq!(
            l.on_host(Path::new("/etc/containerd/config.toml")),
            Path::new("/host/etc/containerd/config.toml")
        );
    }

    #[test]
    fn identity_mapping_with_root_slash() {
        let l = Layout {
            host_root: PathBuf::from("/"),
            ..Layout::default()
        };
        assert_eq!(l.on_host(Path::new("/tmp/x")), Path::new("/tmp/x"));
    }

    #[test]
    fn the_forwarder_goes_where_policies_expect_it_by_default() {
        assert_eq!(
            Layout::default().forwarder_path,
            Path::new(&policy_injector::Policy::default().network.egress.forwarder)
        );
    }

    #[test]
    fn backup_and_candidate_sit_beside_the_config() {
        let l = Layout::default();
        assert_eq!(
            l.backup_path(),
            Path::new("/etc/containerd/config.toml.gvisor-hardened.orig")
        );
        assert_eq!(
            l.candidate_path(),
            Path::new("/etc/containerd/config.toml.gvisor-hardened.candidate")
        );
    }
}
