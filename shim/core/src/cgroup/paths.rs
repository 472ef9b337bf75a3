//! Where the sandbox's cgroups are.
//!
//! The reliable source is `/proc/<sandbox pid>/cgroup`, read after `runsc create` (the sandbox is
//! in its cgroups by then). [`SandboxCgroup::from_spec`] reproduces runsc's own placement rules
//! (NOTES.md) for when no pid is left, e.g. the `delete` action after a shim died.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::files;
use super::CgroupError;

/// The v1 controllers runsc creates a cgroup in.
pub const V1_CONTROLLERS: &[&str] = &[
    "memory", "pids", "cpu", "cpuacct", "cpuset", "blkio", "devices", "freezer",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SandboxCgroup {
    /// cgroup v1 (also on hybrid hosts, where runsc uses only v1): one dir per controller.
    V1 { dirs: BTreeMap<String, PathBuf> },
    /// Unified hierarchy: one dir.
    V2 { dir: PathBuf },
}

/// A cgroup filesystem mount from mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The cgroup path that the mount point shows (not `/` inside a cgroup namespace).
    pub root: String,
    pub mount_point: PathBuf,
    /// v1 controllers (`memory`, `cpu`...); empty for cgroup2.
    pub controllers: Vec<String>,
    pub v2: bool,
}

/// Cgroup mounts from `/proc/self/mountinfo` text.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        if left.len() < 5 || right.len() < 3 {
            continue;
        }
        let (fstype, superopts) = (right[0], right[2]);
        let v2 = fstype == "cgroup2";
        if fstype != "cgroup" && !v2 {
            continue;
        }
        let controllers = if v2 {
            Vec::new()
        } else {
            superopts
                .split(',')
                .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                .map(str::to_string)
                .collect()
        };
        mounts.push(Mount {
            root: unescape(left[3]),
            mount_point: PathBuf::from(unescape(left[4])),
            controllers,
            v2,
        });
    }
    mounts
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            match u8::from_str_radix(&code, 8) {
                Ok(b) => out.push(b as char),
                Err(_) => {
                    out.push('\\');
                    out.push_str(&code);
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `/proc/<pid>/cgroup` lines: (controllers, path). The v2 line has no controllers.
fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let controllers = controllers
                .split(',')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect();
            Some((controllers, path.to_string()))
        })
        .collect()
}

/// The directory of cgroup `path` under `mount`, which shows the cgroup `mount.root`.
fn dir_under(mount: &Mount, path: &str) -> PathBuf {
    let rel = if mount.root == "/" {
        path
    } else {
        path.strip_prefix(mount.root.as_str()).unwrap_or(path)
    };
    mount.mount_point.join(rel.trim_start_matches('/'))
}

impl SandboxCgroup {
    /// The cgroups `pid` is in, from this host's mounts.
    pub fn of_pid(pid: i32) -> Result<SandboxCgroup, CgroupError> {
        let mountinfo = files::read(Path::new("/proc/self/mountinfo"))?;
        let proc_cgroup = files::read(&PathBuf::from(format!("/proc/{pid}/cgroup")))?;
        Self::from_parts(&parse_mountinfo(&mountinfo), &proc_cgroup).map_err(|reason| {
            CgroupError::NotFound {
                pid,
                reason: reason.to_string(),
            }
        })
    }

    /// Pure part of [`SandboxCgroup::of_pid`].
    pub fn from_parts(mounts: &[Mount], proc_cgroup: &str) -> Result<SandboxCgroup, &'static str> {
        let entries = parse_proc_cgroup(proc_cgroup);
        let mut dirs = BTreeMap::new();
        for (controllers, path) in &entries {
            for controller in controllers {
                // The named systemd hierarchy counts only where runsc placed the sandbox in it
                // (never the hierarchy's root, which is not the sandbox's to remove).
                let systemd = controller == "name=systemd" && path != "/";
                if !V1_CONTROLLERS.contains(&controller.as_str()) && !systemd {
                    continue;
                }
                if let Some(mount) = mounts.iter().find(|m| m.controllers.contains(controller)) {
                    dirs.insert(controller.clone(), dir_under(mount, path));
                }
            }
        }
        // Hybrid hosts list v1 controllers *and* an (empty) v2 line; runsc uses v1 there.
        if dirs.contains_key("memory") || dirs.contains_key("pids") {
            return Ok(SandboxCgroup::V1 { dirs });
        }
        let path = entries
            .iter()
            .find(|(controllers, _)| controllers.is_empty())
            .map(|(_, p)| p)
            .ok_or("no v1 memory/pids controller and no cgroup v2 entry")?;
        let mount = mounts
            .iter()
            .find(|m| m.v2)
            .ok_or("no cgroup2 mount on this host")?;
        Ok(SandboxCgroup::V2 {
            dir: dir_under(mount, path),
        })
    }

    /// Where runsc puts the sandbox for `linux.cgroupsPath` (runsc 20221219 without
    /// `--systemd-cgroup`): an absolute path under each controller's mount; an empty one means
    /// `/<id>`; a relative one — including the systemd form `slice:prefix:name`, taken as a
    /// literal name — is joined to the cgroup runsc itself runs in (`caller_proc_cgroup`, the
    /// shim's `/proc/self/cgroup`), per controller.
    pub fn from_spec(
        mounts: &[Mount],
        cgroups_path: &str,
        id: &str,
        caller_proc_cgroup: &str,
    ) -> Result<SandboxCgroup, &'static str> {
        let owned;
        let path = if cgroups_path.is_empty() {
            owned = format!("/{id}");
            owned.as_str()
        } else {
            cgroups_path
        };
        let caller = parse_proc_cgroup(caller_proc_cgroup);
        let resolve = |caller_path: Option<&String>| -> String {
            if path.starts_with('/') {
                path.to_string()
            } else {
                let base = caller_path.map(String::as_str).unwrap_or("/");
                format!("{}/{}", base.trim_end_matches('/'), path)
            }
        };
        let mut dirs = BTreeMap::new();
        // runsc also creates the path in the named systemd hierarchy when it is mounted; it is
        // part of what a sandbox must not leave behind.
        for controller in V1_CONTROLLERS.iter().chain(&["name=systemd"]) {
            let Some(mount) = mounts
                .iter()
                .find(|m| m.controllers.iter().any(|c| c == controller))
            else {
                continue;
            };
            let caller_path = caller
                .iter()
                .find(|(cs, _)| cs.iter().any(|c| c == controller))
                .map(|(_, p)| p);
            dirs.insert(
                controller.to_string(),
                dir_under(mount, &resolve(caller_path)),
            );
        }
        if dirs.contains_key("memory") || dirs.contains_key("pids") {
            return Ok(SandboxCgroup::V1 { dirs });
        }
        let mount = mounts.iter().find(|m| m.v2).ok_or("no cgroup mounts")?;
        let caller_path = caller.iter().find(|(cs, _)| cs.is_empty()).map(|(_, p)| p);
        Ok(SandboxCgroup::V2 {
            dir: dir_under(mount, &resolve(caller_path)),
        })
    }

    /// [`SandboxCgroup::from_spec`] on this host, for this process as runsc's caller: where a
    /// sandbox created from a spec with `cgroups_path` lands (before create, or after the sandbox
    /// is gone). Prefer [`SandboxCgroup::of_pid`] while the sandbox runs.
    pub fn for_spec(cgroups_path: &str, id: &str) -> Result<SandboxCgroup, CgroupError> {
        let mountinfo = files::read(Path::new("/proc/self/mountinfo"))?;
        let own = files::read(Path::new("/proc/self/cgroup"))?;
        Self::from_spec(&parse_mountinfo(&mountinfo), cgroups_path, id, &own).map_err(|reason| {
            CgroupError::NotFound {
                pid: std::process::id() as i32,
                reason: reason.to_string(),
            }
        })
    }

    /// The directory of `controller` (v1), or the unified directory (v2).
    pub fn dir(&self, controller: &'static str) -> Result<&Path, CgroupError> {
        match self {
            SandboxCgroup::V1 { dirs } => {
                dirs.get(controller)
                    .map(PathBuf::as_path)
                    .ok_or(CgroupError::NoController {
                        version: "v1",
                        controller,
                    })
            }
            SandboxCgroup::V2 { dir } => Ok(dir),
        }
    }

    pub fn is_v2(&self) -> bool {
        matches!(self, SandboxCgroup::V2 { .. })
    }

    /// Every directory of this sandbox's cgroups.
    pub fn dirs(&self) -> Vec<&Path> {
        match self {
            SandboxCgroup::V1 { dirs } => dirs.values().map(PathBuf::as_path).collect(),
            SandboxCgroup::V2 { dir } => vec![dir],
        }
    }

    /// The host processes in the sandbox: its pids cgroup's (its memory cgroup's where pids is
    /// not mounted), sorted. Inside gVisor the workload's processes have no host pids of their
    /// own; these (sentry, gofer, and with ptrace a stub per guest thread) are what a host tool
    /// such as ps(1) can show for the container.
    pub fn processes(&self) -> Result<Vec<u32>, CgroupError> {
        let dir = self.dir("pids").or_else(|_| self.dir("memory"))?;
        let text = files::read(&dir.join("cgroup.procs"))?;
        let mut pids = parse_procs(&text);
        pids.sort_unstable();
        Ok(pids)
    }

    /// Directories still present (after `runsc delete` there should be none).
    pub fn remaining(&self) -> Vec<&Path> {
        self.dirs().into_iter().filter(|d| d.is_dir()).collect()
    }

    /// Removes the directories still present. The kernel refuses a cgroup that still holds a
    /// process; those are named in the error.
    pub fn remove_empty(&self) -> Result<(), CgroupError> {
        let mut busy = Vec::new();
        for dir in self.remaining() {
            if let Err(e) = std::fs::remove_dir(dir) {
                busy.push(format!("{}: {e}", dir.display()));
            }
        }
        if busy.is_empty() {
            Ok(())
        } else {
            Err(CgroupError::LeftBehind(busy))
        }
    }
}

/// `cgroup.procs`: one pid per line; anything else is skipped.
fn parse_procs(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_procs_is_read_one_pid_per_line() {
        assert_eq!(parse_procs("12\n7\n\n 9 \nx\n"), vec![12, 7, 9]);
        assert!(parse_procs("").is_empty());
    }

    // Lines from this machine's /proc/self/mountinfo (hybrid: v1 + empty unified).
    const HYBRID: &str = "\
30 23 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
33 30 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:12 - cgroup cgroup rw,cpu
34 30 0:30 / /sys/fs/cgroup/cpuacct rw,relatime shared:13 - cgroup cgroup rw,cpuacct
36 30 0:32 / /sys/fs/cgroup/memory rw,relatime shared:15 - cgroup cgroup rw,memory
39 30 0:35 / /sys/fs/cgroup/pids rw,relatime shared:18 - cgroup cgroup rw,pids
40 30 0:36 / /sys/fs/cgroup/systemd rw,relatime shared:19 - cgroup cgroup rw,name=systemd
";
    const PURE_V2: &str =
        "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    const COMBINED: &str = "33 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n36 30 0:32 /kubepods /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n";

    #[test]
    fn mountinfo_finds_v1_controllers_and_the_unified_mount() {
        let m = parse_mountinfo(HYBRID);
        assert_eq!(m.len(), 6);
        assert!(m[0].v2);
        assert_eq!(m[0].mount_point, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(m[3].controllers, ["memory"]);
        assert_eq!(m[5].controllers, ["name=systemd"]);
    }

    #[test]
    fn hybrid_sandbox_is_v1_with_a_dir_per_controller() {
        let cg = SandboxCgroup::from_parts(
            &parse_mountinfo(HYBRID),
            "8:pids:/default/c1\n4:memory:/default/c1\n2:cpuacct:/default/c1\n1:cpu:/default/c1\n9:name=systemd:/\n0::/\n",
        )
        .unwrap();
        assert_eq!(
            cg.dir("memory").unwrap(),
            Path::new("/sys/fs/cgroup/memory/default/c1")
        );
        assert_eq!(
            cg.dir("cpuacct").unwrap(),
            Path::new("/sys/fs/cgroup/cpuacct/default/c1")
        );
        assert_eq!(cg.dirs().len(), 4);
        assert!(!cg.is_v2());
    }

    #[test]
    fn pure_v2_sandbox_uses_the_unified_line() {
        let cg = SandboxCgroup::from_parts(&parse_mountinfo(PURE_V2), "0::/default/c1\n").unwrap();
        assert_eq!(
            cg,
            SandboxCgroup::V2 {
                dir: "/sys/fs/cgroup/default/c1".into()
            }
        );
        assert_eq!(
            cg.dir("memory").unwrap(),
            Path::new("/sys/fs/cgroup/default/c1")
        );
    }

    #[test]
    fn combined_mounts_and_non_root_mounts_resolve() {
        let cg = SandboxCgroup::from_parts(
            &parse_mountinfo(COMBINED),
            "3:cpu,cpuacct:/default/c\n4:memory:/kubepods/pod1/c\n",
        )
        .unwrap();
        assert_eq!(
            cg.dir("cpu").unwrap(),
            Path::new("/sys/fs/cgroup/cpu,cpuacct/default/c")
        );
        // The memory mount shows /kubepods as its root.
        assert_eq!(
            cg.dir("memory").unwrap(),
            Path::new("/sys/fs/cgroup/memory/pod1/c")
        );
    }

    #[test]
    fn spec_paths_follow_runscs_rules() {
        let mounts = parse_mountinfo(HYBRID);
        // The caller (shim) is in /process_api/h for memory, / elsewhere, as measured.
        let caller = "8:pids:/\n4:memory:/process_api/h\n2:cpuacct:/\n1:cpu:/\n0::/\n";
        let cases = [
            (
                "ctr's absolute path",
                "/default/c1",
                "/default/c1",
                "/default/c1",
            ),
            ("empty means /<id>", "", "/c1", "/c1"),
            (
                "relative joins the caller's cgroup",
                "rel/c1",
                "/rel/c1",
                "/process_api/h/rel/c1",
            ),
            (
                "systemd form is a literal relative name",
                "system.slice:cri:c1",
                "/system.slice:cri:c1",
                "/process_api/h/system.slice:cri:c1",
            ),
        ];
        for (name, spec, pids, memory) in cases {
            let cg = SandboxCgroup::from_spec(&mounts, spec, "c1", caller).unwrap();
            assert_eq!(
                cg.dir("pids").unwrap(),
                Path::new("/sys/fs/cgroup/pids").join(&pids[1..]),
                "{name}"
            );
            assert_eq!(
                cg.dir("memory").unwrap(),
                Path::new("/sys/fs/cgroup/memory").join(&memory[1..]),
                "{name}"
            );
        }
    }

    #[test]
    fn spec_path_on_pure_v2() {
        let cg = SandboxCgroup::from_spec(&parse_mountinfo(PURE_V2), "/k8s/c", "c", "0::/shim\n")
            .unwrap();
        assert_eq!(
            cg,
            SandboxCgroup::V2 {
                dir: "/sys/fs/cgroup/k8s/c".into()
            }
        );
    }

    #[test]
    fn no_cgroup_information_is_an_error() {
        assert!(SandboxCgroup::from_parts(&parse_mountinfo(HYBRID), "").is_err());
        assert!(SandboxCgroup::from_parts(&[], "0::/x\n").is_err());
    }

    #[test]
    fn mountinfo_octal_escapes_are_decoded() {
        assert_eq!(unescape(r"/mnt/with\040space"), "/mnt/with space");
    }
}
