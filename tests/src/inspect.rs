//! Read-only views of the host for leak checks: processes, mounts, cgroups, runsc state.
//!
//! Everything here reads /proc and /sys directly, so it sees what the kernel sees regardless
//! of what containerd or the shim believe.

use std::fs;
use std::path::{Path, PathBuf};

/// A live process (zombies and kernel threads have no command line and are not listed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: i32,
    /// argv joined with spaces.
    pub cmdline: String,
}

/// Every live process other than this one, with its command line.
pub fn processes() -> Vec<ProcInfo> {
    let me = std::process::id() as i32;
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut procs: Vec<ProcInfo> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            // A process may exit between readdir and read: skip it.
            let raw = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            if raw.is_empty() {
                return None;
            }
            let cmdline = raw
                .split(|&b| b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ");
            Some(ProcInfo { pid, cmdline })
        })
        .collect();
    procs.sort_by_key(|p| p.pid);
    procs
}

/// Live processes whose command line contains `needle` (a container id, a socket path, the
/// private containerd's directory).
pub fn processes_mentioning(needle: &str) -> Vec<ProcInfo> {
    processes()
        .into_iter()
        .filter(|p| p.cmdline.contains(needle))
        .collect()
}

/// What `/proc/PID/stat` says of a process: its command name, state and parent.
struct Stat {
    comm: String,
    state: char,
    ppid: i32,
}

/// `pid`'s stat line, read now ("PID (COMM) STATE PPID ...": the name may itself hold spaces
/// and parentheses, so it ends at the last ") ").
fn stat_of(pid: i32) -> Option<Stat> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    Some(Stat {
        comm: head.split_once(" (")?.1.to_string(),
        state: fields.next()?.chars().next()?,
        ppid: fields.next()?.parse().ok()?,
    })
}

impl Stat {
    fn is_alive(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// Whether `pid` still exists and is not a zombie.
pub fn is_alive(pid: i32) -> bool {
    stat_of(pid).is_some_and(|s| s.is_alive())
}

/// The parent pid of `pid`.
pub fn parent_of(pid: i32) -> Option<i32> {
    stat_of(pid).map(|s| s.ppid)
}

/// The live children of `parent` whose command name (`/proc/PID/comm`) is `comm`.
pub fn children_named(parent: i32, comm: &str) -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| {
            stat_of(pid).is_some_and(|s| s.comm == comm && s.ppid == parent && s.is_alive())
        })
        .collect();
    pids.sort();
    pids
}

/// The value of `key` in `/proc/PID/status` (e.g. `CapEff`, `Seccomp`), trimmed.
pub fn status_field(pid: i32, key: &str) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .strip_prefix(':')
                .map(|v| v.trim().to_string())
        })
}

/// `pid`'s cgroup in the v1 hierarchy of `controller` (its line of `/proc/PID/cgroup`).
pub fn cgroup_of(pid: i32, controller: &str) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == controller)
                .then(|| path.to_string())
        })
}

/// Number of open file descriptors of `pid` (for descriptor-leak checks), if readable.
pub fn fd_count(pid: i32) -> Option<usize> {
    fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()
        .map(|d| d.count())
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountInfo {
    pub mount_point: PathBuf,
    pub fstype: String,
    pub source: String,
}

/// Undoes mountinfo's octal escapes (`\040` for space and friends).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        // mountinfo escapes bytes as three octal digits, so the first one is at most 3.
        let octal = b.get(i + 1..i + 4).filter(|d| {
            (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|c| (b'0'..=b'7').contains(c))
        });
        match octal {
            Some(d) if b[i] == b'\\' => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_mountinfo(text: &str) -> Vec<MountInfo> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mount_point = left.split(' ').nth(4)?;
            let mut r = right.split(' ');
            let fstype = r.next()?;
            let source = r.next().unwrap_or("");
            Some(MountInfo {
                mount_point: PathBuf::from(unescape(mount_point)),
                fstype: fstype.to_string(),
                source: unescape(source),
            })
        })
        .collect()
}

/// The mounts of the calling thread's mount namespace (the host's, for the test process;
/// `/proc/self` would be the main thread's even on a thread that entered a namespace of its
/// own, as `nerdctl::with_node_policy` does).
pub fn mounts() -> Vec<MountInfo> {
    fs::read_to_string("/proc/thread-self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

/// Mounts at or below `dir`.
pub fn mounts_under(dir: &Path) -> Vec<MountInfo> {
    mounts()
        .into_iter()
        .filter(|m| m.mount_point.starts_with(dir) && !is_runsc_null_netns(m))
        .collect()
}

/// The name of the mount a current runsc keeps in each of its roots (`--shared-root`, by
/// default `--root`): one empty network namespace for all gofers started from that root,
/// bind-mounted there for as long as the root exists. runsc 20221219 has none.
pub const RUNSC_NULL_NETNS: &str = "null-netns";

/// Whether `m` is a runsc root's shared null network namespace: runsc's own state for the
/// whole root, not something a container left.
pub fn is_runsc_null_netns(m: &MountInfo) -> bool {
    m.fstype == "nsfs"
        && m.mount_point
            .file_name()
            .is_some_and(|n| n == RUNSC_NULL_NETNS)
}

/// Unmounts the null network namespaces of runsc roots under `dir` (stacked ones too, as
/// runsc's own clean-up does), so the directory can be removed.
pub fn release_runsc_null_netns(dir: &Path) {
    use std::os::unix::ffi::OsStrExt;
    for m in mounts()
        .into_iter()
        .filter(|m| m.mount_point.starts_with(dir) && is_runsc_null_netns(m))
    {
        let Ok(c) = std::ffi::CString::new(m.mount_point.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: `c` is a NUL-terminated path; umount2 only reads it.
        while unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } == 0 {}
    }
}

/// Mounts whose mount point or source contains `needle` (e.g. a container id: the rootfs
/// mount is at `.../<namespace>/<id>/rootfs`).
pub fn mounts_mentioning(needle: &str) -> Vec<MountInfo> {
    mounts()
        .into_iter()
        .filter(|m| m.mount_point.to_string_lossy().contains(needle) || m.source.contains(needle))
        .collect()
}

/// Mount points of every cgroup hierarchy: each v1 controller and the unified (v2) one.
pub fn cgroup_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = mounts()
        .into_iter()
        .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
        .map(|m| m.mount_point)
        .collect();
    roots.sort();
    roots.dedup();
    roots
}

/// Depth limit of the cgroup search: runtimes nest containers at most a few levels deep
/// (`/<namespace>/<id>`, `/kubepods/burstable/pod<uid>/<id>`).
const CGROUP_SEARCH_DEPTH: usize = 6;

fn find_dirs_named(dir: &Path, name: &str, depth: usize, found: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = e.path();
        if e.file_name().to_str() == Some(name) {
            found.push(path.clone());
        }
        if depth > 1 {
            find_dirs_named(&path, name, depth - 1, found);
        }
    }
}

/// Cgroup directories named `name` (a container id) in any hierarchy.
/// The content of `file` in the `controller` hierarchy's cgroup named after `name` (cgroup v1),
/// trimmed.
pub fn cgroup_file(name: &str, controller: &str, file: &str) -> String {
    let dir = cgroups_named(name)
        .into_iter()
        .find(|p| p.to_string_lossy().contains(&format!("/{controller}/")))
        .unwrap_or_else(|| panic!("no {controller} cgroup named after {name}"));
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}: {e}", dir.join(file).display()))
        .trim()
        .to_string()
}

pub fn cgroups_named(name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for root in cgroup_roots() {
        find_dirs_named(&root, name, CGROUP_SEARCH_DEPTH, &mut found);
    }
    found.sort();
    found
}

/// `relative` (e.g. `<namespace>` or `<namespace>/<id>`) under every cgroup hierarchy where
/// it exists.
pub fn cgroup_dirs(relative: &str) -> Vec<PathBuf> {
    let relative = relative.trim_start_matches('/');
    cgroup_roots()
        .into_iter()
        .map(|r| r.join(relative))
        .filter(|p| p.is_dir())
        .collect()
}

/// Files and directories under the runsc (or runc) state root `root` whose name contains
/// `id`, or all of them when `id` is `None`. runsc keeps `<id>_sandbox:<id>.state` and
/// `.lock` files there; runc a directory per container.
pub fn runsc_state_files(root: &Path, id: Option<&str>) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name == RUNSC_NULL_NETNS {
                continue;
            }
            if id.is_none_or(|id| name.contains(id)) {
                found.push(path.clone());
            }
            if depth < 2 && e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((path, depth + 1));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_mount_point_type_and_source_unescaped() {
        let text = "36 35 98:0 /mnt1 /mnt/with\\040space rw,noatime master:1 - ext3 /dev/root rw\n\
                    40 1 0:33 / /run/x shared:2 - overlay overlay rw,lowerdir=/a\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].mount_point, PathBuf::from("/mnt/with space"));
        assert_eq!(m[0].fstype, "ext3");
        assert_eq!(m[0].source, "/dev/root");
        assert_eq!(m[1].fstype, "overlay");
    }

    #[test]
    fn unescape_leaves_plain_text_and_trailing_backslashes_alone() {
        assert_eq!(unescape("a\\134b"), "a\\b");
        assert_eq!(unescape("plain"), "plain");
        assert_eq!(unescape("end\\"), "end\\");
        assert_eq!(unescape("short\\04"), "short\\04");
    }

    #[test]
    fn this_process_sees_a_child_by_its_command_line() {
        let marker = format!("gvh-inspect-{}", crate::ids::random_hex(4));
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read x", &marker])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The kernel closes the spawn's exec pipe before it sets up the new argv, so the
        // command line can read empty for a moment after spawn() returns.
        let found = crate::poll::poll_until(
            "the child's cmdline",
            std::time::Duration::from_secs(5),
            || {
                let found = processes_mentioning(&marker);
                (!found.is_empty()).then_some(found)
            },
        );
        let pid = child.id() as i32;
        assert!(is_alive(pid));
        drop(child.stdin.take());
        child.wait().unwrap();
        let found = found.unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, pid);
        assert!(!is_alive(pid));
    }

    #[test]
    fn cgroup_roots_include_the_hierarchies_of_this_machine() {
        let roots = cgroup_roots();
        assert!(!roots.is_empty(), "no cgroup hierarchy mounted?");
        // Our own cgroup exists in every hierarchy, so a search for a random name finds nothing.
        assert!(cgroups_named(&crate::ids::unique_id("none")).is_empty());
    }

    #[test]
    fn runsc_state_files_filters_by_id() {
        let dir = std::env::temp_dir().join(format!("gvh-inspect-{}", crate::ids::random_hex(4)));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("c1_sandbox:c1.state"), "").unwrap();
        fs::write(dir.join("c2_sandbox:c2.state"), "").unwrap();
        let c1 = runsc_state_files(&dir, Some("c1"));
        let all = runsc_state_files(&dir, None);
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(c1, vec![dir.join("c1_sandbox:c1.state")]);
        assert_eq!(all.len(), 2);
    }
}
