//! Stopping a private containerd and removing every trace of it.
//!
//! Order matters: tasks first (through containerd, so the runtime cleans up as it would in
//! production), then containerd, then whatever survived (shims, sandboxes), then mounts,
//! cgroups and the directory. Each forced step is recorded: a clean test forces none.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Containerd, SHIM_SOCKET_DIR};
use crate::inspect::{self, MountInfo, ProcInfo};
use crate::poll::poll_until;
use crate::run::Runtime;

/// How long containerd gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(10);
/// How long killed processes get to disappear.
const KILL_GRACE: Duration = Duration::from_secs(10);
/// Deadline of the `ctr` calls that remove leftover tasks.
const CTR_CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Lines of containerd's log printed when a test panics.
const LOG_TAIL_ON_PANIC: usize = 150;

/// What [`Containerd::shutdown`] found and had to force.
#[derive(Debug, Default, Clone)]
pub struct ShutdownReport {
    /// Tasks still present at shutdown; the harness killed and deleted them.
    pub tasks_left: Vec<String>,
    /// containerd did not exit on SIGTERM within the grace period and was killed.
    pub containerd_killed: bool,
    /// Processes mentioning the directory that outlived containerd (shims, sandboxes) and
    /// were killed.
    pub killed_processes: Vec<ProcInfo>,
    /// Mounts under the directory that had to be unmounted.
    pub unmounted: Vec<MountInfo>,
    /// Container cgroups left under the namespace's cgroup directories (removed if empty).
    pub cgroups_left: Vec<PathBuf>,
    /// runsc/runc state left in the hardened shim's default root (removed).
    pub runtime_state_left: Vec<PathBuf>,
    /// Shim sockets of leftover tasks (removed).
    pub shim_sockets_left: Vec<PathBuf>,
    /// Errors while cleaning up (a mount that would not go, a directory that stayed).
    pub errors: Vec<String>,
}

impl ShutdownReport {
    /// True when shutdown forced nothing: no task, process, mount, cgroup or state was left.
    pub fn is_clean(&self) -> bool {
        self.tasks_left.is_empty()
            && !self.containerd_killed
            && self.killed_processes.is_empty()
            && self.unmounted.is_empty()
            && self.cgroups_left.is_empty()
            && self.runtime_state_left.is_empty()
            && self.shim_sockets_left.is_empty()
            && self.errors.is_empty()
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clean() {
            return write!(f, "clean shutdown");
        }
        writeln!(f, "unclean shutdown:")?;
        if !self.tasks_left.is_empty() {
            writeln!(f, "  tasks left: {:?}", self.tasks_left)?;
        }
        if self.containerd_killed {
            writeln!(f, "  containerd ignored SIGTERM and was killed")?;
        }
        for p in &self.killed_processes {
            writeln!(f, "  killed process {}: {}", p.pid, p.cmdline)?;
        }
        for m in &self.unmounted {
            writeln!(f, "  unmounted {} ({})", m.mount_point.display(), m.fstype)?;
        }
        for c in &self.cgroups_left {
            writeln!(f, "  cgroup left: {}", c.display())?;
        }
        for s in &self.runtime_state_left {
            writeln!(f, "  runtime state left: {}", s.display())?;
        }
        for s in &self.shim_sockets_left {
            writeln!(f, "  shim socket left: {}", s.display())?;
        }
        for e in &self.errors {
            writeln!(f, "  error: {e}")?;
        }
        Ok(())
    }
}

fn kill(pid: i32, signal: libc::c_int) {
    // SAFETY: plain kill(2); a stale pid only yields ESRCH.
    unsafe { libc::kill(pid, signal) };
}

/// The `-id` argument of a shim's command line (`containerd-shim-... -namespace N -id ID ...`).
fn shim_id_of(cmdline: &str) -> Option<String> {
    let mut words = cmdline.split_whitespace();
    words.find(|w| *w == "-id")?;
    words.next().map(str::to_string)
}

/// Removes the cgroup directory `dir` and its subdirectories bottom-up. Subdirectories are
/// recorded: a clean runtime removes its container's cgroups itself. Processes still inside
/// are killed (only our containers live under our unique namespace); rmdir is retried until
/// their exit has fully left the cgroup, which lags behind the leader turning zombie while a
/// multi-threaded runsc sandbox winds down.
fn remove_cgroup_tree(dir: &Path, report: &mut ShutdownReport) {
    if let Ok(entries) = fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                let child = e.path();
                report.cgroups_left.push(child.clone());
                remove_cgroup_tree(&child, report);
            }
        }
    }
    let mut last_error = None;
    let removed = poll_until("the cgroup to empty", KILL_GRACE, || {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if !report.killed_processes.iter().any(|p| p.pid == pid) {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default();
                report.killed_processes.push(ProcInfo { pid, cmdline });
            }
            kill(pid, libc::SIGKILL);
        }
        match fs::remove_dir(dir) {
            Ok(()) => Some(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(()),
            Err(e) => {
                last_error = Some(e);
                None
            }
        }
    });
    if removed.is_err() {
        let e = last_error.map_or_else(String::new, |e| e.to_string());
        report.errors.push(format!("rmdir {}: {e}", dir.display()));
    }
}

impl Containerd {
    /// Stops containerd and removes everything it left: returns what had to be forced.
    /// A test that cleaned up after itself gets a report with [`ShutdownReport::is_clean`].
    pub fn shutdown(mut self) -> ShutdownReport {
        self.teardown()
    }

    fn teardown(&mut self) -> ShutdownReport {
        self.torn_down = true;
        let mut report = ShutdownReport::default();
        let dir = self.layout.dir.clone();
        let dir_str = dir.to_string_lossy().into_owned();

        // 1. Tasks still running: have containerd (and so the runtime) remove them. Only a
        // live shim can hold a task, so a /proc scan spares the ctr call in the common case.
        let shims_alive = inspect::processes_mentioning(&dir_str)
            .iter()
            .any(|p| p.cmdline.contains("containerd-shim"));
        if shims_alive && self.child.is_some() {
            self.remove_tasks(&mut report);
        }

        // 2. containerd itself.
        if let Some(mut child) = self.child.take() {
            kill(child.id() as i32, libc::SIGTERM);
            let exited = poll_until("containerd to exit", TERM_GRACE, || {
                child.try_wait().ok().flatten()
            });
            if exited.is_err() {
                report.containerd_killed = true;
                let _ = child.kill();
                let _ = child.wait();
            }
        }

        // 3. Anything still running with our directory on its command line: shims (their
        // -address is our socket), runsc sandboxes and gofers (their bundle is in our state).
        let survivors = inspect::processes_mentioning(&dir_str);
        for p in &survivors {
            kill(p.pid, libc::SIGKILL);
        }
        if poll_until("killed processes to exit", KILL_GRACE, || {
            survivors
                .iter()
                .all(|p| !inspect::is_alive(p.pid))
                .then_some(())
        })
        .is_err()
        {
            report.errors.push("processes survived SIGKILL".into());
        }
        report.killed_processes = survivors;

        // 4. Mounts under the directory, deepest first (runsc's root-wide null network
        // namespaces are runsc's own state, released without counting as left behind).
        inspect::release_runsc_null_netns(&dir);
        let mut mounts = inspect::mounts_under(&dir);
        mounts.sort_by_key(|m| std::cmp::Reverse(m.mount_point.as_os_str().len()));
        for m in &mounts {
            if let Err(e) = unmount(&m.mount_point) {
                report
                    .errors
                    .push(format!("umount {}: {e}", m.mount_point.display()));
            }
        }
        report.unmounted = mounts;

        // 5. cgroups: runtimes create `/<namespace>/<id>` and remove only `<id>`; the namespace
        // level is ours to remove. Anything below it is a leak. Only for a namespace generated
        // here: a caller-chosen one ("default") may hold other containerds' containers.
        if self.owns_namespace {
            for ns_dir in inspect::cgroup_dirs(&self.namespace) {
                remove_cgroup_tree(&ns_dir, &mut report);
            }
        }

        // 6. The hardened shim's default runsc root for our namespace (outside our directory).
        if let Some(root) = self
            .runtime_root(&Runtime::hardened())
            .filter(|_| self.owns_namespace)
        {
            let left = inspect::runsc_state_files(&root, None);
            inspect::release_runsc_null_netns(&root);
            if root.exists() {
                if let Err(e) = fs::remove_dir_all(&root) {
                    report
                        .errors
                        .push(format!("removing {}: {e}", root.display()));
                }
            }
            report.runtime_state_left = left;
        }
        // Shims this teardown killed (containerd was dead or could not remove them) never
        // removed their sockets either: the ids come from their command lines.
        let killed_shim_ids = report
            .killed_processes
            .iter()
            .filter(|p| p.cmdline.contains("containerd-shim"))
            .filter_map(|p| shim_id_of(&p.cmdline));
        let mut ids: Vec<String> = report.tasks_left.clone();
        ids.extend(killed_shim_ids);
        ids.sort();
        ids.dedup();
        for id in &ids {
            let socket = self.shim_socket(id);
            if socket.exists() {
                let _ = fs::remove_file(&socket);
                report.shim_sockets_left.push(socket);
            }
        }

        // 7. The directory.
        if std::thread::panicking() {
            self.print_log_tail();
        }
        if std::env::var_os(super::KEEP_DIR_ENV).is_some() {
            eprintln!(
                "gvh harness: keeping {} ({} is set)",
                dir.display(),
                super::KEEP_DIR_ENV
            );
        } else if dir.exists() {
            if let Err(e) = fs::remove_dir_all(&dir) {
                report
                    .errors
                    .push(format!("removing {}: {e}", dir.display()));
            }
        }
        report
    }

    fn remove_tasks(&self, report: &mut ShutdownReport) {
        let Ok(out) = self
            .ctr()
            .args(["task", "ls", "-q"])
            .timeout(CTR_CLEANUP_TIMEOUT)
            .output()
        else {
            return;
        };
        report.tasks_left = out.stdout.split_whitespace().map(str::to_string).collect();
        for id in &report.tasks_left {
            // --force kills a running task before deleting it.
            let _ = self
                .ctr()
                .args(["task", "delete", "--force", id])
                .timeout(CTR_CLEANUP_TIMEOUT)
                .output();
        }
    }

    fn print_log_tail(&self) {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        let start = lines.len().saturating_sub(LOG_TAIL_ON_PANIC);
        eprintln!(
            "---- last {} lines of containerd's log ({}) ----",
            lines.len() - start,
            self.log_path().display()
        );
        for l in &lines[start..] {
            eprintln!("{l}");
        }
        eprintln!("---- end of containerd's log; shim sockets are in {SHIM_SOCKET_DIR} ----");
    }
}

fn unmount(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    // Busy (an open file in a leftover process): detach it so the directory can go.
    // SAFETY: as above.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    Err(std::io::Error::last_os_error())
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        let report = self.teardown();
        if !report.is_clean() {
            eprintln!(
                "gvh harness: containerd {} dropped: {report}",
                self.layout.dir.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shim_id_of;

    #[test]
    fn a_shims_id_is_read_from_its_command_line() {
        let cmd = "/usr/bin/containerd-shim-runc-v2 -namespace gvh-1 -id orphan-7 -address /tmp/x/containerd.sock";
        assert_eq!(shim_id_of(cmd).as_deref(), Some("orphan-7"));
        assert_eq!(shim_id_of("containerd-shim-runc-v2 -namespace n"), None);
        assert_eq!(shim_id_of("containerd-shim-runc-v2 -namespace n -id"), None);
    }
}
