//! The seam between the container logic and the host kernel: the rootfs mount and the
//! sandbox's cgroups.
//!
//! [`linux::LinuxHost`] is the real one (mounts need root; cgroups are read from `/sys/fs/cgroup`
//! and `/proc`); unit tests substitute `crate::fake`'s host, which keeps its mounts and cgroups
//! in memory, so they can check that nothing is left behind and script an OOM or a pids-limit
//! death without a kernel doing it.

pub mod linux;

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::cgroup::update::Limits;
use crate::cgroup::{CgroupError, SandboxCgroup};
use crate::exit::ExitCause;
use crate::reaper::ExitStatus;
use crate::rootfs::{RootfsError, RootfsMount};

pub trait Host: Send + Sync {
    fn mount_rootfs(&self, mounts: &[RootfsMount], target: &Path) -> Result<(), RootfsError>;
    /// Unmounts whatever is mounted at `target` (nothing is fine).
    fn unmount_rootfs(&self, target: &Path) -> Result<(), RootfsError>;
    /// runsc joins a cgroup that already exists as it is, without applying the spec's limits: a
    /// sandbox must get fresh cgroups ([`CgroupError::Exists`] otherwise).
    fn ensure_no_cgroups(&self, cgroups_path: &str, id: &str) -> Result<(), CgroupError>;
    /// Removes what runsc left of this sandbox's cgroups (empty directories; the kernel refuses
    /// the rest, which is reported).
    fn remove_cgroups(&self, cgroups_path: &str, id: &str) -> Result<(), CgroupError>;
    /// The cgroups of the running sandbox `pid`, with its counters read now as the baseline.
    fn sandbox_cgroups(&self, pid: u32) -> Result<Arc<dyn SandboxCgroups>, CgroupError>;
    /// Moves the running sandbox `pid` (a claimed warm sandbox) into the cgroups a spec with
    /// `cgroups_path` would have given it, with `resources` (OCI `LinuxResources`) applied
    /// there first (`crate::cgroup::adopt`).
    fn adopt_cgroups(
        &self,
        pid: u32,
        cgroups_path: &str,
        id: &str,
        resources: &serde_json::Value,
    ) -> Result<(), CgroupError>;
}

/// One sandbox's cgroups, found while it runs. runsc keeps them until `runsc delete`, so every
/// counter can still be read after the sandbox exited.
pub trait SandboxCgroups: Send + Sync {
    /// Why the sandbox ended with `status`: an OOM kill, the process ceiling, or what the
    /// status says. Must run before `runsc delete` removes the cgroups.
    fn classify(&self, status: ExitStatus) -> Result<ExitCause, CgroupError>;
    /// OOM kills as they happen (the early signal; `classify` stays the authority). The
    /// channel closes when the cgroup goes away.
    fn watch_oom(&self) -> Result<mpsc::Receiver<()>, CgroupError>;
    /// Where the cgroups are on the host, for a front end that reads them in its own format
    /// (containerd's metrics); `None` when they have no place on this host (the fake world).
    fn location(&self) -> Option<&SandboxCgroup>;
    /// Writes new limits (when runsc cannot apply them itself).
    fn update(&self, limits: &Limits) -> Result<(), CgroupError>;
    /// The sandbox's cumulative CPU time in nanoseconds (sentry, gofer and their helpers), for
    /// the idle timeout (`crate::idle`).
    fn cpu_usage_ns(&self) -> Result<u64, CgroupError>;
}
