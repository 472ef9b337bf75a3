//! "Nothing left behind": the leak checks every integration test ends with.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::containerd::{Containerd, ShutdownReport};
use crate::inspect::{self, MountInfo, ProcInfo};
use crate::poll::poll_until;
use crate::run::Runtime;

/// How long teardown may lag behind the command that ended a container: the shim exits a
/// little after `ctr run --rm` returns, and containerd removes the bundle asynchronously.
pub const LEAK_GRACE: Duration = Duration::from_secs(15);

/// Host state that outlived a container (or a private containerd).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Leaks {
    /// Processes whose command line mentions the container id (or directory).
    pub processes: Vec<ProcInfo>,
    /// Mounts mentioning the container id (or under the directory).
    pub mounts: Vec<MountInfo>,
    /// Cgroup directories named after the container id, in any hierarchy.
    pub cgroups: Vec<PathBuf>,
    /// runsc/runc state files of the container under the runtime's `--root`.
    pub runtime_state: Vec<PathBuf>,
    /// Other files: the bundle directory, the shim socket, stdio fifos, the directory itself.
    pub files: Vec<PathBuf>,
}

impl Leaks {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
            && self.mounts.is_empty()
            && self.cgroups.is_empty()
            && self.runtime_state.is_empty()
            && self.files.is_empty()
    }
}

impl fmt::Display for Leaks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "nothing left");
        }
        for p in &self.processes {
            writeln!(f, "  process {}: {}", p.pid, p.cmdline)?;
        }
        for m in &self.mounts {
            writeln!(
                f,
                "  mount {} ({} from {})",
                m.mount_point.display(),
                m.fstype,
                m.source
            )?;
        }
        for c in &self.cgroups {
            writeln!(f, "  cgroup {}", c.display())?;
        }
        for s in &self.runtime_state {
            writeln!(f, "  runtime state {}", s.display())?;
        }
        for p in &self.files {
            writeln!(f, "  file {}", p.display())?;
        }
        Ok(())
    }
}

fn existing(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    paths.into_iter().filter(|p| p.exists()).collect()
}

/// What container `id`, run with `runtime`, left on the host right now.
pub fn container_leaks(c: &Containerd, id: &str, runtime: &Runtime) -> Leaks {
    let runtime_state = c
        .runtime_root(runtime)
        .map(|root| inspect::runsc_state_files(&root, Some(id)))
        .unwrap_or_default();
    let mut files = existing([c.bundle_dir(id), c.shim_socket(id)]);
    if let Ok(entries) = fs::read_dir(c.fifo_dir()) {
        // ctr names a container's fifos `<fifo-dir>/<random>/<id>-stdout` and so on.
        for e in entries.flatten() {
            if let Ok(inner) = fs::read_dir(e.path()) {
                files.extend(
                    inner
                        .flatten()
                        .filter(|f| f.file_name().to_string_lossy().starts_with(id))
                        .map(|f| f.path()),
                );
            }
        }
    }
    Leaks {
        processes: inspect::processes_mentioning(id),
        mounts: inspect::mounts_mentioning(id),
        cgroups: inspect::cgroups_named(id),
        runtime_state,
        files,
    }
}

/// Waits (up to [`LEAK_GRACE`]) for container `id` to leave nothing behind and returns what
/// is still there then (empty when clean). For tests that check more before failing.
pub fn wait_nothing_left(c: &Containerd, id: &str, runtime: &Runtime) -> Leaks {
    let mut last = Leaks::default();
    let _ = poll_until("the container's leftovers to go", LEAK_GRACE, || {
        last = container_leaks(c, id, runtime);
        last.is_empty().then_some(())
    });
    last
}

/// Waits (up to [`LEAK_GRACE`]) for container `id` to leave nothing behind, and panics with
/// the list of leftovers (and containerd's log) if it does not. Call it after the container
/// was deleted (`ctr run --rm` returned, or `ctr task rm` + `ctr container rm`).
#[track_caller]
pub fn assert_nothing_left(c: &Containerd, id: &str, runtime: &Runtime) {
    let mut last = Leaks::default();
    let clean = poll_until("the container's leftovers to go", LEAK_GRACE, || {
        last = container_leaks(c, id, runtime);
        last.is_empty().then_some(())
    });
    if clean.is_err() {
        panic!(
            "container {id} ({runtime:?}) left this behind after {LEAK_GRACE:?}:\n{last}\ncontainerd log: {}",
            c.log_path().display()
        );
    }
}

/// What a stopped private containerd left on the host: processes mentioning its directory,
/// mounts under it, the directory itself.
pub fn dir_leaks(dir: &Path) -> Leaks {
    let needle = dir.to_string_lossy();
    Leaks {
        processes: inspect::processes_mentioning(&needle),
        mounts: inspect::mounts_under(dir),
        files: existing([dir.to_path_buf()]),
        ..Leaks::default()
    }
}

/// Stops `c` and asserts that shutdown forced nothing and left nothing: no task, process,
/// mount, cgroup, runtime state or directory. Ends every test that starts a containerd.
#[track_caller]
pub fn assert_clean_shutdown(c: Containerd) -> ShutdownReport {
    let dir = c.dir().to_path_buf();
    let report = c.shutdown();
    assert!(report.is_clean(), "{report}");
    let leaks = dir_leaks(&dir);
    assert!(
        leaks.is_empty(),
        "after shutdown of {}:\n{leaks}",
        dir.display()
    );
    report
}
