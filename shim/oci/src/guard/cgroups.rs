//! The guard's place in the sandbox's cgroups: the engines find "the container's cgroup"
//! through the pid they wait on, the guard's (see `mod.rs`).

use std::path::PathBuf;

use gvisor_hardened_core::cgroup::SandboxCgroup;

/// Moves this process into the sandbox's resource-controller cgroups (where it knows its way
/// back); returns the directories it came from.
pub(super) fn join(cg: &SandboxCgroup) -> Vec<PathBuf> {
    let me = std::process::id() as i32;
    // Should the sandbox's memory limit be hit while we are in its cgroup, the kernel must
    // pick the sandbox, never the process that reports the OOM.
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let mut from = Vec::new();
    match (SandboxCgroup::of_pid(me), cg) {
        (Ok(SandboxCgroup::V1 { dirs: mine }), SandboxCgroup::V1 { dirs: theirs }) => {
            for (controller, dir) in theirs {
                let Some(home) = mine
                    .get(controller)
                    .filter(|_| !controller.starts_with("name="))
                else {
                    continue;
                };
                if std::fs::write(dir.join("cgroup.procs"), me.to_string()).is_ok() {
                    from.push(home.clone());
                }
            }
        }
        (Ok(SandboxCgroup::V2 { dir: home }), SandboxCgroup::V2 { dir })
            if std::fs::write(dir.join("cgroup.procs"), me.to_string()).is_ok() =>
        {
            from.push(home);
        }
        _ => {}
    }
    from
}

pub(super) fn leave(home: &[PathBuf]) {
    let me = std::process::id().to_string();
    for dir in home {
        let _ = std::fs::write(dir.join("cgroup.procs"), &me);
    }
}
