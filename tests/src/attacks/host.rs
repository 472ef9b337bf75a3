//! "The host is unchanged": a snapshot of what a sandbox escape would touch, compared before and
//! after each attack.
//!
//! Files: metadata (type, size, mode, owner, inode, mtime, ctime, link target) of every entry
//! under the watched trees, without following symlinks or crossing filesystems. Any write,
//! chmod, chown, rename, create or delete changes one of these (ctime cannot be set from user
//! space). Excluded: caches that the machine's other users rewrite all the time (cargo's
//! registry, rustup and pyenv toolchains, npm/perf caches, CNI results of other tests' pods);
//! the runtime's own state, log and audit paths are not under the watched trees at all.
//!
//! Runtime leftovers: processes, mounts, cgroups and runsc state files that mention one of the
//! names the attack used (container ids, the private containerd's directory and namespace).
//! Those are the only host objects an attack run can create legitimately, so anything left
//! under them afterwards is a leak; every other process, mount and cgroup belongs to someone
//! else on this shared machine and is not ours to judge.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::inspect;

/// Trees checked around every attack: where an escape would plant or change something.
pub const QUICK_TREES: &[&str] = &[
    "/etc",
    "/root",
    "/home",
    "/usr/local",
    "/usr/bin",
    "/usr/sbin",
    "/var/lib",
    "/boot",
    "/opt",
    "/srv",
];

/// Trees checked around a whole category: the quick ones and all of /usr.
pub const FULL_TREES: &[&str] = &[
    "/etc", "/root", "/home", "/usr", "/var/lib", "/boot", "/opt", "/srv",
];

/// Paths under the watched trees that other users of the machine change all the time. The CNI
/// results cache belongs to other tests' Kubernetes pods: the hardened runtime never runs CNI
/// (runsc `--network=none`).
pub const NOISY: &[&str] = &[
    "/var/lib/cni",
    "/root/.cargo/registry",
    "/root/.cargo/git",
    "/root/.cargo/.package-cache",
    "/root/.cargo/.global-cache",
    "/root/.cargo/.package-cache-mutate",
    "/root/.rustup",
    "/root/.pyenv",
    "/root/.npm",
    "/root/.cache",
    "/root/.debug",
    "/root/.claude",
];

#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    link: Option<PathBuf>,
}

impl Meta {
    fn of(path: &Path, m: &fs::Metadata) -> Meta {
        Meta {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
            // A directory's size follows its entries, which are compared one by one.
            size: if m.is_dir() { 0 } else { m.size() },
            ino: m.ino(),
            // A directory's times move whenever an entry comes or goes, which the entries show;
            // ignoring them keeps a skipped noisy entry (cargo's lock file in ~/.cargo) from
            // showing up as a change of its parent.
            mtime: if m.is_dir() {
                (0, 0)
            } else {
                (m.mtime(), m.mtime_nsec())
            },
            ctime: if m.is_dir() {
                (0, 0)
            } else {
                (m.ctime(), m.ctime_nsec())
            },
            link: m
                .file_type()
                .is_symlink()
                .then(|| fs::read_link(path).ok())
                .flatten(),
        }
    }
}

/// Names whose host objects belong to the attack being checked.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Processes and mounts mentioning one of these are recorded: container ids, the
    /// containerd namespace, the private containerd's directory...
    pub names: Vec<String>,
    /// Cgroup directories with one of these names are recorded (container ids; the namespace's
    /// parent cgroup stays until the lab's teardown, so it is only named at the very end).
    pub cgroups: Vec<String>,
    /// runsc `--root` directories to list (the shim's default root for the namespace, and any
    /// root a test policy sets).
    pub runsc_roots: Vec<PathBuf>,
}

/// What the host looked like at one moment.
#[derive(Debug, Clone, Default)]
pub struct HostSnapshot {
    files: BTreeMap<PathBuf, Meta>,
    unreadable: Vec<PathBuf>,
    processes: Vec<String>,
    mounts: Vec<String>,
    cgroups: Vec<PathBuf>,
    runsc_state: Vec<PathBuf>,
}

fn is_noisy(path: &Path) -> bool {
    NOISY.iter().any(|n| path.starts_with(n))
}

fn walk(root: &Path, dev: u64, files: &mut BTreeMap<PathBuf, Meta>, unreadable: &mut Vec<PathBuf>) {
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(_) => {
                unreadable.push(dir);
                continue;
            }
        };
        for e in entries.flatten() {
            let path = e.path();
            if is_noisy(&path) {
                continue;
            }
            let Ok(m) = fs::symlink_metadata(&path) else {
                // Gone between readdir and stat: someone else's temporary file.
                continue;
            };
            files.insert(path.clone(), Meta::of(&path, &m));
            if m.is_dir() && m.dev() == dev {
                stack.push(path);
            }
        }
    }
}

impl HostSnapshot {
    /// Takes a snapshot of `trees` and of the runtime objects named in `scope`.
    pub fn take(trees: &[&str], scope: &Scope) -> HostSnapshot {
        let mut snap = HostSnapshot::default();
        for tree in trees {
            let root = Path::new(tree);
            match fs::symlink_metadata(root) {
                Ok(m) => {
                    snap.files.insert(root.to_path_buf(), Meta::of(root, &m));
                    if m.is_dir() {
                        walk(root, m.dev(), &mut snap.files, &mut snap.unreadable);
                    }
                }
                Err(_) => snap.unreadable.push(root.to_path_buf()),
            }
        }
        let mentions = |s: &str| scope.names.iter().any(|n| !n.is_empty() && s.contains(n));
        snap.processes = inspect::processes()
            .into_iter()
            .filter(|p| mentions(&p.cmdline))
            .map(|p| format!("{} {}", p.pid, p.cmdline))
            .collect();
        snap.mounts = inspect::mounts()
            .into_iter()
            // A current runsc's shared null netns lives as long as its root: runsc's, not a leak.
            .filter(|m| !inspect::is_runsc_null_netns(m))
            .filter(|m| mentions(&m.mount_point.to_string_lossy()) || mentions(&m.source))
            .map(|m| {
                format!(
                    "{} ({} from {})",
                    m.mount_point.display(),
                    m.fstype,
                    m.source
                )
            })
            .collect();
        snap.cgroups = scope
            .cgroups
            .iter()
            .flat_map(|n| inspect::cgroups_named(n))
            .collect();
        snap.cgroups.sort();
        snap.cgroups.dedup();
        snap.runsc_state = scope
            .runsc_roots
            .iter()
            .flat_map(|root| inspect::runsc_state_files(root, None))
            .collect();
        snap
    }

    /// What changed from `self` (before) to `after`.
    pub fn diff(&self, after: &HostSnapshot) -> HostDiff {
        let mut d = HostDiff::default();
        for (path, meta) in &after.files {
            match self.files.get(path) {
                None => d.files.push(format!("created {}", path.display())),
                Some(old) if old != meta => d.files.push(format!("changed {}", path.display())),
                Some(_) => {}
            }
        }
        for path in self.files.keys() {
            if !after.files.contains_key(path) {
                d.files.push(format!("removed {}", path.display()));
            }
        }
        let new = |before: &[String], now: &[String]| -> Vec<String> {
            now.iter()
                .filter(|x| !before.contains(x))
                .cloned()
                .collect()
        };
        d.processes = new(&self.processes, &after.processes);
        d.mounts = new(&self.mounts, &after.mounts);
        d.cgroups = after
            .cgroups
            .iter()
            .filter(|c| !self.cgroups.contains(c))
            .map(|c| c.display().to_string())
            .collect();
        d.runsc_state = after
            .runsc_state
            .iter()
            .filter(|c| !self.runsc_state.contains(c))
            .map(|c| c.display().to_string())
            .collect();
        d
    }

    /// Number of file entries recorded (for the report).
    pub fn file_count(&self) -> usize {
        self.files.len()
    }
}

/// Differences between two snapshots. Processes, mounts, cgroups and runsc state list only
/// what appeared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostDiff {
    pub files: Vec<String>,
    pub processes: Vec<String>,
    pub mounts: Vec<String>,
    pub cgroups: Vec<String>,
    pub runsc_state: Vec<String>,
}

impl HostDiff {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.processes.is_empty()
            && self.mounts.is_empty()
            && self.cgroups.is_empty()
            && self.runsc_state.is_empty()
    }
}

impl fmt::Display for HostDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(f, "host unchanged");
        }
        let mut parts = Vec::new();
        for (what, list) in [
            ("file", &self.files),
            ("process", &self.processes),
            ("mount", &self.mounts),
            ("cgroup", &self.cgroups),
            ("runsc state", &self.runsc_state),
        ] {
            // The first few name the problem; the count says how big it is.
            for item in list.iter().take(5) {
                parts.push(format!("{what}: {item}"));
            }
            if list.len() > 5 {
                parts.push(format!("{what}: ... {} more", list.len() - 5));
            }
        }
        write!(f, "{}", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_tree() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gvh-host-{}", crate::ids::random_hex(4)));
        fs::create_dir_all(dir.join("sub")).unwrap();
        fs::write(dir.join("sub/file"), "a").unwrap();
        dir
    }

    fn snap(dir: &Path) -> HostSnapshot {
        HostSnapshot::take(&[dir.to_str().unwrap()], &Scope::default())
    }

    #[test]
    fn an_untouched_tree_gives_an_empty_diff() {
        let dir = temp_tree();
        let d = snap(&dir).diff(&snap(&dir));
        fs::remove_dir_all(&dir).unwrap();
        assert!(d.is_empty(), "{d}");
    }

    #[test]
    fn created_changed_and_removed_files_are_reported() {
        let dir = temp_tree();
        fs::write(dir.join("gone"), "x").unwrap();
        let before = snap(&dir);
        fs::write(dir.join("new"), "x").unwrap();
        fs::write(dir.join("sub/file"), "b").unwrap();
        fs::remove_file(dir.join("gone")).unwrap();
        let d = before.diff(&snap(&dir));
        fs::remove_dir_all(&dir).unwrap();
        let text = d.to_string();
        assert!(text.contains("created") && text.contains("/new"), "{text}");
        assert!(
            text.contains("changed") && text.contains("sub/file"),
            "{text}"
        );
        assert!(text.contains("removed") && text.contains("/gone"), "{text}");
    }

    #[test]
    fn a_mode_change_alone_is_reported() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_tree();
        let before = snap(&dir);
        fs::set_permissions(dir.join("sub/file"), fs::Permissions::from_mode(0o4755)).unwrap();
        let d = before.diff(&snap(&dir));
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(d.files.len(), 1, "{d}");
    }

    #[test]
    fn noisy_caches_are_not_recorded() {
        assert!(is_noisy(Path::new("/root/.cargo/registry/index/x")));
        assert!(!is_noisy(Path::new("/root/.cargo/bin/cargo")));
        assert!(!is_noisy(Path::new("/root/.bashrc")));
    }

    #[test]
    fn a_process_mentioning_a_scope_name_is_reported_when_it_appears() {
        let marker = format!("gvh-host-{}", crate::ids::random_hex(4));
        let scope = Scope {
            names: vec![marker.clone()],
            ..Scope::default()
        };
        let before = HostSnapshot::take(&[], &scope);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x", &marker])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // /proc/<pid>/cmdline reads empty for a moment after spawn.
        let seen = crate::poll::poll_until(
            "the child in the snapshot",
            std::time::Duration::from_secs(5),
            || {
                let d = before.diff(&HostSnapshot::take(&[], &scope));
                (!d.processes.is_empty()).then_some(d)
            },
        );
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(seen.unwrap().processes[0].contains(&marker));
    }
}
