//! Taking a warm sandbox for a pod: the shim side of the pool.

use std::path::Path;

use super::store::{Entry, KeyDir, PoolError};
use gvisor_hardened_proc::host_process::{start_time_of, HostProcess};

/// A warm sandbox this shim now owns: used by one pod, never returned.
#[derive(Debug)]
pub struct Claimed {
    pub key: KeyDir,
    pub entry: Entry,
    /// The sandbox process, by pidfd (it is not this shim's child).
    pub process: HostProcess,
}

fn open(e: &Entry) -> Option<HostProcess> {
    HostProcess::open_checked(e.pid, Some(e.start_time), start_time_of).filter(|p| p.is_running())
}

/// Whether the warm sandbox still runs (the same process that was booted, not a recycled pid).
pub fn alive(e: &Entry) -> bool {
    open(e).is_some()
}

/// Claims the oldest live warm sandbox of `kd`, or `None` when there is none (the caller
/// boots one as usual). A dead one found on the way is handed to the filler (`dead/`) and
/// never claimed.
pub fn claim(kd: &KeyDir) -> Result<Option<Claimed>, PoolError> {
    for e in kd.entries(&kd.ready()) {
        if !kd.take(&e.id, &kd.claimed())? {
            continue;
        }
        if let Some(process) = open(&e) {
            return Ok(Some(Claimed {
                key: kd.clone(),
                entry: e,
                process,
            }));
        }
        let name = format!("{}.json", e.id);
        let _ = std::fs::rename(kd.claimed().join(&name), kd.dead().join(&name));
        log::warn!(
            "pool {}: warm sandbox {} was dead; not claimed",
            kd.key,
            e.id
        );
    }
    Ok(None)
}

/// Starts a filler for `kd` (the shim binary's `pool-fill` mode) in a session of its own, not
/// waited for: it exits when the pool is full, or at once when another filler works on it.
pub fn start_filler(shim: &Path, kd: &KeyDir) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(shim);
    cmd.arg(super::FILL_ARG)
        .arg(&kd.dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    // The shim's reaper collects its exit (it reaps every child); nobody waits here.
    cmd.spawn().map(drop)
}
