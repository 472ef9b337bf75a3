//! A private Docker 20.10 daemon for one test: own data-root, exec-root, pidfile, socket and
//! cgroup parent, no bridge and no iptables (nothing on the shared machine's network), runtimes
//! `gvisor-hardened` (runsc-hardened with the test policy) and `runsc` (plain runsc, loopback
//! only: the baseline). Stopped and removed on [`Dockerd::shutdown`] or drop; a system daemon
//! is never touched. Always `/usr/bin/docker`: the machine image may put a newer CLI first.
//!
//! Nothing of the host's changes either, which takes two settings Docker does not make by
//! default (both seen on a fresh machine, where the attack suite's host check caught them):
//! dockerd's identity key goes in our directory (`deprecated-key-path`; else
//! `/etc/docker/key.json`), and dockerd uses a private containerd of ours (the test harness's,
//! with its `opt` plugin off) instead of starting its own, whose `opt` plugin creates
//! `/opt/containerd` and which Docker gives no way to configure.

use std::fs;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::containerd::{Containerd, ContainerdOptions};
use crate::engine::{
    self, remove_everything, EngineCommand, EngineDir, Forced, BASELINE, HARDENED,
};
use crate::error::{HarnessError, Result};
use crate::image::TEST_IMAGE_REF;
use crate::poll::poll_until;

pub const DOCKER: &str = "/usr/bin/docker";
pub const DOCKERD: &str = "/usr/sbin/dockerd";
/// The containerd namespace dockerd keeps its containers in.
const MOBY_NAMESPACE: &str = "moby";
/// dockerd loads every plugin before it listens.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Extra runtimes: runsc-hardened under another policy, registered by name. The policy is the
/// test policy (audit log and runsc root in the directory) followed by the given TOML, written
/// to `<name>.toml` in the directory.
#[derive(Debug, Default, Clone)]
pub struct DockerOptions {
    pub extra_policies: Vec<(String, String)>,
}

#[derive(Debug)]
pub struct Dockerd {
    dir: EngineDir,
    child: Option<Child>,
    /// The containerd dockerd runs its containers through (namespace `moby`), stopped after
    /// dockerd.
    containerd: Option<Containerd>,
    torn_down: bool,
}

impl Dockerd {
    /// Starts dockerd on a fresh directory; ready when `docker version` answers.
    pub fn start(opts: DockerOptions) -> Result<Dockerd> {
        let runtime = engine::runsc_hardened_binary()?;
        let dir = EngineDir::create("dk")?;
        let d = dir.path().to_path_buf();
        let containerd = Containerd::start(ContainerdOptions {
            namespace: Some(MOBY_NAMESPACE.into()),
            log_level: "info".into(),
            ..ContainerdOptions::default()
        })?;
        let mut runtimes = serde_json::Map::new();
        let hardened = |policy: &Path| serde_json::json!({"path": runtime, "runtimeArgs": [format!("--policy={}", policy.display())]});
        runtimes.insert(HARDENED.into(), hardened(&dir.policy()));
        for (name, toml) in &opts.extra_policies {
            let policy = dir.write_policy(&format!("{name}.toml"), toml)?;
            runtimes.insert(name.clone(), hardened(&policy));
        }
        runtimes.insert(
            BASELINE.into(),
            // The global flags runsc-hardened passes under the default policy.
            serde_json::json!({"path": crate::stack::bin("runsc")?, "runtimeArgs": ["--network=none", "--oci-seccomp"]}),
        );
        let config = serde_json::json!({
            "data-root": d.join("data"),
            "exec-root": d.join("exec"),
            "pidfile": d.join("docker.pid"),
            "hosts": [format!("unix://{}", d.join("docker.sock").display())],
            "iptables": false,
            "ip-masq": false,
            "ip-forward": false,
            "bridge": "none",
            "storage-driver": "overlay2",
            "cgroup-parent": format!("/{}", Self::cgroup_parent_of(&d)),
            "runtimes": runtimes,
            "containerd": containerd.address(),
            "deprecated-key-path": d.join("key.json"),
        });
        let config_path = d.join("daemon.json");
        fs::write(&config_path, config.to_string())
            .map_err(|e| HarnessError::io("writing", &config_path, e))?;
        let log_path = d.join("dockerd.log");
        let log =
            fs::File::create(&log_path).map_err(|e| HarnessError::io("creating", &log_path, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| HarnessError::io("dup of", &log_path, e))?;
        let mut cmd = Command::new(DOCKERD);
        // runsc-hardened finds runsc on its PATH: the stack's (crate::stack).
        cmd.env("PATH", crate::stack::path_env()?)
            .arg("--config-file")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // SAFETY: setsid is async-signal-safe; a session of its own keeps the test's terminal
        // signals away from the daemon.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| HarnessError::Spawn {
            program: DOCKERD.into(),
            source,
        })?;
        let mut dockerd = Dockerd {
            dir,
            child: Some(child),
            containerd: Some(containerd),
            torn_down: false,
        };
        dockerd.wait_ready()?;
        Ok(dockerd)
    }

    fn cgroup_parent_of(dir: &Path) -> String {
        dir.file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned()
    }

    fn wait_ready(&mut self) -> Result<()> {
        let socket = self.dir.path().join("docker.sock");
        let child = self.child.as_mut().expect("started");
        poll_until("dockerd to accept connections", START_TIMEOUT, || {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(Err(status.to_string()));
            }
            UnixStream::connect(&socket).is_ok().then_some(Ok(()))
        })?
        .map_err(|status| HarnessError::CommandFailed {
            command: DOCKERD.into(),
            status,
            stdout: String::new(),
            stderr: fs::read_to_string(self.dir.path().join("dockerd.log")).unwrap_or_default(),
        })?;
        self.docker().arg("version").checked().map(drop)
    }

    pub fn dir(&self) -> &EngineDir {
        &self.dir
    }

    /// `docker run --rm --runtime RUNTIME --cidfile ... ARGS IMAGE sh -c SCRIPT`: the output and
    /// the container's id.
    pub fn run_rm(
        &self,
        runtime: &str,
        args: &[&str],
        script: &str,
    ) -> Result<(crate::CommandOutput, String)> {
        let runtime = ["--runtime".to_string(), runtime.to_string()];
        engine::run_rm_script(self.docker(), self.dir(), &runtime, args, script)
    }

    /// `hack/agent-sandbox.sh IMAGE PROJECT` (the caller adds the command) against this
    /// daemon, with its runtime `runtime` and the audit log the test policies write.
    pub fn agent_sandbox(&self, runtime: &str, image: &str, project: &Path) -> Command {
        let mut cmd = Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../hack/agent-sandbox.sh"
        ));
        cmd.env(
            "DOCKER_HOST",
            format!("unix://{}", self.dir.path().join("docker.sock").display()),
        )
        .env("DOCKER_CONFIG", self.dir.path().join("cli"))
        .env("GVH_RUNTIME", runtime)
        .env("GVH_AUDIT_LOG", self.dir.audit_log())
        .arg(image)
        .arg(project);
        cmd
    }

    /// `/usr/bin/docker -H unix://<dir>/docker.sock`, with its own config directory.
    pub fn docker(&self) -> EngineCommand {
        let mut cmd = Command::new(DOCKER);
        cmd.env("DOCKER_CONFIG", self.dir.path().join("cli"))
            .arg("-H")
            .arg(format!(
                "unix://{}",
                self.dir.path().join("docker.sock").display()
            ));
        crate::engine::engine_command(cmd)
    }

    /// `docker import` of the test image's root filesystem as `localhost/gvh-test:latest`.
    pub fn import_test_image(&self) -> Result<()> {
        let tar = crate::image::rootfs_tar()?;
        self.docker()
            .arg("import")
            .arg(&tar)
            .arg(TEST_IMAGE_REF)
            .checked()
            .map(drop)
    }

    /// runsc-hardened's state root: dockerd passes `--root <exec-root>/runtime-runc/moby`.
    pub fn state_root(&self) -> PathBuf {
        self.dir.path().join("exec/runtime-runc/moby")
    }

    /// The cgroup every container of this daemon lives under.
    pub fn cgroup_parent(&self) -> String {
        Self::cgroup_parent_of(self.dir.path())
    }

    /// Panics unless container `id` left nothing behind (after `docker rm` or `run --rm`).
    #[track_caller]
    pub fn assert_container_gone(&self, id: &str) {
        engine::assert_container_gone(id, &self.dir.runsc_root(), &self.state_root());
    }

    /// Removes leftover containers, stops dockerd, removes the directory; returns what had to
    /// be forced.
    pub fn shutdown(mut self) -> Forced {
        self.teardown()
    }

    fn teardown(&mut self) -> Forced {
        self.torn_down = true;
        let mut forced = Forced::default();
        if let Ok(out) = self
            .docker()
            .args(["ps", "-aq"])
            .timeout(Duration::from_secs(30))
            .output()
        {
            forced.containers = out.stdout.split_whitespace().map(str::to_string).collect();
            for id in &forced.containers {
                let _ = self
                    .docker()
                    .args(["rm", "-f", id])
                    .timeout(Duration::from_secs(60))
                    .output();
            }
        }
        if let Some(mut child) = self.child.take() {
            // SAFETY: plain kill(2) of our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            if poll_until("dockerd to exit", STOP_TIMEOUT, || {
                child.try_wait().ok().flatten()
            })
            .is_err()
            {
                forced.errors.push("dockerd ignored SIGTERM".into());
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if let Some(containerd) = self.containerd.take() {
            let report = containerd.shutdown();
            if !report.is_clean() {
                forced
                    .errors
                    .push(format!("dockerd's containerd: {report}"));
            }
        }
        let parent = self.cgroup_parent();
        remove_everything(self.dir.path(), Some(&parent), &[], &mut forced);
        forced
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        if !self.torn_down {
            let forced = self.teardown();
            if !forced.is_clean() {
                eprintln!("gvh harness: dockerd dropped: {forced}");
            }
        }
    }
}

/// Stops `d` and asserts nothing had to be forced and nothing of its directory is left.
#[track_caller]
pub fn assert_clean_docker_shutdown(d: Dockerd) {
    let dir = d.dir().path().to_path_buf();
    crate::engine::assert_shut_down_cleanly(&dir, d.shutdown());
}
