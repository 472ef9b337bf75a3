//! The fake as the host kernel: mounts and cgroups in memory, OOM and pids deaths on request.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{Fake, Step};
use crate::cgroup::update::Limits;
use crate::cgroup::CgroupError;
use crate::exit::ExitCause;
use crate::host::{Host, SandboxCgroups};
use crate::reaper::ExitStatus;
use crate::rootfs::{RootfsError, RootfsMount};

impl Host for Fake {
    fn mount_rootfs(&self, _mounts: &[RootfsMount], target: &Path) -> Result<(), RootfsError> {
        self.call(format!("mount {}", target.display()));
        let mut w = self.world();
        if w.fails(Step::Mount) {
            return Err(RootfsError::Mount {
                fstype: "overlay".into(),
                target: target.display().to_string(),
                source: nix::Error::EINVAL,
            });
        }
        w.mounts.insert(target.to_path_buf());
        Ok(())
    }

    fn unmount_rootfs(&self, target: &Path) -> Result<(), RootfsError> {
        self.call(format!("unmount {}", target.display()));
        self.world().mounts.remove(target);
        Ok(())
    }

    fn ensure_no_cgroups(&self, cgroups_path: &str, id: &str) -> Result<(), CgroupError> {
        let mut w = self.world();
        if w.fails(Step::CheckCgroups) || w.cgroups.contains(id) || w.foreign_cgroups.contains(id) {
            return Err(CgroupError::Exists {
                path: PathBuf::from(format!("/sys/fs/cgroup/memory{cgroups_path}")),
            });
        }
        Ok(())
    }

    fn remove_cgroups(&self, _cgroups_path: &str, id: &str) -> Result<(), CgroupError> {
        self.call(format!("remove-cgroups {id}"));
        self.world().cgroups.remove(id);
        Ok(())
    }

    fn sandbox_cgroups(&self, pid: u32) -> Result<Arc<dyn SandboxCgroups>, CgroupError> {
        let w = self.world();
        let id = w
            .containers
            .iter()
            .find(|(id, c)| c.pid == pid && &c.sandbox == *id)
            .map(|(id, _)| id.clone())
            .ok_or(CgroupError::NotFound {
                pid: pid as i32,
                reason: "no such sandbox".into(),
            })?;
        Ok(Arc::new(FakeCgroups {
            fake: self.clone(),
            id,
        }))
    }

    fn adopt_cgroups(
        &self,
        pid: u32,
        _cgroups_path: &str,
        id: &str,
        _resources: &serde_json::Value,
    ) -> Result<(), CgroupError> {
        // The fake world boots no warm sandboxes: nothing is ever claimed from it.
        self.call(format!("adopt-cgroups {id} {pid}"));
        Err(CgroupError::NotFound {
            pid: pid as i32,
            reason: "the fake world has no warm pool".into(),
        })
    }
}

struct FakeCgroups {
    fake: Fake,
    id: String,
}

impl SandboxCgroups for FakeCgroups {
    fn classify(&self, status: ExitStatus) -> Result<ExitCause, CgroupError> {
        Ok(self
            .fake
            .world()
            .causes
            .get(&self.id)
            .copied()
            .unwrap_or(ExitCause::of_status(status)))
    }

    fn watch_oom(&self) -> Result<mpsc::Receiver<()>, CgroupError> {
        let (tx, rx) = mpsc::channel(1);
        self.fake.world().oom_watchers.insert(self.id.clone(), tx);
        Ok(rx)
    }

    fn location(&self) -> Option<&crate::cgroup::SandboxCgroup> {
        None
    }

    fn update(&self, limits: &Limits) -> Result<(), CgroupError> {
        self.fake
            .world()
            .updates
            .push(format!("{} {limits:?}", self.id));
        Ok(())
    }

    fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        self.fake
            .cpu_usage_ns(&self.id)
            .ok_or_else(|| CgroupError::Parse {
                path: PathBuf::from(format!(
                    "/sys/fs/cgroup/cpuacct/test/{}/cpuacct.usage",
                    self.id
                )),
                content: "injected failure".into(),
            })
    }
}

/// Cgroups whose classification is given (tests of the classification's callers).
pub struct CgroupsSaying(pub Result<ExitCause, CgroupError>);

impl SandboxCgroups for CgroupsSaying {
    fn classify(&self, _status: ExitStatus) -> Result<ExitCause, CgroupError> {
        match &self.0 {
            Ok(cause) => Ok(*cause),
            Err(e) => Err(CgroupError::Parse {
                path: PathBuf::new(),
                content: e.to_string(),
            }),
        }
    }

    fn watch_oom(&self) -> Result<mpsc::Receiver<()>, CgroupError> {
        Ok(mpsc::channel(1).1)
    }

    fn location(&self) -> Option<&crate::cgroup::SandboxCgroup> {
        None
    }

    fn update(&self, _limits: &Limits) -> Result<(), CgroupError> {
        Ok(())
    }

    fn cpu_usage_ns(&self) -> Result<u64, CgroupError> {
        Ok(0)
    }
}
