//! The real [`Host`]: mount(2) for the rootfs, `/sys/fs/cgroup` for the sandbox's cgroups.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Host, SandboxCgroups};
use crate::cgroup::exit_cause::ExitProbe;
use crate::cgroup::oom::OomWatcher;
use crate::cgroup::update::{self, Limits};
use crate::cgroup::{CgroupError, SandboxCgroup};
use crate::exit::ExitCause;
use crate::reaper::ExitStatus;
use crate::rootfs::{self, RootfsError, RootfsMount};

pub struct LinuxHost;

impl Host for LinuxHost {
    fn mount_rootfs(&self, mounts: &[RootfsMount], target: &Path) -> Result<(), RootfsError> {
        rootfs::mount_all(mounts, target)
    }

    fn unmount_rootfs(&self, target: &Path) -> Result<(), RootfsError> {
        rootfs::unmount_all(target)
    }

    fn ensure_no_cgroups(&self, cgroups_path: &str, id: &str) -> Result<(), CgroupError> {
        let cg = SandboxCgroup::for_spec(cgroups_path, id)?;
        match cg.remaining().first() {
            None => Ok(()),
            Some(dir) => Err(CgroupError::Exists {
                path: dir.to_path_buf(),
            }),
        }
    }

    fn remove_cgroups(&self, cgroups_path: &str, id: &str) -> Result<(), CgroupError> {
        // Where they would be cannot be told (no cgroup mounts): then there is nothing to remove.
        let Ok(cg) = SandboxCgroup::for_spec(cgroups_path, id) else {
            return Ok(());
        };
        cg.remove_empty()
    }

    fn sandbox_cgroups(&self, pid: u32) -> Result<Arc<dyn SandboxCgroups>, CgroupError> {
        Ok(Arc::new(ExitProbe::arm(SandboxCgroup::of_pid(
            pid as i32,
        )?)?))
    }

    fn adopt_cgroups(
        &self,
        pid: u32,
        cgroups_path: &str,
        id: &str,
        resources: &serde_json::Value,
    ) -> Result<(), CgroupError> {
        let from = SandboxCgroup::of_pid(pid as i32)?;
        let to = SandboxCgroup::for_spec(cgroups_path, id)?;
        crate::cgroup::adopt::adopt(&from, &to, resources)
    }
}

impl SandboxCgroups for ExitProbe {
    fn classify(&self, status: ExitStatus) -> Result<ExitCause, CgroupError> {
        ExitProbe::classify(self, status)
    }

    fn watch_oom(&self) -> Result<mpsc::Receiver<()>, CgroupError> {
        let mut watcher = OomWatcher::start(self.cgroup())?;
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(async move {
            // Ends when the cgroup goes away (runsc delete) or nobody listens any more.
            while let Ok(true) = watcher.next().await {
                if tx.send(()).await.is_err() {
                    break;
                }
            }
        });
        Ok(rx)
    }

    fn location(&self) -> Option<&SandboxCgroup> {
        Some(self.cgroup())
    }

    fn update(&self, limits: &Limits) -> Result<(), CgroupError> {
        update::update(self.cgroup(), limits)
    }

    fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        crate::idle::cpu_usage_ns(self.cgroup()).map_err(|source| CgroupError::Io {
            path: self
                .cgroup()
                .dir("cpuacct")
                .map(Path::to_path_buf)
                .unwrap_or_default(),
            source,
        })
    }
}
