//! The files the shim reads and keeps in a container's bundle directory, and the size limits on
//! the specs it reads (config.json, and an exec's process or an update's resources).
//!
//! containerd owns the bundle and removes it with the task; the shim adds the hardened
//! `config.json` (the original kept as `config.original.json`), runsc's pid file and log, and
//! [`BundleState`], which lets the `delete` action clean up after a shim that died.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::audit::Subject;

pub const CONFIG: &str = "config.json";
pub const ORIGINAL_CONFIG: &str = "config.original.json";
/// Where runsc writes the sandbox's pid (`--pid-file`).
pub const INIT_PID_FILE: &str = "init.pid";
/// runsc's JSON log (`--log`): its error messages for commands whose stdio is the container's.
pub const RUNSC_LOG: &str = "runsc.log.json";
pub const BUNDLE_STATE: &str = "gvisor-hardened.json";
/// A pod sandbox that claimed a warm sandbox: the runsc id it runs under and its pool
/// (`crate::pool::claim::ClaimRecord`), for the `delete` action after a shim that died.
pub const POOL_CLAIM: &str = "gvisor-hardened-pool-claim.json";
/// A config.json beyond this size is refused before parsing: no legitimate spec comes close.
pub const MAX_SPEC_BYTES: u64 = 4 << 20;
/// An exec's process spec or an update's resources beyond this size is refused before parsing,
/// under either front end (the task API's ExecProcess and Update, runsc-hardened's `exec
/// --process` and `update --resources`).
pub const MAX_PROCESS_BYTES: u64 = 1 << 20;

/// The per-exec files runsc reads and writes (`exec-<id>.json`, `.pid`, `.gpid`).
pub fn exec_file(exec_id: &str, suffix: &str) -> String {
    format!("exec-{exec_id}.{suffix}")
}

#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("bundle {bundle}: {file}: {source}")]
    Read {
        bundle: PathBuf,
        file: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("bundle {bundle}: {file} is larger than {} MiB", MAX_SPEC_BYTES >> 20)]
    TooLarge { bundle: PathBuf, file: &'static str },
    #[error("bundle {bundle}: {file} is not valid JSON: {source}")]
    Json {
        bundle: PathBuf,
        file: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("bundle {bundle}: {file} is not a JSON object")]
    NotAnObject { bundle: PathBuf, file: &'static str },
    #[error("bundle {bundle}: writing {file}: {source}")]
    Write {
        bundle: PathBuf,
        file: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Reads config.json: size-capped, UTF-8 JSON object, errors naming line and column. Returns
/// the exact bytes (kept as the original) and the parsed spec.
pub fn read_spec(bundle: &Path) -> Result<(Vec<u8>, Value), BundleError> {
    let read_err = |source| BundleError::Read {
        bundle: bundle.to_path_buf(),
        file: CONFIG,
        source,
    };
    let file = std::fs::File::open(bundle.join(CONFIG)).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(BundleError::TooLarge {
            bundle: bundle.to_path_buf(),
            file: CONFIG,
        });
    }
    let spec: Value = serde_json::from_slice(&bytes).map_err(|source| BundleError::Json {
        bundle: bundle.to_path_buf(),
        file: CONFIG,
        source,
    })?;
    if !spec.is_object() {
        return Err(BundleError::NotAnObject {
            bundle: bundle.to_path_buf(),
            file: CONFIG,
        });
    }
    Ok((bytes, spec))
}

/// The spec's string annotations.
pub fn annotations(spec: &Value) -> std::collections::BTreeMap<String, String> {
    spec.get("annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Writes `name` in the bundle atomically.
pub fn write(bundle: &Path, name: &'static str, bytes: &[u8]) -> Result<(), BundleError> {
    crate::atomic_file::write(
        &bundle.join(name),
        bytes,
        crate::atomic_file::Options::PRIVATE,
    )
    .map_err(|source| BundleError::Write {
        bundle: bundle.to_path_buf(),
        file: name,
        source,
    })
}

/// What the cleanup action needs if this shim dies: written before the first side effect on
/// the host (runsc state, mounts) so a crash at any later point can be undone.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct BundleState {
    pub runsc_binary: String,
    pub runsc_root: String,
    pub audit_path: PathBuf,
    /// `linux.cgroupsPath` of the hardened spec, to find cgroups a dead shim left behind.
    #[serde(default)]
    pub cgroups_path: String,
    pub subject: Subject,
}

impl BundleState {
    pub fn read(bundle: &Path) -> Option<BundleState> {
        let bytes = std::fs::read(bundle.join(BUNDLE_STATE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }
}

/// Puts the engine's own `config.json` back (from `config.original.json`), for a create that
/// failed after hardening had replaced it.
pub fn restore_original_config(bundle: &Path) {
    let original = bundle.join(ORIGINAL_CONFIG);
    if original.is_file() {
        let _ = std::fs::rename(original, bundle.join(CONFIG));
    }
}

/// Whose bundle a front end hardens: which of the files in it are ours to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Files {
    /// The shim's: containerd made the bundle for it (`remove_shim_files`).
    Shim,
    /// runsc-hardened's: the engine's runc shim owns the bundle (`remove_hardening_files`).
    Engine,
}

impl Files {
    fn remove(self, bundle: &Path) {
        match self {
            Files::Shim => remove_shim_files(bundle),
            Files::Engine => remove_hardening_files(bundle),
        }
    }
}

/// What a failed create leaves in its bundle, undone the same way by both front ends after
/// runsc, cgroups and mounts: the workspace's conclusion (`Failed`), our files, and the
/// engine's own `config.json` put back, so the bundle is as the engine made it.
pub fn release_after_failed_create(bundle: &Path, files: Files) {
    crate::workspace::finish(bundle, crate::workspace::Ending::Failed);
    files.remove(bundle);
    restore_original_config(bundle);
}

/// A deleted sandbox's bundle, the same way in every delete path (the shim's Delete, its
/// delete action after a shim that died, runsc-hardened's `delete`): the sandbox is gone, so
/// nothing writes its binds any more and the workspace is concluded (a no-op when its exit
/// did), then our files go. The workspace's report is the delete record's.
pub fn release_after_delete(
    bundle: &Path,
    files: Files,
) -> Option<crate::workspace::WorkspaceReport> {
    let workspace = crate::workspace::finish(bundle, crate::workspace::Ending::Ran);
    files.remove(bundle);
    workspace
}

/// Removes the files the shim added that containerd does not expect to find (everything but the
/// configs, which stay for whoever inspects the bundle until containerd removes it).
pub fn remove_shim_files(bundle: &Path) {
    remove_hardening_files(bundle);
    // The shim's own: it passes runsc this pid file, and only it claims warm sandboxes.
    for name in [INIT_PID_FILE, POOL_CLAIM] {
        let _ = std::fs::remove_file(bundle.join(name));
    }
}

/// Removes what either front end's hardening put into a bundle it does not own (the state
/// beside the spec, the empty file read-only host paths are bound over). runsc-hardened stops
/// here: under Docker and Podman the bundle's `init.pid` is the engine shim's (its
/// `--pid-file`), read by it, not ours to remove.
pub fn remove_hardening_files(bundle: &Path) {
    for name in [BUNDLE_STATE, crate::host_tree::EMPTY_FILE] {
        let _ = std::fs::remove_file(bundle.join(name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_front_end_removes_its_own_files_and_leaves_the_configs_and_the_engines() {
        let dir = tempfile::tempdir().unwrap();
        let all = [
            CONFIG,
            ORIGINAL_CONFIG,
            INIT_PID_FILE,
            BUNDLE_STATE,
            POOL_CLAIM,
            crate::host_tree::EMPTY_FILE,
        ];
        let left =
            |d: &Path| -> Vec<&str> { all.into_iter().filter(|n| d.join(n).exists()).collect() };
        for name in all {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        remove_hardening_files(dir.path());
        assert_eq!(
            left(dir.path()),
            [CONFIG, ORIGINAL_CONFIG, INIT_PID_FILE, POOL_CLAIM]
        );
        remove_shim_files(dir.path());
        assert_eq!(left(dir.path()), [CONFIG, ORIGINAL_CONFIG]);
    }

    #[test]
    fn oversized_config_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG),
            vec![b' '; (MAX_SPEC_BYTES + 1) as usize],
        )
        .unwrap();
        let err = read_spec(dir.path()).unwrap_err();
        assert!(err.to_string().contains("larger than 4 MiB"), "{err}");
    }

    #[test]
    fn truncated_config_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG),
            "{\n  \"ociVersion\": \"1.0.2\",\n  \"process\": {",
        )
        .unwrap();
        let err = read_spec(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("not valid JSON") && err.contains("line 3"),
            "{err}"
        );
    }

    #[test]
    fn non_utf8_config_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG), b"{\"a\": \"\xff\xfe\"}").unwrap();
        assert!(read_spec(dir.path()).is_err());
    }

    #[test]
    fn config_that_is_not_an_object_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG), "[1,2]").unwrap();
        assert!(read_spec(dir.path())
            .unwrap_err()
            .to_string()
            .contains("not a JSON object"));
    }

    #[test]
    fn missing_config_is_a_bundle_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_spec(dir.path()).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
    }

    #[test]
    fn atomic_writes_replace_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), CONFIG, b"{\"a\":1}").unwrap();
        write(dir.path(), CONFIG, b"{}").unwrap();
        assert_eq!(std::fs::read(dir.path().join(CONFIG)).unwrap(), b"{}");
        assert!(!dir.path().join("config.tmp").exists());
    }
}
