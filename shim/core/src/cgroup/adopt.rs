//! Moving a running sandbox into the cgroups its pod's spec names: a warm sandbox claimed from
//! the pool (`crate::pool`) was booted in a cgroup of the pool's, and the kubelet accounts and
//! evicts a pod by the cgroup its spec names.
//!
//! The new cgroups get the spec's limits *before* any process moves, so the sandbox is never
//! without them; then every process moves, the controllers one by one, until the old cgroup is
//! empty; then the old cgroup goes, and the sandbox's threads get the normal CPU priority
//! back (warm sandboxes are booted at the lowest). runsc's own record of the sandbox's cgroup
//! is rewritten apart (`crate::pool::adopt`); the shim removes the new cgroup as it removes
//! every sandbox's.

use std::path::Path;

use super::update::{self, Limits};
use super::{CgroupError, SandboxCgroup};

/// How many passes over a controller's `cgroup.procs` before giving up: a sentry may start a
/// helper while its siblings are moved, which the next pass moves.
const PASSES: usize = 20;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Moves every process of `from` into `to` (created here), with `resources` (OCI
/// `LinuxResources`) applied to `to` first, and removes `from`.
pub fn adopt(
    from: &SandboxCgroup,
    to: &SandboxCgroup,
    resources: &serde_json::Value,
) -> Result<(), CgroupError> {
    let limits = Limits::from_linux_resources(resources)?;
    for (old, new) in pairs(from, to) {
        if new.is_dir() {
            return Err(CgroupError::Exists {
                path: new.to_path_buf(),
            });
        }
        create_levels(new)?;
        // A new v1 cpuset has no cpus or memory nodes and takes no process: the sandbox keeps
        // the ones it booted with.
        for f in ["cpuset.cpus", "cpuset.mems"] {
            if let Ok(v) = std::fs::read_to_string(old.join(f)) {
                let target = new.join(f);
                std::fs::write(&target, v.trim()).map_err(io(&target))?;
            }
        }
    }
    update::update(to, &limits)?;
    for (old, new) in pairs(from, to) {
        move_all(old, new)?;
    }
    from.remove_empty()?;
    if let Some(dir) = pairs(to, to).first().map(|(d, _)| *d) {
        normal_priority(dir);
    }
    Ok(())
}

/// Every thread of the processes in cgroup `dir` back at nice 0: the pool boots warm
/// sandboxes at the lowest CPU priority (`crate::pool::claim::start_filler`), so refills never
/// take CPU from running sandboxes; a sandbox a pod claimed runs as any other. Best effort: a
/// thread that exited meanwhile needs nothing.
fn normal_priority(dir: &Path) {
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in procs.split_whitespace() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for tid in tasks.flatten() {
            if let Ok(tid) = tid.file_name().to_string_lossy().parse::<libc::id_t>() {
                // SAFETY: setpriority with integer arguments only.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, 0) };
            }
        }
    }
}

/// Creates `dir` and the levels above it that are missing. A v1 cpuset level starts with no
/// cpus or memory nodes, and a child can only have what its parent has: each new level gets
/// its parent's (as runc and runsc do for the levels they create).
fn create_levels(dir: &Path) -> Result<(), CgroupError> {
    if dir.is_dir() {
        return Ok(());
    }
    let parent = dir.parent().ok_or_else(|| CgroupError::NotFound {
        pid: 0,
        reason: format!("{} has no parent", dir.display()),
    })?;
    create_levels(parent)?;
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        // Another pod's sandbox created the same parent meanwhile.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(io(dir)(e)),
    }
    for f in ["cpuset.cpus", "cpuset.mems"] {
        let target = dir.join(f);
        if !target.exists() {
            continue;
        }
        let empty = std::fs::read_to_string(&target).is_ok_and(|v| v.trim().is_empty());
        if empty {
            let inherited = std::fs::read_to_string(parent.join(f)).map_err(io(parent))?;
            std::fs::write(&target, inherited.trim()).map_err(io(&target))?;
        }
    }
    Ok(())
}

/// The directories of one controller in both (v1), or the two unified directories.
fn pairs<'a>(from: &'a SandboxCgroup, to: &'a SandboxCgroup) -> Vec<(&'a Path, &'a Path)> {
    match (from, to) {
        (SandboxCgroup::V1 { dirs: a }, SandboxCgroup::V1 { dirs: b }) => a
            .iter()
            .filter_map(|(c, old)| Some((old.as_path(), b.get(c)?.as_path())))
            .collect(),
        (SandboxCgroup::V2 { dir: a }, SandboxCgroup::V2 { dir: b }) => vec![(a, b)],
        _ => Vec::new(),
    }
}

fn move_all(old: &Path, new: &Path) -> Result<(), CgroupError> {
    let procs = old.join("cgroup.procs");
    let target = new.join("cgroup.procs");
    for _ in 0..PASSES {
        let listed = std::fs::read_to_string(&procs).map_err(io(&procs))?;
        let pids: Vec<&str> = listed.split_whitespace().collect();
        if pids.is_empty() {
            return Ok(());
        }
        for pid in pids {
            match std::fs::write(&target, pid) {
                Ok(()) => {}
                // Exited meanwhile: nothing to move.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(io(&target)(e)),
            }
        }
    }
    Err(CgroupError::LeftBehind(vec![format!(
        "{}: processes kept appearing while the sandbox was moved",
        old.display()
    )]))
}
