//! Stopping a CRI containerd: pods the test did not remove go through CRI first (as a
//! draining kubelet would), then containerd's own teardown, then the per-instance host
//! objects CRI does not own (the CNI bridge, the cgroup root).

use std::fmt;
use std::path::PathBuf;
use std::process::Command;

use super::CriContainerd;
use crate::containerd::ShutdownReport;
use crate::inspect;
use crate::leaks::dir_leaks;

/// Deadline of each CRI call that removes a leftover pod.
const TEARDOWN_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// What [`CriContainerd::shutdown`] found and had to force.
#[derive(Debug, Default)]
pub struct CriShutdownReport {
    /// Pods still present at shutdown (removed through CRI).
    pub pods_left: Vec<String>,
    /// CRI calls that failed while removing them.
    pub pod_errors: Vec<String>,
    /// Network namespaces of those pods that outlived their removal (unmounted and deleted).
    pub netns_left: Vec<PathBuf>,
    /// Cgroups left under the instance's cgroup root (removed).
    pub cgroups_left: Vec<PathBuf>,
    /// Shim sockets of leftover pods that outlived containerd's teardown (removed): a pod
    /// shim's socket is named after the sandbox, whose task may already be gone.
    pub shim_sockets_left: Vec<PathBuf>,
    /// containerd's own teardown.
    pub containerd: ShutdownReport,
    /// Problems removing the bridge or the cgroup root.
    pub errors: Vec<String>,
}

impl CriShutdownReport {
    pub fn is_clean(&self) -> bool {
        self.pods_left.is_empty()
            && self.pod_errors.is_empty()
            && self.netns_left.is_empty()
            && self.cgroups_left.is_empty()
            && self.shim_sockets_left.is_empty()
            && self.containerd.is_clean()
            && self.errors.is_empty()
    }
}

impl fmt::Display for CriShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clean() {
            return write!(f, "clean CRI shutdown");
        }
        writeln!(f, "unclean CRI shutdown:")?;
        if !self.pods_left.is_empty() {
            writeln!(f, "  pods left: {:?}", self.pods_left)?;
        }
        for e in &self.pod_errors {
            writeln!(f, "  removing a pod: {e}")?;
        }
        for n in &self.netns_left {
            writeln!(f, "  netns left: {}", n.display())?;
        }
        for c in &self.cgroups_left {
            writeln!(f, "  cgroup left: {}", c.display())?;
        }
        for s in &self.shim_sockets_left {
            writeln!(f, "  shim socket left: {}", s.display())?;
        }
        for e in &self.errors {
            writeln!(f, "  error: {e}")?;
        }
        if !self.containerd.is_clean() {
            write!(f, "{}", self.containerd)?;
        }
        Ok(())
    }
}

fn unmount_and_remove(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path; MNT_DETACH never blocks.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    std::fs::remove_file(path)
}

/// Removes a cgroup directory tree bottom-up, recording every directory below `dir`. Whatever
/// still runs inside was already killed by containerd's teardown (its cgroups are ours alone).
fn remove_cgroup_tree(dir: &std::path::Path, report: &mut CriShutdownReport, top: bool) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&e.path(), report, false);
            }
        }
    }
    if !top {
        report.cgroups_left.push(dir.to_path_buf());
    }
    let mut last = None;
    let gone = crate::poll::poll_until(
        "the cgroup to go",
        std::time::Duration::from_secs(10),
        || {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: plain kill(2) of a process in our own cgroup.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            match std::fs::remove_dir(dir) {
                Ok(()) => Some(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some(()),
                Err(e) => {
                    last = Some(e);
                    None
                }
            }
        },
    );
    if gone.is_err() {
        report
            .errors
            .push(format!("rmdir {}: {last:?}", dir.display()));
    }
}

impl CriContainerd {
    /// Removes leftover pods through CRI, stops containerd, deletes the bridge and the cgroup
    /// root. A test that removed its pods gets a clean report.
    pub fn shutdown(mut self) -> CriShutdownReport {
        self.teardown()
    }

    fn teardown(&mut self) -> CriShutdownReport {
        self.torn_down = true;
        let mut report = CriShutdownReport::default();
        // 1. Pods the test left: as a kubelet would, stop then remove each. A hung runtime
        // must not hold teardown for the full default deadline per call: containerd's own
        // teardown below kills whatever is left anyway.
        self.client.set_timeout(TEARDOWN_CALL_TIMEOUT);
        for pod in self.pods() {
            report.pods_left.push(pod.id.clone());
            if let Err(e) = self.remove_pod(&pod) {
                report.pod_errors.push(format!("{}: {e}", pod.id));
            }
            if let Some(netns) = pod.netns.as_ref().filter(|p| p.exists()) {
                report.netns_left.push(netns.clone());
                if let Err(e) = unmount_and_remove(netns) {
                    report
                        .errors
                        .push(format!("removing netns {}: {e}", netns.display()));
                }
            }
        }
        let sockets: Vec<PathBuf> = match &self.containerd {
            Some(c) => self.pods().iter().map(|p| c.shim_socket(&p.id)).collect(),
            None => Vec::new(),
        };
        // Warm sandboxes a test left in a pool (it drains what it filled when it passes): their
        // processes die with the directory below, their cgroups are outside it.
        let warm_ids: Vec<String> = std::fs::read_dir(self.layout.runsc_root_base().join(".pool"))
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|ns| std::fs::read_dir(ns.path()).into_iter().flatten().flatten())
            .flat_map(|key| {
                std::fs::read_dir(key.path().join("bundles"))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .map(|b| b.file_name().to_string_lossy().into_owned())
            .collect();
        // 2. containerd (kills whatever still mentions the directory, unmounts, removes it).
        if let Some(c) = self.containerd.take() {
            report.containerd = c.shutdown();
        }
        for socket in sockets.into_iter().filter(|s| s.exists()) {
            let _ = std::fs::remove_file(&socket);
            report.shim_sockets_left.push(socket);
        }
        // 3. Per-instance host objects outside the directory.
        let bridge = self.layout.bridge();
        if std::path::Path::new("/sys/class/net")
            .join(&bridge)
            .exists()
        {
            match Command::new("ip")
                .args(["link", "delete", &bridge])
                .output()
            {
                Ok(o) if o.status.success() => {}
                Ok(o) => report.errors.push(format!(
                    "ip link delete {bridge}: {}",
                    String::from_utf8_lossy(&o.stderr).trim()
                )),
                Err(e) => report.errors.push(format!("ip link delete {bridge}: {e}")),
            }
        }
        for dir in inspect::cgroup_dirs(&self.cgroup_root) {
            remove_cgroup_tree(&dir, &mut report, true);
        }
        for id in warm_ids {
            let path = gvisor_hardened_core::pool::spec::pool_cgroups_path(&id);
            for dir in inspect::cgroup_dirs(&path) {
                remove_cgroup_tree(&dir, &mut report, false);
            }
        }
        report
    }
}

impl Drop for CriContainerd {
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        let report = self.teardown();
        if !report.is_clean() {
            eprintln!(
                "gvh harness: CRI containerd {} dropped: {report}",
                self.layout.dir.display()
            );
        }
    }
}

/// Stops `cri` and asserts that nothing had to be forced and nothing mentions its directory,
/// bridge or cgroup root afterwards. Ends every CRI test.
#[track_caller]
pub fn assert_clean_cri_shutdown(cri: CriContainerd) -> CriShutdownReport {
    let dir = cri.dir().to_path_buf();
    let bridge = cri.layout().bridge();
    let cgroup_root = cri.cgroup_root().to_string();
    let report = cri.shutdown();
    assert!(report.is_clean(), "{report}");
    let leaks = dir_leaks(&dir);
    assert!(
        leaks.is_empty(),
        "after shutdown of {}:\n{leaks}",
        dir.display()
    );
    assert!(
        !std::path::Path::new("/sys/class/net")
            .join(&bridge)
            .exists(),
        "bridge {bridge} left"
    );
    assert!(
        inspect::cgroup_dirs(&cgroup_root).is_empty(),
        "cgroup root {cgroup_root} left"
    );
    report
}
