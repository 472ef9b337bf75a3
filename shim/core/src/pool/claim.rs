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
            kd.record_claim();
            return Ok(Some(Claimed {
                key: kd.clone(),
                entry: e,
                process,
            }));
        }
        let _ = kd.move_entry(&e.id, &kd.claimed(), &kd.dead());
        log::warn!(
            "pool {}: warm sandbox {} was dead; not claimed",
            kd.key,
            e.id
        );
    }
    Ok(None)
}

/// What a pod sandbox's bundle keeps of its claim, so that the `delete` action run after its
/// shim died can find the sandbox runsc knows by the pool's id, and forget the claim.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClaimRecord {
    pub runsc_id: String,
    pub key_dir: std::path::PathBuf,
}

impl ClaimRecord {
    pub fn write(&self, bundle: &Path) -> Result<(), crate::bundle::BundleError> {
        let bytes = serde_json::to_vec(self).expect("a claim record serialises");
        crate::bundle::write(bundle, crate::bundle::POOL_CLAIM, &bytes)
    }

    pub fn read(bundle: &Path) -> Option<ClaimRecord> {
        let bytes = std::fs::read(bundle.join(crate::bundle::POOL_CLAIM)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Forgets the claimed sandbox's entry and bundle in its pool (it is deleted by now).
    pub fn forget(&self) {
        KeyDir::at(self.key_dir.clone()).forget(&self.runsc_id);
    }
}

/// Starts a filler for `kd` (the shim binary's `pool-fill` mode) in a session of its own, at
/// nice 19, in `/`, not waited for: it exits when the pool is full, or at once when another
/// filler works on it.
pub fn start_filler(shim: &Path, kd: &KeyDir) -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(shim);
    cmd.arg(super::FILL_ARG)
        .arg(&kd.dir)
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid and setpriority are async-signal-safe system calls; nothing else runs
    // between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            // The lowest CPU priority, inherited by runsc and the sandboxes it boots: a refill
            // never takes CPU from the pods that are starting or running. A claim gives the
            // claimed sandbox's threads the normal priority back (`cgroup::adopt`).
            libc::setpriority(libc::PRIO_PROCESS, 0, 19);
            Ok(())
        });
    }
    // The shim's reaper collects its exit (it reaps every child); nobody waits here.
    cmd.spawn().map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_record_survives_in_the_bundle_for_the_delete_action() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(ClaimRecord::read(dir.path()), None);
        let rec = ClaimRecord {
            runsc_id: "pool-1".into(),
            key_dir: "/r/.pool/k8s.io/abc".into(),
        };
        rec.write(dir.path()).unwrap();
        assert_eq!(ClaimRecord::read(dir.path()), Some(rec));
        crate::bundle::remove_shim_files(dir.path());
        assert_eq!(ClaimRecord::read(dir.path()), None);
    }
}
