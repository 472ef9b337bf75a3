//! Why a sandbox ended, and how the runtime says so. Both front ends classify a sandbox's exit
//! here: the containerd shim's exit path (`container/exit.rs`) and runsc-hardened's guard
//! (`oci/guard/`).

use crate::exit::ExitCause;
use crate::host::SandboxCgroups;
use crate::reaper::ExitStatus;

/// Why sandbox `id` ended with `status`.
///
/// In order: a limit the runtime enforced (`stopped_for`: the wall-clock limit or the idle
/// timeout, whose SIGTERM and SIGKILL the status only echoes); what the sandbox's cgroup
/// counters say (an OOM kill, the process ceiling), which must be read before `runsc delete`
/// removes the cgroups; else what the status says. Counters that cannot be read cost the
/// distinction, not the exit: a warning, and the status decides.
pub fn classify(
    id: &str,
    status: ExitStatus,
    stopped_for: Option<ExitCause>,
    cgroups: Option<&dyn SandboxCgroups>,
) -> ExitCause {
    if let Some(cause) = stopped_for {
        return cause;
    }
    match cgroups.map(|cg| cg.classify(status)) {
        Some(Ok(cause)) => cause,
        Some(Err(e)) => {
            log::warn!("container {id}: reading the sandbox's cgroup counters: {e}");
            ExitCause::of_status(status)
        }
        None => ExitCause::of_status(status),
    }
}

/// Logs an exit: a warning when enforcement ended it (the person running it must learn why),
/// information otherwise. `who` names the process ("container c1", "exec e1 of container c1").
pub fn log_exit(who: &str, cause: ExitCause, status: ExitStatus) {
    let msg = format!("{who} {}: {status}", cause.describe());
    if cause.is_enforced() {
        log::warn!("{msg}");
    } else {
        log::info!("{msg}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroup::CgroupError;
    use crate::fake::host::CgroupsSaying;

    #[test]
    fn an_enforced_limit_is_the_cause_whatever_the_counters_say() {
        let cg = CgroupsSaying(Ok(ExitCause::Oom));
        let cause = classify(
            "c1",
            ExitStatus::killed(),
            Some(ExitCause::Timeout),
            Some(&cg),
        );
        assert_eq!(cause, ExitCause::Timeout);
    }

    #[test]
    fn the_counters_tell_an_oom_kill_from_a_plain_kill() {
        let cg = CgroupsSaying(Ok(ExitCause::Oom));
        let cause = classify("c1", ExitStatus::killed(), None, Some(&cg));
        assert_eq!(cause, ExitCause::Oom);
    }

    #[test]
    fn without_cgroups_the_status_decides() {
        assert_eq!(
            classify("c1", ExitStatus::Exited(3), None, None),
            ExitCause::Exited
        );
        assert_eq!(
            classify("c1", ExitStatus::killed(), None, None),
            ExitCause::Signaled
        );
    }

    #[test]
    fn unreadable_counters_fall_back_to_the_status() {
        let cg = CgroupsSaying(Err(CgroupError::Parse {
            path: "/sys/fs/cgroup/memory/x/memory.oom_control".into(),
            content: "garbage".into(),
        }));
        let cause = classify("c1", ExitStatus::Exited(0), None, Some(&cg));
        assert_eq!(cause, ExitCause::Exited);
    }
}
