//! Test support for tests with the real runsc (root required): a busybox bundle and a sandbox
//! guard that cleans up (runsc delete --force, leftover cgroup dirs) even when a test fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::reaper::{self, ExitFuture, Reaper};

use super::client::{read_pid_file, ProcessIo, Runsc};
use super::command::Subcommand;
use super::error::RunscError;
use super::flags::{GlobalFlags, Network};

pub const RUNSC: &str = "/usr/bin/runsc";
const BUSYBOX: &str = "/usr/bin/busybox";

/// Parent cgroup of every test sandbox, so leftovers are easy to spot.
pub const CGROUP_PARENT: &str = "/gvh-shim-test";

/// A bundle dir with a busybox rootfs and a config.json running `sh -c script`.
pub struct Bundle {
    pub dir: tempfile::TempDir,
    pub id: String,
    pub spec: Value,
}

impl Bundle {
    pub fn new(id_prefix: &str, script: &str) -> Bundle {
        // Unique per process and call: tests run in parallel and may be re-run.
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{id_prefix}-{}-{seq}", std::process::id());
        let dir = tempfile::tempdir().expect("bundle dir");
        let bin = dir.path().join("rootfs/bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::copy(BUSYBOX, bin.join("busybox")).expect("busybox-static is installed");
        for applet in ["sh", "sleep", "echo", "cat", "true", "seq"] {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
        }
        for d in ["proc", "tmp", "dev"] {
            std::fs::create_dir_all(dir.path().join("rootfs").join(d)).unwrap();
        }
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false,
                "user": {"uid": 0, "gid": 0},
                "args": ["sh", "-c", script],
                "env": ["PATH=/bin"],
                "cwd": "/",
                "capabilities": {"bounding": [], "effective": [], "permitted": [], "inheritable": []},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": true
            },
            "root": {"path": "rootfs", "readonly": true},
            "hostname": "t",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["size=16m"]}
            ],
            "linux": {
                "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
                "cgroupsPath": format!("{CGROUP_PARENT}/{id}"),
                "resources": {}
            }
        });
        let bundle = Bundle { dir, id, spec };
        bundle.write();
        bundle
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Sets (or adds) the field at JSON pointer `pointer` and rewrites config.json.
    pub fn set(&mut self, pointer: &str, value: Value) {
        let (parent, key) = pointer.rsplit_once('/').expect("pointer");
        let parent = self.spec.pointer_mut(parent).expect("parent field");
        parent
            .as_object_mut()
            .expect("parent is an object")
            .insert(key.to_string(), value);
        self.write();
    }

    fn write(&self) {
        std::fs::write(
            self.dir.path().join("config.json"),
            serde_json::to_vec_pretty(&self.spec).unwrap(),
        )
        .unwrap();
    }

    pub fn pid_file(&self) -> PathBuf {
        self.dir.path().join("init.pid")
    }
}

/// A runsc client on a private root, and cleanup of one sandbox on drop.
pub struct Harness {
    pub root: tempfile::TempDir,
    pub runsc: Runsc,
    pub reaper: Reaper,
    id: String,
}

impl Harness {
    pub async fn new(id: &str) -> Harness {
        Self::with_flags(id, |_| {}).await
    }

    pub async fn with_flags(id: &str, tweak: impl FnOnce(&mut GlobalFlags)) -> Harness {
        let reaper = reaper::shared_for_tests();
        let root = tempfile::tempdir().unwrap();
        let features = Runsc::detect(Path::new(RUNSC), &reaper, Duration::from_secs(30))
            .await
            .expect("runsc feature detection");
        let mut flags = GlobalFlags::new(root.path());
        flags.network = Some(Network::None);
        // A log, so that a failing call says runsc's reason (one create failed once in CI with
        // exit 128 and nothing kept).
        flags.log = Some(root.path().join("runsc.log"));
        flags.log_format = Some(super::flags::LogFormat::Json);
        tweak(&mut flags);
        let runsc = Runsc::new(RUNSC, &flags, features, reaper.clone()).expect("runsc client");
        Harness {
            root,
            runsc,
            reaper,
            id: id.to_string(),
        }
    }

    /// `runsc create` of `bundle`, with no console and no stdio.
    pub async fn create(&self, bundle: &Bundle) -> Result<(), RunscError> {
        self.runsc
            .create(
                &bundle.id,
                bundle.path(),
                &bundle.pid_file(),
                None,
                ProcessIo::default(),
            )
            .await
    }

    /// Creates the sandbox and watches its process: its pid and its exit.
    pub async fn create_watched(&self, bundle: &Bundle) -> (i32, ExitFuture) {
        self.create(bundle).await.unwrap();
        let pid = read_pid_file(&bundle.pid_file()).unwrap();
        (pid, self.reaper.watch(pid).unwrap())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        // Runs in a plain thread: Drop may run inside the test's runtime, where blocking on the
        // reaper's channel is not allowed.
        let args = self.runsc.args(&Subcommand::Delete {
            id: self.id.clone(),
            force: true,
        });
        let reaper = self.reaper.clone();
        let id = self.id.clone();
        let _ = std::thread::spawn(move || {
            let mut cmd = Command::new(RUNSC);
            cmd.args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            if let Ok(spawned) = reaper.spawn(cmd) {
                spawned.exit.wait_blocking();
            }
            // runsc removes its cgroups on delete; remove what a failed test may have left.
            // runsc also creates the dirs in the name=systemd hierarchy.
            let hierarchies = super::super::cgroup::paths::V1_CONTROLLERS
                .iter()
                .chain(&["systemd"]);
            for c in hierarchies {
                let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{c}{CGROUP_PARENT}/{id}"));
                // runsc creates the parent and never removes it; this fails while other tests
                // still have sandboxes under it, and the last one removes it.
                let _ = std::fs::remove_dir(format!("/sys/fs/cgroup/{c}{CGROUP_PARENT}"));
            }
        })
        .join();
    }
}

/// Polls `cond` until it holds or `deadline` passes.
pub async fn eventually(what: &str, deadline: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + deadline;
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pids of zombie children of this process.
pub fn zombie_children() -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut zombies = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the parenthesised comm: state ppid ...
        let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
            continue;
        };
        let mut fields = rest.split(' ');
        let (state, ppid) = (fields.next(), fields.next());
        if state == Some("Z") && ppid == Some(me.as_str()) {
            zombies.push(pid);
        }
    }
    zombies
}
