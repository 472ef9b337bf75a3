//! A private containerd in a temp dir: own root, state, sockets, CNI dir; CRI enabled with the
//! settings this machine needs (root lacks CAP_SYS_RESOURCE, no AppArmor).
//!
//! containerd is (re)started by a shell script, the same way the installer restarts the node's
//! containerd: the installer runs the script as its `--restart-command`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gvisor_hardened_installer::cri;

/// Stops the running instance (if any), waits for it to exit, starts a fresh one.
const RESTART_SCRIPT: &str = r#"#!/bin/sh
# usage: restart.sh DIR  (DIR holds config.toml, containerd.pid, containerd.log)
set -eu
dir=$1
gone() {
    # A zombie counts as gone: nobody may reap it soon.
    [ ! -d "/proc/$1" ] || grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}
if [ -f "$dir/containerd.pid" ]; then
    pid=$(cat "$dir/containerd.pid")
    kill -TERM "$pid" 2>/dev/null || true
    i=0
    until gone "$pid"; do
        i=$((i + 1))
        if [ "$i" -gt 300 ]; then kill -KILL "$pid" 2>/dev/null || true; fi
        if [ "$i" -gt 400 ]; then echo "containerd $pid did not stop" >&2; exit 1; fi
        sleep 0.05
    done
fi
rm -f "$dir/containerd.sock" "$dir/containerd.sock.ttrpc"
setsid containerd --config "$dir/config.toml" >>"$dir/containerd.log" 2>&1 </dev/null &
echo $! >"$dir/containerd.pid"
"#;

pub struct PrivateContainerd {
    pub dir: tempfile::TempDir,
}

impl PrivateContainerd {
    /// Writes the restart script; the config is written by the test (see [`Self::base_config`]).
    pub fn new() -> PrivateContainerd {
        let dir = tempfile::Builder::new()
            .prefix("gvh-installer-ctd.")
            .tempdir_in("/tmp")
            .unwrap();
        fs::create_dir_all(dir.path().join("cni")).unwrap();
        fs::write(dir.path().join("restart.sh"), RESTART_SCRIPT).unwrap();
        PrivateContainerd { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.path().join("config.toml")
    }

    pub fn socket(&self) -> PathBuf {
        self.path().join("containerd.sock")
    }

    /// A version 2 config like a kubeadm node's: CRI with runc as the default runtime.
    pub fn base_config(&self) -> String {
        let d = self.path().display();
        format!(
            r#"# Private test instance of containerd 1.6.
version = 2
root = "{d}/root"
state = "{d}/state"

[grpc]
  address = "{d}/containerd.sock"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    # Root on these machines lacks CAP_SYS_RESOURCE; there is no AppArmor.
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{d}/cni"
"#
        )
    }

    pub fn restart_command(&self) -> Vec<String> {
        vec![
            "sh".into(),
            self.path().join("restart.sh").display().to_string(),
            self.path().display().to_string(),
        ]
    }

    pub fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.path().join("containerd.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Starts (or restarts) containerd and waits until CRI answers with RuntimeReady.
    pub fn start(&self) {
        let argv = self.restart_command();
        let st = Command::new(&argv[0]).args(&argv[1..]).status().unwrap();
        assert!(st.success(), "restart script failed");
        cri::wait_for(&self.socket(), Duration::from_secs(30), |s| {
            if s.runtime_ready {
                Ok(())
            } else {
                Err("RuntimeReady false".into())
            }
        })
        .unwrap_or_else(|e| panic!("containerd did not come up: {e}\n{}", self.log()));
    }

    /// Runs the restart script only: for tests that expect CRI to be broken afterwards.
    pub fn start_without_waiting(&self) {
        let argv = self.restart_command();
        let st = Command::new(&argv[0]).args(&argv[1..]).status().unwrap();
        assert!(st.success(), "restart script failed");
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.path().join("containerd.log")).unwrap_or_default()
    }

    fn stop(&self) {
        let Some(pid) = self.pid() else { return };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Path::new(&format!("/proc/{pid}")).exists() && Instant::now() < deadline {
            let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if stat.contains(") Z ") {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if Path::new(&format!("/proc/{pid}/stat")).exists() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .status();
        }
    }
}

impl Drop for PrivateContainerd {
    fn drop(&mut self) {
        self.stop();
    }
}
