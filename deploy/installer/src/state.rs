//! What an install did, persisted on the host so uninstall can reverse exactly that.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::files::{self, FileError};

#[derive(Debug, Error)]
pub enum StateError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error("{path}: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// How the containerd config was changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum ConfigRecord {
    /// Main config edited in place. `backup` holds the original bytes (`None`: there was no
    /// config file). `installed_sha256` is the config we wrote: if the file still has it,
    /// uninstall restores the backup byte for byte; otherwise it removes only our tables.
    InPlace {
        backup: Option<PathBuf>,
        installed_sha256: String,
    },
    /// A drop-in file of ours, removed on uninstall.
    DropIn { path: PathBuf, sha256: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    pub path: PathBuf,
    pub sha256: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallState {
    pub config_path: PathBuf,
    pub config: ConfigRecord,
    pub handlers: Vec<String>,
    /// Host paths of the files we installed.
    pub files: Vec<FileRecord>,
}

/// Loads the state from an installer-view path; `Ok(None)` when there is none.
pub fn load(path: &Path) -> Result<Option<InstallState>, StateError> {
    let Some(bytes) = files::read_optional(path)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| StateError::Json {
            path: path.to_path_buf(),
            source,
        })
}

pub fn save(path: &Path, state: &InstallState) -> Result<(), StateError> {
    let mut text = serde_json::to_vec_pretty(state).map_err(|source| StateError::Json {
        path: path.to_path_buf(),
        source,
    })?;
    text.push(b'\n');
    files::write_atomic(path, &text, 0o600)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trips_through_json() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        let s = InstallState {
            config_path: "/etc/containerd/config.toml".into(),
            config: ConfigRecord::InPlace {
                backup: None,
                installed_sha256: "ab".into(),
            },
            handlers: vec!["gvisor-hardened".into()],
            files: vec![FileRecord {
                path: "/usr/local/bin/x".into(),
                sha256: "cd".into(),
            }],
        };
        save(&p, &s).unwrap();
        assert_eq!(load(&p).unwrap(), Some(s));
        assert!(std::fs::read_to_string(&p)
            .unwrap()
            .contains("\"mode\": \"in-place\""));
    }

    #[test]
    fn missing_state_is_none_and_garbage_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load(&dir.path().join("none")).unwrap(), None);
        let p = dir.path().join("bad");
        std::fs::write(&p, b"{").unwrap();
        assert!(matches!(load(&p), Err(StateError::Json { .. })));
    }
}
