//! A private containerd in a temp dir: own root, state, sockets, CNI dir; CRI enabled with the
//! settings this machine needs (root lacks CAP_SYS_RESOURCE, no AppArmor). Either release the
//! project supports: Debian's 1.6 (config version 2) or the 2.x that `hack/deps.sh` builds
//! (config version 3, CRI split over three plugins, NRI off).
//!
//! containerd is (re)started by a shell script, the same way the installer restarts the node's
//! containerd: the installer runs the script as its `--restart-command`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use gvisor_hardened_installer::cri;

use super::deps;

/// Stops the running instance (if any), waits for it to exit, starts a fresh one.
const RESTART_SCRIPT: &str = r#"#!/bin/sh
# usage: restart.sh DIR CONTAINERD  (DIR holds config.toml, containerd.pid, containerd.log)
set -eu
dir=$1
containerd=$2
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
# containerd finds its runtime shims (containerd-shim-runc-v2) on PATH: its own release's,
# which sits beside it, comes first (1.6's shim cannot serve 2.x and the other way round).
PATH="$(dirname "$containerd"):$PATH" \
    setsid "$containerd" --config "$dir/config.toml" >>"$dir/containerd.log" 2>&1 </dev/null &
echo $! >"$dir/containerd.pid"
"#;

/// Which containerd runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Debian bookworm's containerd 1.6 (`containerd-1.6`): config version 2; an import
    /// replaces whole plugin sections.
    V1_6,
    /// containerd 2.x as `hack/deps.sh` builds it (`containerd`): config version 3 (2.2+ dumps
    /// 4); imports are merged deeply.
    V2,
}

impl Release {
    /// The binary, from `hack/deps.sh --print`.
    pub fn binary(self) -> PathBuf {
        deps::binary(match self {
            Release::V1_6 => "containerd-1.6",
            Release::V2 => "containerd",
        })
    }
}

pub struct PrivateContainerd {
    pub dir: tempfile::TempDir,
    pub release: Release,
    binary: PathBuf,
}

impl PrivateContainerd {
    /// Writes the restart script; the config is written by the test (see [`Self::base_config`]).
    pub fn new(release: Release) -> PrivateContainerd {
        let dir = tempfile::Builder::new()
            .prefix("gvh-installer-ctd.")
            .tempdir_in("/tmp")
            .unwrap();
        for d in ["cni", "cdi"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        fs::write(dir.path().join("restart.sh"), RESTART_SCRIPT).unwrap();
        PrivateContainerd {
            dir,
            release,
            binary: release.binary(),
        }
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

    /// The containerd binary this instance runs (the installer's `--containerd-bin`).
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// A directory for drop-ins (not created: containerd's glob matches nothing without it).
    pub fn conf_d(&self) -> PathBuf {
        self.path().join("conf.d")
    }

    /// [`Self::base_config`] with `imports = ["<glob>"]` after its `version` line.
    pub fn config_importing(&self, glob: &str) -> String {
        with_import(&self.base_config(), glob)
    }

    /// [`Self::config_importing`] the glob that picks up `conf.d/*.toml`.
    pub fn config_importing_conf_d(&self) -> String {
        self.config_importing(&format!("{}/*.toml", self.conf_d().display()))
    }

    /// The release's config like a kubeadm node's: CRI with runc as the default runtime.
    pub fn base_config(&self) -> String {
        match self.release {
            Release::V1_6 => self.base_config_v2(),
            Release::V2 => self.base_config_v3(),
        }
    }

    /// Version 2 (containerd 1.x): all of CRI in `io.containerd.grpc.v1.cri`.
    fn base_config_v2(&self) -> String {
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

    /// Version 3 (containerd 2.x): CRI split over `io.containerd.cri.v1.runtime` (runtimes,
    /// CNI, the kernel-facing settings), `io.containerd.cri.v1.images` and
    /// `io.containerd.grpc.v1.cri` (the streaming server). Every host path 2.x would use is
    /// moved into the directory or its plugin is off: NRI listens on the host-global
    /// /var/run/nri/nri.sock, CDI reads the host's /etc/cdi and /var/run/cdi, `opt` creates
    /// /opt/containerd.
    fn base_config_v3(&self) -> String {
        let d = self.path().display();
        format!(
            r#"# Private test instance of containerd 2.x.
version = 3
root = "{d}/root"
state = "{d}/state"
temp = "{d}/tmp"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    # Never pulled: no pod runs here.
    sandbox = "localhost/gvh-installer-test/pause:none"
  [plugins."io.containerd.cri.v1.runtime"]
    # Root on these machines lacks CAP_SYS_RESOURCE; there is no AppArmor.
    restrict_oom_score_adj = true
    disable_apparmor = true
    enable_selinux = false
    cdi_spec_dirs = ["{d}/cdi"]
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"#
        )
    }

    /// The version 3 config as containerd 2.2+ spells it, `version = 4`: the server's sockets
    /// are plugin settings there. Both must be set: 2.x's default ttrpc address is the host's
    /// /run/containerd/containerd.sock.ttrpc once the grpc one no longer derives it.
    pub fn base_config_v4(&self) -> String {
        assert_eq!(self.release, Release::V2, "version 4 is containerd 2.2+");
        let d = self.path().display();
        let v4 = self
            .base_config_v3()
            .replace("version = 3\n", "version = 4\n")
            .replace(
                &format!(
                    "[grpc]\n  address = \"{d}/containerd.sock\"\n\n\
                     [ttrpc]\n  address = \"{d}/containerd.sock.ttrpc\"\n\n[plugins]\n"
                ),
                &format!(
                    "[plugins]\n  [plugins.\"io.containerd.server.v1.grpc\"]\n    \
                     address = \"{d}/containerd.sock\"\n  \
                     [plugins.\"io.containerd.server.v1.ttrpc\"]\n    \
                     address = \"{d}/containerd.sock.ttrpc\"\n"
                ),
            );
        assert!(!v4.contains("[grpc]"), "{v4}");
        v4
    }

    pub fn restart_command(&self) -> Vec<String> {
        vec![
            "sh".into(),
            self.path().join("restart.sh").display().to_string(),
            self.path().display().to_string(),
            self.binary.display().to_string(),
        ]
    }

    pub fn pid(&self) -> Option<u32> {
        fs::read_to_string(self.path().join("containerd.pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// Refuses to start an instance whose merged config would listen anywhere but in its
    /// directory (a layout mistake would otherwise take over a host socket).
    fn check_private(&self) {
        let out = Command::new(&self.binary)
            .arg("--config")
            .arg(self.config_path())
            .args(["config", "dump"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "config dump: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dump = String::from_utf8_lossy(&out.stdout);
        let dir = self.path().display().to_string();
        for line in dump.lines() {
            let Some(value) = line.trim().strip_prefix("address = ") else {
                continue;
            };
            let value = value.trim_matches(['"', '\'']);
            assert!(
                value.is_empty() || value.starts_with(&dir),
                "the private containerd would listen on {value}:\n{dump}"
            );
        }
    }

    /// Starts (or restarts) containerd and waits until CRI answers with RuntimeReady.
    pub fn start(&self) {
        self.check_private();
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
        self.check_private();
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

/// `config` (one of the base configs) with `imports = ["<glob>"]` after its `version` line.
pub fn with_import(config: &str, glob: &str) -> String {
    let at = config
        .find("\nroot = ")
        .expect("base config has a root line")
        + 1;
    format!("{}imports = [\"{glob}\"]\n{}", &config[..at], &config[at..])
}

impl Drop for PrivateContainerd {
    fn drop(&mut self) {
        self.stop();
    }
}
