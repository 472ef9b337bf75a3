//! What [`super::conclude`] needs, written to the bundle at create: the exit may be handled by
//! another process than the one that staged (runsc-hardened's guard, or containerd's cleanup
//! after the shim died).

use std::path::{Path, PathBuf};

use policy_injector::policy::WorkspaceExitAction;
use serde::{Deserialize, Serialize};

use super::fsutil::Fingerprint;
use super::inputs::Print;
use super::WorkspaceError;

/// The state file in the bundle.
pub const STATE_FILE: &str = "gvisor-hardened-workspace.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceState {
    pub container_id: String,
    pub at_exit: WorkspaceExitAction,
    /// The writable binds searched at exit: host source -> where the sandbox saw it.
    pub binds: Vec<WatchedBind>,
    pub staged: Vec<StagedRepo>,
    /// `[mounts] protect` patterns, matched against every path at exit.
    pub protect: Vec<String>,
    /// Paths the repositories' configs point at (hooks directories, included files, scripts),
    /// per bind: protected the same way.
    pub referenced: Vec<ReferencedPath>,
    /// Paths in writable binds that stay what they were: the protect list's matches found at
    /// create. Identity by device and inode: the same path holding another file at exit was
    /// replaced.
    pub protected_paths: Vec<ProtectedPath>,
    /// Symbolic links on the way to referenced paths (a hook that is a link to a project
    /// script, a `core.hooksPath` that is a link): a bind cannot cover a link, so each must be
    /// the same link at exit.
    #[serde(default)]
    pub links: Vec<WatchedLink>,
    /// What the owner's hooks read or run that stays writable, as it was at create.
    #[serde(default)]
    pub hook_inputs: Vec<HookInput>,
    /// True once [`super::conclude`] ran: a later delete does not conclude again.
    pub concluded: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchedBind {
    pub source: PathBuf,
    pub destination: String,
}

/// One git directory with a staging copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedRepo {
    /// The git directory on the host, as found at create.
    pub gitdir: PathBuf,
    pub destination: String,
    /// Its identity: a sandbox can move a nested repository by renaming a parent directory,
    /// and the carry-back must find it where it went, not whatever took its path.
    pub dev: u64,
    pub ino: u64,
    /// The staging copy's name inside `<gitdir>/gvisor-hardened/`.
    pub staging_name: String,
    /// The config as copied in, kept in the bundle: what the sandbox changed is the difference
    /// to it.
    pub seed_config: Option<PathBuf>,
    /// Each carried file as the host had it and as the copy had it when staged.
    pub carried: Vec<CarriedFile>,
    /// Paths inside the copy (relative) where nested git directories are mounted: not the
    /// sandbox's to create, never carried back.
    pub nested: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CarriedFile {
    pub name: String,
    pub host: Option<Fingerprint>,
    pub copy: Option<Fingerprint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReferencedPath {
    /// Index into [`WorkspaceState::binds`].
    pub bind: usize,
    /// Relative to the bind's source.
    pub path: String,
}

/// A path watched without a bind: a link on the way to a referenced path (a bind cannot cover
/// a link without following it), or a file a hook tool's `PATH` would find. As it was at create,
/// a link's target too: a link the sandbox removed and made again can get the same inode
/// number back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchedLink {
    /// Index into [`WorkspaceState::binds`].
    pub bind: usize,
    /// Relative to the bind's source.
    pub path: String,
    pub print: Fingerprint,
    pub target: Option<PathBuf>,
}

impl WatchedLink {
    /// Whether `path` is what was watched still.
    pub fn is_at(&self, path: &Path) -> bool {
        let Ok(m) = std::fs::symlink_metadata(path) else {
            return false;
        };
        Fingerprint::of(&m) == self.print && std::fs::read_link(path).ok() == self.target
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookInput {
    /// Index into [`WorkspaceState::binds`].
    pub bind: usize,
    /// Relative to the bind's source.
    pub path: String,
    /// The hooks that read or run it.
    pub hooks: Vec<String>,
    pub print: Print,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProtectedPath {
    /// Index into [`WorkspaceState::binds`].
    pub bind: usize,
    /// Relative to the bind's source.
    pub path: String,
    pub dev: u64,
    pub ino: u64,
}

impl WorkspaceState {
    pub fn path_in(bundle: &Path) -> PathBuf {
        bundle.join(STATE_FILE)
    }

    pub fn write(&self, bundle: &Path) -> Result<(), WorkspaceError> {
        let path = Self::path_in(bundle);
        let bytes = serde_json::to_vec(self).expect("workspace state serialises");
        crate::atomic_file::write(&path, &bytes, crate::atomic_file::Options::PRIVATE)
            .map_err(WorkspaceError::io(path))
    }

    /// The state of a bundle, `None` when the container staged nothing and protects nothing.
    pub fn read(bundle: &Path) -> Result<Option<WorkspaceState>, WorkspaceError> {
        let path = Self::path_in(bundle);
        let Some(bytes) = super::fsutil::read_regular(&path, 16 << 20)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| WorkspaceError::Refused {
                path,
                reason: format!("unreadable workspace state: {e}"),
            })
    }

    /// The staging copy of `repo` when its git directory is at `gitdir`.
    pub fn staging_of(repo: &StagedRepo, gitdir: &Path) -> PathBuf {
        gitdir
            .join(policy_injector::workspace::STAGING_DIR)
            .join(&repo.staging_name)
    }
}
