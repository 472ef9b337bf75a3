//! Counting what the runtime holds on the host, before and after a churn of containers: a leak
//! shows up as a count that grew.

use std::fmt;
use std::fs;
use std::path::PathBuf;

use crate::containerd::Containerd;
use crate::inspect;
use crate::run::Runtime;

/// What one private containerd's containers hold on the host right now. containerd's own
/// process and directory are not counted; everything its tasks add is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Processes (not containerd) whose command line mentions the containerd's directory or
    /// the runtime's state root: shims, runsc sandboxes, gofers, runsc calls.
    pub processes: usize,
    /// Zombie processes on the whole host (nothing of ours should stay unreaped). Other
    /// workloads on the host move it too, so it is reported, not asserted.
    pub zombies: usize,
    /// Mounts under the directory or mentioning the namespace.
    pub mounts: usize,
    /// Cgroup directories below `/<namespace>` in every hierarchy.
    pub cgroups: usize,
    /// Entries in the runsc state root of the namespace.
    pub runsc_state: usize,
    /// Files left in the containerd's state dir for tasks (bundles).
    pub bundles: usize,
    /// Open descriptors of the containerd process.
    pub containerd_fds: usize,
}

impl Census {
    pub fn take(c: &Containerd) -> Census {
        let dir = c.dir().to_string_lossy().into_owned();
        let root = c
            .runtime_root(&Runtime::hardened())
            .expect("the hardened runtime has a root");
        let root_s = root.to_string_lossy().into_owned();
        let containerd = c.pid().map(|p| p as i32);
        let processes = inspect::processes()
            .into_iter()
            .filter(|p| Some(p.pid) != containerd)
            .filter(|p| p.cmdline.contains(&dir) || p.cmdline.contains(&root_s))
            .count();
        // A current runsc's root-wide null-netns (crate::inspect) is runsc's, not a container's.
        let mounts = inspect::mounts()
            .into_iter()
            .filter(|m| !inspect::is_runsc_null_netns(m))
            .filter(|m| {
                m.mount_point.starts_with(c.dir())
                    || m.mount_point.to_string_lossy().contains(c.namespace())
            })
            .count();
        let cgroups = inspect::cgroup_dirs(c.namespace())
            .iter()
            .map(|d| count_subdirs(d))
            .sum();
        let bundles = fs::read_dir(c.bundle_dir("x").parent().expect("bundles have a parent"))
            .map(|d| d.count())
            .unwrap_or(0);
        Census {
            processes,
            zombies: zombies(),
            mounts,
            cgroups,
            runsc_state: inspect::runsc_state_files(&root, None).len(),
            bundles,
            containerd_fds: containerd.and_then(inspect::fd_count).unwrap_or(0),
        }
    }
}

fn count_subdirs(dir: &std::path::Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| 1 + count_subdirs(&e.path()))
        .sum()
}

/// Zombie processes on the host.
pub fn zombies() -> usize {
    let Ok(dir) = fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            fs::read_to_string(e.path().join("stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| rest.starts_with('Z'))
            })
        })
        .count()
}

/// One process's resources, for a long-lived shim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessUsage {
    pub fds: usize,
    pub threads: usize,
    pub rss_kib: u64,
}

impl ProcessUsage {
    pub fn of(pid: i32) -> Option<ProcessUsage> {
        let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        };
        Some(ProcessUsage {
            fds: inspect::fd_count(pid)?,
            threads: field("Threads:")? as usize,
            rss_kib: field("VmRSS:")?,
        })
    }
}

/// What each descriptor of `pid` points at (`socket:[..]`, `anon_inode:[eventfd]`, paths),
/// sorted: the difference between two of these names a leak.
pub fn fd_targets(pid: i32) -> Vec<String> {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    let mut targets: Vec<String> = dir
        .flatten()
        .filter_map(|e| fs::read_link(e.path()).ok())
        .map(|t| t.to_string_lossy().into_owned())
        .collect();
    targets.sort();
    targets
}

/// A before/after table of figures, printed by the churn tests.
#[derive(Debug, Default)]
pub struct Figures {
    rows: Vec<(String, String, String)>,
}

impl Figures {
    pub fn row(&mut self, what: &str, before: impl fmt::Display, after: impl fmt::Display) {
        self.rows
            .push((what.to_string(), before.to_string(), after.to_string()));
    }

    pub fn census(&mut self, before: &Census, after: &Census) {
        self.row("processes", before.processes, after.processes);
        self.row("zombies (host, info)", before.zombies, after.zombies);
        self.row("mounts", before.mounts, after.mounts);
        self.row("cgroups", before.cgroups, after.cgroups);
        self.row("runsc state", before.runsc_state, after.runsc_state);
        self.row("bundles", before.bundles, after.bundles);
        self.row(
            "containerd fds",
            before.containerd_fds,
            after.containerd_fds,
        );
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{:<32} {:>10} {:>10}", "", "before", "after")?;
        for (what, before, after) in &self.rows {
            writeln!(f, "{what:<32} {before:>10} {after:>10}")?;
        }
        Ok(())
    }
}

/// Shim sockets (`/run/containerd/s/...`) of these ids that still exist.
pub fn shim_sockets_left<'a>(
    c: &Containerd,
    ids: impl IntoIterator<Item = &'a String>,
) -> Vec<PathBuf> {
    ids.into_iter()
        .map(|id| c.shim_socket(id))
        .filter(|p| p.exists())
        .collect()
}
