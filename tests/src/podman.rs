//! Private Podman 4.3 storage for one test: its own root, runroot, tmpdir, volume path and
//! network config directory, the cgroupfs manager and file events (no systemd here), and a
//! private `CONTAINERS_CONF` registering `gvisor-hardened` (runsc-hardened, listed in
//! `runtime_supports_json` so Podman shows its JSON error lines) and `runsc` (the baseline).
//!
//! The policy reaches runsc-hardened the way an operator passes runtime flags to Podman,
//! `--runtime-flag policy=FILE` on the commands that create containers. conmon's cleanup
//! (`podman container cleanup` -> `delete --force`) runs without it, as do `podman exec`,
//! `stop` and `update` here: runsc-hardened must find everything it needs in its own state.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::engine::{
    self, remove_everything, EngineCommand, EngineDir, Forced, BASELINE, DEFAULT_STATE_ROOT,
    HARDENED,
};
use crate::error::{HarnessError, Result};
use crate::image::TEST_IMAGE_REF;

pub const PODMAN: &str = "/usr/bin/podman";

#[derive(Debug)]
pub struct Podman {
    dir: EngineDir,
    torn_down: bool,
}

impl Podman {
    pub fn new() -> Result<Podman> {
        let runtime = engine::runsc_hardened_binary()?;
        let dir = EngineDir::create("pm")?;
        let conf = format!(
            "[engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
             runtime_supports_json = [\"{HARDENED}\", \"{BASELINE}\"]\n\
             [engine.runtimes]\n{HARDENED} = [\"{}\"]\n{BASELINE} = [\"{}\"]\n",
            runtime.display(),
            crate::stack::bin("runsc")?.display()
        );
        let path = dir.path().join("containers.conf");
        fs::write(&path, conf).map_err(|e| HarnessError::io("writing", &path, e))?;
        Ok(Podman {
            dir,
            torn_down: false,
        })
    }

    pub fn dir(&self) -> &EngineDir {
        &self.dir
    }

    /// `podman run --rm --cidfile ... <runsc-hardened with policy> ARGS IMAGE sh -c SCRIPT`: the
    /// output and the container's id.
    pub fn run_rm(
        &self,
        policy: &Path,
        args: &[&str],
        script: &str,
    ) -> Result<(crate::CommandOutput, String)> {
        let runtime = self.hardened_args(policy);
        engine::run_rm_script(self.podman(), &self.dir, &runtime, args, script)
    }

    /// `podman` with this instance's storage and configuration.
    pub fn podman(&self) -> EngineCommand {
        let d = self.dir.path();
        let mut cmd = Command::new(PODMAN);
        // runsc-hardened (through conmon) finds runsc on its PATH: the stack's (crate::stack).
        if let Ok(path) = crate::stack::path_env() {
            cmd.env("PATH", path);
        }
        cmd.env("CONTAINERS_CONF", d.join("containers.conf"))
            .arg("--root")
            .arg(d.join("root"))
            .arg("--runroot")
            .arg(d.join("runroot"))
            .arg("--tmpdir")
            .arg(d.join("tmp"))
            .arg("--volumepath")
            .arg(d.join("vol"))
            .arg("--network-config-dir")
            .arg(d.join("net"))
            .args([
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
                "--storage-driver",
                "overlay",
            ]);
        crate::engine::engine_command(cmd)
    }

    /// `podman run` (or `create`, `start`...) arguments that pick runsc-hardened with `policy`:
    /// `--runtime gvisor-hardened --runtime-flag policy=FILE` and the cgroup parent of this
    /// instance (add `--network none` for loopback only).
    pub fn hardened_args(&self, policy: &Path) -> Vec<String> {
        vec![
            "--runtime".into(),
            HARDENED.into(),
            "--runtime-flag".into(),
            format!("policy={}", policy.display()),
            "--cgroup-parent".into(),
            format!("/{}", self.cgroup_parent()),
        ]
    }

    /// The same for plain runsc (the baseline), with the global flags runsc-hardened passes
    /// under the default policy.
    pub fn baseline_args(&self) -> Vec<String> {
        vec![
            "--runtime".into(),
            BASELINE.into(),
            "--runtime-flag".into(),
            "network=none".into(),
            "--runtime-flag".into(),
            "oci-seccomp".into(),
            "--cgroup-parent".into(),
            format!("/{}", self.cgroup_parent()),
        ]
    }

    pub fn import_test_image(&self) -> Result<()> {
        let tar = crate::image::rootfs_tar()?;
        self.podman()
            .arg("import")
            .arg(&tar)
            .arg(TEST_IMAGE_REF)
            .checked()
            .map(drop)
    }

    pub fn cgroup_parent(&self) -> String {
        self.dir
            .path()
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    }

    /// Podman gives no `--root`: runsc-hardened keeps its state in its default root.
    pub fn state_root(&self) -> PathBuf {
        PathBuf::from(DEFAULT_STATE_ROOT)
    }

    #[track_caller]
    pub fn assert_container_gone(&self, id: &str) {
        engine::assert_container_gone(id, &self.dir.runsc_root(), &self.state_root());
    }

    pub fn shutdown(mut self) -> Forced {
        self.teardown()
    }

    fn teardown(&mut self) -> Forced {
        self.torn_down = true;
        let mut forced = Forced::default();
        if let Ok(out) = self
            .podman()
            .args(["ps", "-aq"])
            .timeout(Duration::from_secs(30))
            .output()
        {
            forced.containers = out.stdout.split_whitespace().map(str::to_string).collect();
            if !forced.containers.is_empty() {
                let _ = self
                    .podman()
                    .args(["rm", "-f", "-a", "-t", "0"])
                    .timeout(Duration::from_secs(60))
                    .output();
            }
        }
        // Podman keeps the image layers mounted under its root until told otherwise.
        let _ = self
            .podman()
            .args(["unmount", "-a"])
            .timeout(Duration::from_secs(30))
            .output();
        let parent = self.cgroup_parent();
        // conmon moves itself into `<parent>/conmon` and nothing removes it: Podman's, not ours.
        remove_everything(self.dir.path(), Some(&parent), &["conmon"], &mut forced);
        forced
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if !self.torn_down {
            let forced = self.teardown();
            if !forced.is_clean() {
                eprintln!("gvh harness: podman dropped: {forced}");
            }
        }
    }
}

#[track_caller]
pub fn assert_clean_podman_shutdown(p: Podman) {
    let dir = p.dir().path().to_path_buf();
    crate::engine::assert_shut_down_cleanly(&dir, p.shutdown());
}
