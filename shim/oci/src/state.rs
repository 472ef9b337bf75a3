//! What runsc-hardened keeps per container, in `<root>/<id>/`: `--root` when the engine gives
//! one (Docker always does), else [`DEFAULT_ROOT`]. Podman's conmon runs the final `delete`
//! with no runtime flags and no environment, so everything a later call needs (the policy text,
//! the runsc flags, the audit subject) is written here at `create` and read back, never taken
//! from the later call's flags.
//!
//! Files: `state.json` (the [`Record`], written once by `create`), `guard.pid`, `sandbox.pid`
//! (runsc's `--pid-file`), `notify` (a fifo: `start` tells the guard), `exit.json` (the guard's
//! account of the exit), `runsc-delete.pid` and `runsc-deleted` (the `runsc delete` the guard
//! starts at the exit, and its success), `start.lock` (held by `start` until its record is
//! written; the guard takes it before the exit record), `artifacts-start.json` (the start
//! manifest's record, for the guard's exit manifest).

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use policy_injector::{Lifetime, RunscFlags};
use serde::{Deserialize, Serialize};

use super::error::{OciError, Result};
use super::log::EngineLog;
use gvisor_hardened_core::artifacts::{StartRecord, WritableMount, WrittenManifest};
use gvisor_hardened_core::atomic_file::{self, Options};
use gvisor_hardened_core::audit::{open_locked, Subject};
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::proc_stat::ProcStat;
use gvisor_hardened_core::sandbox::host_process::HostProcess;

pub const DEFAULT_ROOT: &str = "/run/gvisor-hardened/oci";
const RECORD: &str = "state.json";
const GUARD_PID: &str = "guard.pid";
const SANDBOX_PID: &str = "sandbox.pid";
const NOTIFY: &str = "notify";
const EXIT: &str = "exit.json";
const RUNSC_DELETE_PID: &str = "runsc-delete.pid";
/// The sandbox's pid with its start time (`sandbox.pid` is runsc's, the pid alone).
const SANDBOX_PROCESS: &str = "sandbox.process";
const RUNSC_DELETED: &str = "runsc-deleted";
const START_LOCK: &str = "start.lock";
const ARTIFACTS_START: &str = "artifacts-start.json";
const OUTPUT_BUDGET: &str = "output-budget";

/// Fixed at create.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub bundle: PathBuf,
    /// The engine that made the spec, when known.
    pub engine: Option<policy_injector::Engine>,
    /// `docker`, `podman` or `oci`: the audit namespace and the runsc root's last segment.
    pub namespace: String,
    /// The policy that hardened the container, as TOML (reloaded by every later call).
    pub policy_toml: String,
    pub audit_path: PathBuf,
    pub subject: Subject,
    pub runsc: RunscFlags,
    /// What the runsc binary supports, as found at create: later calls reuse it.
    pub features: gvisor_hardened_core::runsc::features::Features,
    pub lifetime: Lifetime,
    pub cgroups_path: String,
    /// The hardened spec's annotations (`update` clamps to their tightening).
    pub annotations: BTreeMap<String, String>,
    /// The hardened spec's memory limit, which sized the guest's memory: `update` cannot change
    /// it. (Absent from a record an older release wrote: no check.)
    #[serde(default)]
    pub memory_at_create: Option<i64>,
    pub console_socket: Option<PathBuf>,
    /// Where the guard reports (the engine's `--log` of the create).
    pub log: EngineLog,
    pub created: String,
    /// The egress plan when the policy's allowlist is on: the guard runs the proxy for it.
    #[serde(default)]
    pub egress: Option<policy_injector::EgressPlan>,
    /// The network namespace the hardened spec names by path: the proxy dials from it (from
    /// the guard's own without one, as for `--network none`).
    #[serde(default)]
    pub network_namespace: Option<PathBuf>,
    /// The policy's name as egress refusals give it (`PolicySource::name`).
    #[serde(default)]
    pub policy_name: String,
    /// The hardened spec's writable bind mounts: what the artifact manifests walk at `start`
    /// and at the exit.
    #[serde(default)]
    pub writable_binds: Vec<WritableMount>,
    /// The runsc binary as `create` resolved it (the policy's `[runsc] path`, looked up on the
    /// engine's PATH then): every later call runs the same one, whatever PATH the engine or a
    /// person calling runsc-hardened by hand has, since `features` describe that binary.
    #[serde(default)]
    pub runsc_binary: Option<PathBuf>,
    /// The idle detector's CPU threshold, from the hardened spec's CPU quota.
    #[serde(default)]
    pub idle_threshold: gvisor_hardened_core::idle::IdleThreshold,
}

impl Record {
    /// The policy that hardened the container.
    pub fn policy(&self) -> Result<policy_injector::Policy> {
        policy_injector::Policy::from_toml_str(&self.policy_toml).map_err(|source| {
            OciError::Policy {
                id: self.id.clone(),
                source,
            }
        })
    }
}

/// The guard's account of the sandbox's end.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ExitRecord {
    /// The container's exit code as the engine sees it (128 + signal for a kill).
    pub status: u32,
    pub cause: ExitCause,
}

impl ExitRecord {
    pub fn of(exit: &Exit) -> ExitRecord {
        ExitRecord {
            status: exit.status,
            cause: exit.cause,
        }
    }
}

#[derive(Debug, Clone)]
pub struct StateDir {
    id: String,
    dir: PathBuf,
}

/// The id rule (`gvisor_hardened_core::container_id`): ids become state directory names and runsc ids.
pub fn check_id(id: &str) -> Result<()> {
    Ok(gvisor_hardened_core::container_id::check(
        "container id",
        id,
    )?)
}

impl StateDir {
    pub fn new(root: Option<&Path>, id: &str) -> Result<StateDir> {
        check_id(id)?;
        let root = root.unwrap_or(Path::new(DEFAULT_ROOT));
        Ok(StateDir {
            id: id.to_string(),
            dir: root.join(id),
        })
    }

    /// The directory of an existing container (a guard is given it directly).
    pub fn at(dir: &Path) -> Result<StateDir> {
        let id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        check_id(&id)?;
        Ok(StateDir {
            id,
            dir: dir.to_path_buf(),
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    pub fn exists(&self) -> bool {
        self.dir.join(RECORD).is_file()
    }

    /// Makes the directory; an existing one means the id is taken.
    pub fn create(&self, record: &Record) -> Result<()> {
        if let Some(root) = self.dir.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root)
                .map_err(OciError::io("creating the state root", root))?;
        }
        match DirBuilder::new().mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(OciError::AlreadyExists(self.id.clone()))
            }
            Err(e) => return Err(OciError::io("creating the state directory", &self.dir)(e)),
        }
        let bytes = serde_json::to_vec(record).expect("the record serialises");
        atomic_file::write(&self.dir.join(RECORD), &bytes, Options::PRIVATE)
            .map_err(OciError::io("writing", self.dir.join(RECORD)))?;
        nix::unistd::mkfifo(
            &self.dir.join(NOTIFY),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| OciError::io("making the fifo", self.dir.join(NOTIFY))(e.into()))
    }

    /// The record, or [`OciError::NotFound`].
    pub fn record(&self) -> Result<Record> {
        let path = self.dir.join(RECORD);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(OciError::NotFound(self.id.clone()))
            }
            Err(e) => return Err(OciError::io("reading", path)(e)),
        };
        serde_json::from_slice(&bytes).map_err(|e| OciError::Invalid {
            what: "state.json",
            reason: format!("{}: {e}", path.display()),
        })
    }

    pub fn sandbox_pid_file(&self) -> PathBuf {
        self.dir.join(SANDBOX_PID)
    }

    pub fn notify_fifo(&self) -> PathBuf {
        self.dir.join(NOTIFY)
    }

    /// The container's output budget file (`output_limit::OutputBudget::in_file`): made by
    /// the guard when the policy bounds output or has an idle timeout, mapped by exec guards.
    pub fn output_budget_file(&self) -> PathBuf {
        self.dir.join(OUTPUT_BUDGET)
    }

    pub fn sandbox_pid(&self) -> Option<i32> {
        read_pid(&self.dir.join(SANDBOX_PID))
    }

    /// The guard's pid while that guard lives: a process that reused the number after it
    /// (another start time) is not it.
    pub fn live_guard(&self) -> Option<i32> {
        self.live(GUARD_PID)
    }

    pub fn set_guard(&self, pid: i32, started: Option<u64>) -> Result<()> {
        self.set_process(GUARD_PID, pid, started)
    }

    /// The guard while it runs, as a handle to signal and wait on (see [`StateDir::process`]).
    pub fn guard_process(&self) -> Option<HostProcess> {
        self.process(GUARD_PID)
    }

    /// The `runsc delete` the guard started at the exit, while it runs.
    pub fn runsc_delete_process(&self) -> Option<HostProcess> {
        self.process(RUNSC_DELETE_PID)
    }

    /// The sandbox process while it runs (recorded by the guard with its start time).
    pub fn sandbox_process(&self) -> Option<HostProcess> {
        self.process(SANDBOX_PROCESS)
    }

    pub fn set_sandbox_process(&self, pid: i32, started: Option<u64>) -> Result<()> {
        self.set_process(SANDBOX_PROCESS, pid, started)
    }

    pub fn set_runsc_delete(&self, pid: i32, started: Option<u64>) -> Result<()> {
        self.set_process(RUNSC_DELETE_PID, pid, started)
    }

    /// Written when the guard's `runsc delete` succeeded.
    pub fn runsc_deleted_marker(&self) -> PathBuf {
        self.dir.join(RUNSC_DELETED)
    }

    pub fn runsc_deleted(&self) -> bool {
        self.runsc_deleted_marker().is_file()
    }

    /// A process recorded as `PID START_TIME` (`START_TIME`: field 22 of `/proc/PID/stat`), while
    /// that process lives.
    fn live(&self, name: &str) -> Option<i32> {
        let text = fs::read_to_string(self.dir.join(name)).ok()?;
        let mut words = text.split_whitespace();
        let pid: i32 = words.next()?.parse().ok()?;
        let started: u64 = words.next()?.parse().ok()?;
        let stat = ProcStat::read(pid)?;
        (stat.is_alive() && stat.start_time() == Some(started)).then_some(pid)
    }

    /// A recorded process as a pidfd, opened only while the pid still names the process that
    /// was recorded (its start time matches, checked after the open): a signal through it can
    /// never reach a process that took the number since.
    fn process(&self, name: &str) -> Option<HostProcess> {
        let text = fs::read_to_string(self.dir.join(name)).ok()?;
        let mut words = text.split_whitespace();
        let pid: i32 = words.next()?.parse().ok()?;
        let started: u64 = words.next()?.parse().ok()?;
        HostProcess::open_checked(pid, Some(started), proc_start_time)
            .filter(HostProcess::is_running)
    }

    fn set_process(&self, name: &str, pid: i32, started: Option<u64>) -> Result<()> {
        let text = match started {
            Some(t) => format!("{pid} {t}\n"),
            None => format!("{pid}\n"),
        };
        atomic_file::write(&self.dir.join(name), text.as_bytes(), Options::PRIVATE)
            .map_err(OciError::io("writing", self.dir.join(name)))
    }

    /// Held by `start` from `runsc start` until its audit record is written, and taken by the
    /// guard before the exit record: a workload that exits at once (`true`) would otherwise
    /// have its exit audited before its start. Released when the file is dropped.
    pub fn lock_start(&self) -> Result<fs::File> {
        let path = self.dir.join(START_LOCK);
        open_locked(&path).map_err(OciError::io("locking", &path))
    }

    /// Keeps `start`'s manifest record for the guard, which diffs against it at the exit.
    pub fn set_artifacts_start(&self, start: &StartRecord) -> Result<()> {
        let bytes = serde_json::to_vec(start).expect("serialises");
        atomic_file::write(&self.dir.join(ARTIFACTS_START), &bytes, Options::PRIVATE)
            .map_err(OciError::io("writing", self.dir.join(ARTIFACTS_START)))
    }

    /// `start`'s manifest record, with the writable mounts it walked; `None` when it took none.
    pub fn artifacts_start(&self, mounts: &[WritableMount]) -> Option<StartRecord> {
        #[derive(Deserialize)]
        struct Kept {
            manifest: WrittenManifest,
            complete: bool,
        }
        let kept: Kept =
            serde_json::from_slice(&fs::read(self.dir.join(ARTIFACTS_START)).ok()?).ok()?;
        Some(StartRecord {
            mounts: mounts.to_vec(),
            manifest: kept.manifest,
            complete: kept.complete,
        })
    }

    pub fn exit(&self) -> Option<ExitRecord> {
        let bytes = fs::read(self.dir.join(EXIT)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    pub fn set_exit(&self, exit: &ExitRecord) -> Result<()> {
        let bytes = serde_json::to_vec(exit).expect("serialises");
        atomic_file::write(&self.dir.join(EXIT), &bytes, Options::PRIVATE)
            .map_err(OciError::io("writing", self.dir.join(EXIT)))
    }

    pub fn remove(&self) -> Result<()> {
        match fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(OciError::io("removing", &self.dir)(e))
            }
            _ => Ok(()),
        }
    }
}

fn read_pid(path: &Path) -> Option<i32> {
    fs::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p: &i32| *p > 0)
}

/// Is `pid` a live process (not a zombie)?
pub fn alive(pid: i32) -> bool {
    ProcStat::read(pid).is_some_and(|s| s.is_alive())
}

/// When `pid` started, in clock ticks after boot: with the pid, it names one process for good.
pub fn proc_start_time(pid: i32) -> Option<u64> {
    gvisor_hardened_core::sandbox::host_process::start_time_of(pid)
}

/// Writes a pid file as runc does: whole or not at all.
pub fn write_pid_file(path: &Path, pid: i32) -> Result<()> {
    atomic_file::write(path, pid.to_string().as_bytes(), Options::PRIVATE)
        .map_err(OciError::io("writing the pid file", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_directory_lives_under_the_given_root_or_the_default() {
        assert_eq!(
            StateDir::new(None, "c1").unwrap().path(),
            Path::new("/run/gvisor-hardened/oci/c1")
        );
        assert_eq!(
            StateDir::new(Some(Path::new("/run/docker/runtime-runc/moby")), "c1")
                .unwrap()
                .path(),
            Path::new("/run/docker/runtime-runc/moby/c1")
        );
    }

    #[test]
    fn a_live_process_is_alive_and_a_missing_one_is_not() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(i32::MAX));
    }

    #[test]
    fn the_guard_is_known_by_pid_and_start_time_not_by_pid_alone() {
        let root = tempfile::tempdir().unwrap();
        let state = StateDir::new(Some(root.path()), "c1").unwrap();
        fs::create_dir(state.path()).unwrap();
        let me = std::process::id() as i32;
        let started = proc_start_time(me);
        assert!(started.is_some());
        state.set_guard(me, started).unwrap();
        assert_eq!(state.live_guard(), Some(me));
        assert_eq!(state.guard_process().map(|p| p.pid()), Some(me));
        // The same number, another process (it started at another time).
        state.set_guard(me, started.map(|t| t + 1)).unwrap();
        assert_eq!(state.live_guard(), None);
        assert!(state.guard_process().is_none());
        // Without a start time there is nothing to tell a reused pid by.
        state.set_guard(me, None).unwrap();
        assert_eq!(state.live_guard(), None);
        state.set_guard(i32::MAX, started).unwrap();
        assert_eq!(state.live_guard(), None);
    }
}
