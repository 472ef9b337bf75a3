//! What each runsc binary supports, remembered across shim processes.
//!
//! There is one shim per pod (per container outside Kubernetes), so a cache inside the shim
//! would almost never hit, and asking runsc (`runsc flags`, `runsc help`, `runsc help
//! platforms`) costs tens of milliseconds per container start. The answers are kept in a root-only
//! directory under /run, keyed by the binary's identity (device, inode, size, modification
//! time): an upgraded or replaced runsc is a different key and is asked again. A cache entry that
//! cannot be read or does not match is ignored, never trusted.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::features::Features;

pub const DEFAULT_DIR: &str = "/run/gvisor-hardened/features";

/// Which file a binary name or path stands for, as the kernel would exec it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Identity {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
}

impl Identity {
    /// Resolves `binary` like `execvp` does: a name without `/` is looked up on `PATH`.
    pub fn of(binary: &str) -> Option<Identity> {
        let path = if binary.contains('/') {
            PathBuf::from(binary)
        } else {
            std::env::var_os("PATH")?
                .to_str()?
                .split(':')
                .map(|dir| Path::new(dir).join(binary))
                .find(|p| p.is_file())?
        };
        let path = std::fs::canonicalize(path).ok()?;
        let m = std::fs::metadata(&path).ok()?;
        Some(Identity {
            path,
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        })
    }

    fn key(&self) -> String {
        let text = serde_json::to_vec(self).expect("an identity serialises");
        Sha256::digest(text)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Entry {
    identity: Identity,
    features: Features,
}

pub struct FeatureCache {
    dir: PathBuf,
}

impl FeatureCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        FeatureCache { dir: dir.into() }
    }

    fn file(&self, id: &Identity) -> PathBuf {
        self.dir.join(format!("{}.json", id.key()))
    }

    pub fn load(&self, id: &Identity) -> Option<Features> {
        let bytes = std::fs::read(self.file(id)).ok()?;
        let entry: Entry = serde_json::from_slice(&bytes).ok()?;
        (entry.identity == *id && !entry.features.flags.is_empty()).then_some(entry.features)
    }

    /// Best effort: a cache that cannot be written only costs the next shim a detection.
    pub fn store(&self, id: &Identity, features: &Features) {
        let entry = Entry {
            identity: id.clone(),
            features: features.clone(),
        };
        let write = || -> std::io::Result<()> {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&self.dir)?;
            crate::atomic_file::write(
                &self.file(id),
                &serde_json::to_vec(&entry).expect("an entry serialises"),
                crate::atomic_file::Options::PRIVATE,
            )
        };
        if let Err(e) = write() {
            log::debug!("runsc feature cache {}: {e}", self.dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features() -> Features {
        Features {
            flags: ["root", "network", "oci-seccomp"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            subcommands: ["create", "start"].iter().map(|s| s.to_string()).collect(),
            platforms: ["ptrace"].iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn stored_features_come_back_for_the_same_binary() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("runsc");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        let id = Identity::of(bin.to_str().unwrap()).unwrap();
        let cache = FeatureCache::new(dir.path().join("cache"));
        assert_eq!(cache.load(&id), None);
        cache.store(&id, &features());
        assert_eq!(cache.load(&id), Some(features()));
    }

    #[test]
    fn a_replaced_binary_is_asked_again() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("runsc");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        let cache = FeatureCache::new(dir.path().join("cache"));
        cache.store(&Identity::of(bin.to_str().unwrap()).unwrap(), &features());
        std::fs::write(&bin, "#!/bin/sh\n# a newer release\n").unwrap();
        assert_eq!(
            cache.load(&Identity::of(bin.to_str().unwrap()).unwrap()),
            None
        );
    }

    #[test]
    fn a_corrupt_entry_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("runsc");
        std::fs::write(&bin, "x").unwrap();
        let id = Identity::of(bin.to_str().unwrap()).unwrap();
        let cache = FeatureCache::new(dir.path().join("cache"));
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        std::fs::write(cache.file(&id), "{not json").unwrap();
        assert_eq!(cache.load(&id), None);
    }

    #[test]
    fn names_are_resolved_on_path() {
        let id = Identity::of("sh").expect("sh is on PATH");
        assert!(id.path.is_absolute());
        assert!(Identity::of("no-such-binary-anywhere").is_none());
    }
}
