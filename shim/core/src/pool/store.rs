//! The pool on disk: one directory per key under `<policy runsc.root>/.pool/<namespace>/`.
//!
//! ```text
//! <key>/template.json      what the filler boots from (written by a claiming shim)
//! <key>/ready/<id>.json    one entry per warm sandbox ready to be claimed
//! <key>/claimed/<id>.json  entries taken by a pod (renamed from ready/: one claimant wins)
//! <key>/dead/<id>.json     entries a claimant found dead, for the filler to delete
//! <key>/bundles/<id>/      the warm sandbox's bundle (config.json, empty rootfs, runsc log)
//! <key>/fill.lock          held by the one filler of this key (flock); holds its pid and start
//!                          time, so a drain can ask it to stop
//! <key>/last-boot          its mtime is when a filler of this key last began a boot or a pod
//!                          last claimed: the refill rate holds across fillers (one of which
//!                          each claim starts) and a refill waits an interval after a claim
//! ```
//!
//! The state lives beside runsc's own state (its root), so a private containerd with its own
//! runsc root has its own pools. containerd namespaces start with a letter or digit, so
//! `.pool` never names one.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use policy_injector::RunscFlags;

pub const POOL_DIR: &str = ".pool";

#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool {path}: {what}: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("pool {path}: {what}: {source}")]
    Json {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "pool {key}: runsc would boot with {got:?}, the template asks for {want:?}: not filling"
    )]
    FlagsChanged {
        key: String,
        want: Vec<String>,
        got: Vec<String>,
    },
    #[error("pool {key}: booting a warm sandbox: {reason}")]
    Boot { key: String, reason: String },
    #[error("pool {key}: claimed sandbox {id}: {reason}")]
    Adopt {
        key: String,
        id: String,
        reason: String,
    },
}

fn io<'a>(path: &'a Path, what: &'static str) -> impl FnOnce(std::io::Error) -> PoolError + 'a {
    move |source| PoolError::Io {
        path: path.to_path_buf(),
        what,
        source,
    }
}

/// What the filler needs to boot warm sandboxes a pod of this key can claim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Template {
    pub key: String,
    pub namespace: String,
    /// Where the policy came from, as the claiming shim loaded it.
    pub config_path: Option<String>,
    pub node_policy: PathBuf,
    pub policy_sha256: String,
    /// The runsc binary, as the claiming shim resolved it (absolute unless the policy named a
    /// relative path with a slash).
    pub runsc_binary: PathBuf,
    /// Which file that binary was when the template was written: a runsc replaced in place
    /// makes another key, and this one stale.
    #[serde(default)]
    pub runsc_identity: Option<crate::runsc::feature_cache::Identity>,
    pub runsc: RunscFlags,
    /// The keyed global arguments (`spec::keyed_args`) the pod's sandbox would have had.
    pub global_args: Vec<String>,
    /// The host path of the holder (the forwarder binary).
    pub hold_binary: PathBuf,
    /// `spec::template` of the pod's hardened sandbox spec.
    pub spec: Value,
}

impl Template {
    /// Whether it was written for pods of this policy source: the same containerd namespace
    /// and the same policy file (a RuntimeClass's `ConfigPath`, else the node's policy).
    pub fn is_of_source(
        &self,
        namespace: &str,
        config_path: Option<&str>,
        node_policy: &Path,
    ) -> bool {
        self.namespace == namespace
            && self.config_path.as_deref() == config_path
            && self.node_policy == node_policy
    }
}

/// One warm sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The sandbox's runsc id (`pool-<ms>-<n>`).
    pub id: String,
    /// The sandbox process on the host, and its start time (field 22 of `/proc/PID/stat`), so
    /// a claimant never takes a recycled pid for it.
    pub pid: i32,
    pub start_time: u64,
    /// sha256 of the `pool-sandbox-booted` audit record: the claim record names it, so the
    /// pod's trail starts at the boot of its sandbox.
    pub boot_record: String,
    pub booted_at: String,
}

/// The directory of one key.
#[derive(Debug, Clone)]
pub struct KeyDir {
    pub dir: PathBuf,
    pub key: String,
}

/// `<runsc root parent>/.pool/<namespace>`, from the runsc root of a namespace
/// (`<policy runsc.root>/<namespace>`).
pub fn namespace_dir(policy_runsc_root: &str, namespace: &str) -> PathBuf {
    Path::new(policy_runsc_root).join(POOL_DIR).join(namespace)
}

impl KeyDir {
    pub fn new(policy_runsc_root: &str, namespace: &str, key: &str) -> KeyDir {
        KeyDir {
            dir: namespace_dir(policy_runsc_root, namespace).join(key),
            key: key.to_string(),
        }
    }

    pub fn at(dir: PathBuf) -> KeyDir {
        let key = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        KeyDir { dir, key }
    }

    /// The runsc root of this key's namespace (`<policy runsc.root>/<namespace>`), where
    /// runsc keeps the warm sandboxes' state.
    pub fn runsc_root(&self) -> PathBuf {
        let ns_dir = self.dir.parent().unwrap_or(Path::new("/"));
        let base = ns_dir
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("/"));
        base.join(ns_dir.file_name().unwrap_or_default())
    }

    pub fn template_path(&self) -> PathBuf {
        self.dir.join("template.json")
    }
    pub fn ready(&self) -> PathBuf {
        self.dir.join("ready")
    }
    pub fn claimed(&self) -> PathBuf {
        self.dir.join("claimed")
    }
    pub fn dead(&self) -> PathBuf {
        self.dir.join("dead")
    }
    pub fn bundles(&self) -> PathBuf {
        self.dir.join("bundles")
    }
    /// The bundle of warm sandbox `id`.
    pub fn bundle(&self, id: &str) -> PathBuf {
        self.bundles().join(id)
    }
    pub fn lock_path(&self) -> PathBuf {
        self.dir.join("fill.lock")
    }
    pub fn last_boot_path(&self) -> PathBuf {
        self.dir.join("last-boot")
    }

    /// Notes that a boot begins now (before it, so a failed boot counts against the rate too).
    pub fn record_boot(&self) -> Result<(), PoolError> {
        let path = self.last_boot_path();
        std::fs::File::create(&path)
            .and_then(|f| f.set_modified(std::time::SystemTime::now()))
            .map_err(io(&path, "recording a boot"))
    }

    /// Notes a claim: it counts like a boot for the refill rate, so the refill it triggers
    /// waits one interval and does not overlap the claiming pod's own container starts
    /// (measured overlapping: the pod's first container started 35 ms later, at nice 19 too).
    pub fn record_claim(&self) {
        let _ = self.record_boot();
    }

    /// How long ago a filler of this key last began a boot; `None` if none has. A time in the
    /// future (the clock was set back) counts as now.
    pub fn since_last_boot(&self) -> Option<std::time::Duration> {
        let at = std::fs::metadata(self.last_boot_path())
            .and_then(|m| m.modified())
            .ok()?;
        Some(at.elapsed().unwrap_or_default())
    }

    /// Creates the layout (root-only: the entries name processes to adopt).
    pub fn create(&self) -> Result<(), PoolError> {
        use std::os::unix::fs::DirBuilderExt;
        for d in [
            self.dir.clone(),
            self.ready(),
            self.claimed(),
            self.dead(),
            self.bundles(),
        ] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
                .map_err(io(&d, "creating"))?;
        }
        Ok(())
    }

    /// Writes the template unless the same one is there already.
    pub fn write_template(&self, t: &Template) -> Result<(), PoolError> {
        let path = self.template_path();
        if self.template().ok().as_ref() == Some(t) {
            return Ok(());
        }
        let bytes = serde_json::to_vec_pretty(t).expect("a template serialises");
        crate::atomic_file::write(&path, &bytes, crate::atomic_file::Options::PRIVATE)
            .map_err(io(&path, "writing the template"))
    }

    pub fn template(&self) -> Result<Template, PoolError> {
        let path = self.template_path();
        let bytes = std::fs::read(&path).map_err(io(&path, "reading the template"))?;
        serde_json::from_slice(&bytes).map_err(|source| PoolError::Json {
            path,
            what: "parsing the template",
            source,
        })
    }

    /// Publishes a booted sandbox: written beside, then renamed into `ready/`, so a claimant
    /// never reads half an entry.
    pub fn publish(&self, entry: &Entry) -> Result<(), PoolError> {
        let bytes = serde_json::to_vec(entry).expect("an entry serialises");
        let path = self.ready().join(format!("{}.json", entry.id));
        crate::atomic_file::write(&path, &bytes, crate::atomic_file::Options::PRIVATE)
            .map_err(io(&path, "publishing a warm sandbox"))
    }

    /// The entries in `dir` (`ready/`, `claimed/`, `dead/`), oldest first (ids sort by boot
    /// time). Unreadable entries are skipped: a claimant or the filler is moving them.
    pub fn entries(&self, dir: &Path) -> Vec<Entry> {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        let mut names: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.extension().is_some_and(|x| x == "json")
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect();
        names.sort();
        names
            .iter()
            .filter_map(|p| serde_json::from_slice(&std::fs::read(p).ok()?).ok())
            .collect()
    }

    /// Takes `entry` out of `ready/` into `to` (`claimed/` or `dead/`): a rename, so of any
    /// number of claimants exactly one succeeds. `false` when someone else took it first.
    pub fn take(&self, id: &str, to: &Path) -> Result<bool, PoolError> {
        self.move_entry(id, &self.ready(), to)
    }

    /// Moves the entry of `id` from directory `from` to `to` by rename; `false` when it is not
    /// in `from` (someone else moved it first).
    pub fn move_entry(&self, id: &str, from: &Path, to: &Path) -> Result<bool, PoolError> {
        let from = from.join(format!("{id}.json"));
        match std::fs::rename(&from, to.join(format!("{id}.json"))) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&from, "claiming")(e)),
        }
    }

    /// Forgets a sandbox that is gone: its entry (wherever it is) and its bundle.
    pub fn forget(&self, id: &str) {
        for d in [self.ready(), self.claimed(), self.dead()] {
            let _ = std::fs::remove_file(d.join(format!("{id}.json")));
        }
        let _ = std::fs::remove_dir_all(self.bundle(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> Entry {
        Entry {
            id: id.into(),
            pid: 1,
            start_time: 1,
            boot_record: "h".into(),
            booted_at: "t".into(),
        }
    }

    #[test]
    fn only_one_of_twenty_concurrent_claimants_takes_an_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let kd = KeyDir::new(tmp.path().to_str().unwrap(), "k8s.io", "abc");
        kd.create().unwrap();
        kd.publish(&entry("pool-1")).unwrap();
        let wins: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..20)
                .map(|_| s.spawn(|| kd.take("pool-1", &kd.claimed()).unwrap()))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap() as usize)
                .sum()
        });
        assert_eq!(wins, 1);
        assert!(kd.entries(&kd.ready()).is_empty());
        assert_eq!(kd.entries(&kd.claimed()), vec![entry("pool-1")]);
    }

    #[test]
    fn entries_come_oldest_first_and_half_written_ones_are_not_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let kd = KeyDir::new(tmp.path().to_str().unwrap(), "default", "k");
        kd.create().unwrap();
        kd.publish(&entry("pool-2")).unwrap();
        kd.publish(&entry("pool-1")).unwrap();
        std::fs::write(kd.ready().join(".pool-3.json"), b"{").unwrap();
        let ids: Vec<String> = kd.entries(&kd.ready()).into_iter().map(|e| e.id).collect();
        assert_eq!(ids, ["pool-1", "pool-2"]);
    }

    #[test]
    fn a_key_knows_the_runsc_root_of_its_namespace() {
        let kd = KeyDir::new("/run/gvisor-hardened/runsc", "k8s.io", "abc");
        assert_eq!(
            kd.runsc_root(),
            Path::new("/run/gvisor-hardened/runsc/k8s.io")
        );
    }

    #[test]
    fn the_last_boot_is_kept_beside_the_entries_for_the_next_filler() {
        let tmp = tempfile::tempdir().unwrap();
        let kd = KeyDir::new(tmp.path().to_str().unwrap(), "default", "k");
        kd.create().unwrap();
        assert_eq!(kd.since_last_boot(), None);
        let hour = std::time::Duration::from_secs(3600);
        std::fs::File::create(kd.last_boot_path())
            .unwrap()
            .set_modified(std::time::SystemTime::now() - hour)
            .unwrap();
        assert!(kd.since_last_boot().is_some_and(|d| d >= hour));
        kd.record_boot().unwrap();
        let next_filler = KeyDir::at(kd.dir.clone());
        assert!(next_filler
            .since_last_boot()
            .is_some_and(|d| d < std::time::Duration::from_secs(60)));
    }

    #[test]
    fn forgetting_a_sandbox_removes_its_entry_and_bundle() {
        let tmp = tempfile::tempdir().unwrap();
        let kd = KeyDir::new(tmp.path().to_str().unwrap(), "default", "k");
        kd.create().unwrap();
        kd.publish(&entry("pool-1")).unwrap();
        std::fs::create_dir_all(kd.bundles().join("pool-1/rootfs")).unwrap();
        kd.forget("pool-1");
        assert!(kd.entries(&kd.ready()).is_empty());
        assert!(!kd.bundles().join("pool-1").exists());
    }
}
