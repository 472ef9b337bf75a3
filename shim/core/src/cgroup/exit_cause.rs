//! Why a sandbox died: a memory-limit OOM kill, the process ceiling, or its own doing.
//!
//! Measured (NOTES.md): at the memory limit the kernel OOM-kills the sentry (SIGKILL, 137) and
//! `oom_kill` goes up; at the pids limit the sentry panics (exit 2) and the pids `max` event count
//! goes up. runsc keeps the cgroups until `runsc delete`, so comparing the counters read right
//! after the exit with a baseline read after `runsc create` is reliable without event fds.

use std::path::Path;

use crate::exit::ExitCause;
use crate::reaper::ExitStatus;

use super::files;
use super::{CgroupError, SandboxCgroup};

/// The counters that tell an OOM or a process-ceiling death. `None`: not readable on this host
/// (controller missing, kernel without the counter), so that cause cannot be detected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// v1 `memory.oom_control` / v2 `memory.events`: `oom_kill`.
    pub oom_kill: Option<u64>,
    /// `pids.events`: `max` (forks refused at `pids.max`).
    pub pids_max: Option<u64>,
}

/// Decides the cause from the exit status and the counters before and after.
///
/// - `oom_kill` grew: OOM, whatever the status (the OOM kill is what ended the sandbox).
/// - pids `max` grew and the exit is not a success: the ceiling crashed the sandbox. A refused
///   fork that the container survived and exited 0 from is not a crash.
/// - otherwise what the status says.
pub fn classify(status: ExitStatus, before: &Counters, after: &Counters) -> ExitCause {
    let grew = |b: Option<u64>, a: Option<u64>| matches!((b, a), (Some(b), Some(a)) if a > b);
    if grew(before.oom_kill, after.oom_kill) {
        ExitCause::Oom
    } else if grew(before.pids_max, after.pids_max) && !status.success() {
        ExitCause::ProcessLimit
    } else {
        ExitCause::of_status(status)
    }
}

impl SandboxCgroup {
    /// Reads the OOM and pids counters now.
    pub fn counters(&self) -> Result<Counters, CgroupError> {
        let oom_kill = match self.dir("memory") {
            Ok(dir) => {
                let file = if self.is_v2() {
                    "memory.events"
                } else {
                    "memory.oom_control"
                };
                keyed(&dir.join(file), "oom_kill")?
            }
            Err(CgroupError::NoController { .. }) => None,
            Err(e) => return Err(e),
        };
        let pids_max = match self.dir("pids") {
            Ok(dir) => keyed(&dir.join("pids.events"), "max")?,
            Err(CgroupError::NoController { .. }) => None,
            Err(e) => return Err(e),
        };
        Ok(Counters { oom_kill, pids_max })
    }
}

fn keyed(path: &Path, key: &str) -> Result<Option<u64>, CgroupError> {
    Ok(files::optional(files::read_keyed(path))?.and_then(|m| m.get(key).copied()))
}

/// Baseline taken after `runsc create`; [`ExitProbe::classify`] after the sandbox exit and before
/// `runsc delete`.
#[derive(Debug, Clone)]
pub struct ExitProbe {
    cgroup: SandboxCgroup,
    baseline: Counters,
}

impl ExitProbe {
    pub fn arm(cgroup: SandboxCgroup) -> Result<ExitProbe, CgroupError> {
        let baseline = cgroup.counters()?;
        Ok(ExitProbe { cgroup, baseline })
    }

    pub fn cgroup(&self) -> &SandboxCgroup {
        &self.cgroup
    }

    /// The cause of `status`. Must run before `runsc delete` removes the cgroups.
    pub fn classify(&self, status: ExitStatus) -> Result<ExitCause, CgroupError> {
        Ok(classify(status, &self.baseline, &self.cgroup.counters()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const KILLED: ExitStatus = ExitStatus::Signaled {
        signal: 9,
        core_dumped: false,
    };

    fn c(oom: u64, max: u64) -> Counters {
        Counters {
            oom_kill: Some(oom),
            pids_max: Some(max),
        }
    }

    #[test]
    fn oom_kill_growth_is_an_oom() {
        assert_eq!(classify(KILLED, &c(0, 0), &c(1, 0)), ExitCause::Oom);
    }

    #[test]
    fn pids_max_growth_with_a_crash_is_the_process_limit() {
        assert_eq!(
            classify(ExitStatus::Exited(2), &c(0, 0), &c(0, 1)),
            ExitCause::ProcessLimit
        );
    }

    #[test]
    fn a_refused_fork_survived_with_exit_0_is_a_plain_exit() {
        assert_eq!(
            classify(ExitStatus::Exited(0), &c(0, 0), &c(0, 3)),
            ExitCause::Exited
        );
    }

    #[test]
    fn counters_already_high_at_baseline_do_not_count() {
        assert_eq!(classify(KILLED, &c(2, 5), &c(2, 5)), ExitCause::Signaled);
    }

    #[test]
    fn unreadable_counters_never_claim_a_cause() {
        let none = Counters::default();
        assert_eq!(classify(KILLED, &none, &c(1, 1)), ExitCause::Signaled);
        assert_eq!(classify(KILLED, &c(0, 0), &none), ExitCause::Signaled);
    }

    #[test]
    fn counters_are_read_from_v1_files() {
        let dir = tempfile::tempdir().unwrap();
        let (mem, pids) = (dir.path().join("memory"), dir.path().join("pids"));
        std::fs::create_dir_all(&mem).unwrap();
        std::fs::create_dir_all(&pids).unwrap();
        std::fs::write(
            mem.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        )
        .unwrap();
        std::fs::write(pids.join("pids.events"), "max 2\n").unwrap();
        let cg = SandboxCgroup::V1 {
            dirs: BTreeMap::from([("memory".into(), mem), ("pids".into(), pids)]),
        };
        assert_eq!(cg.counters().unwrap(), c(1, 2));
    }

    #[test]
    fn counters_are_read_from_v2_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("pids.events"), "max 0\n").unwrap();
        let cg = SandboxCgroup::V2 {
            dir: dir.path().into(),
        };
        assert_eq!(cg.counters().unwrap(), c(1, 0));
    }

    #[test]
    fn a_missing_controller_gives_no_counter_instead_of_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("pids.events"), "max 0\n").unwrap();
        let cg = SandboxCgroup::V1 {
            dirs: BTreeMap::from([("pids".into(), dir.path().into())]),
        };
        assert_eq!(
            cg.counters().unwrap(),
            Counters {
                oom_kill: None,
                pids_max: Some(0)
            }
        );
    }
}
