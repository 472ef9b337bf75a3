//! A private containerd of the selected stack (`crate::stack`: 2.x or Debian's 1.6) for one test: its own directory, root, state, sockets, PATH and
//! namespace; stopped and cleaned up on [`Containerd::shutdown`] or drop.

mod config;
mod restart;
mod teardown;

pub use config::{ConfigHook, ContainerdOptions, CRI_PLUGIN};
pub use restart::Stop;
pub use teardown::ShutdownReport;

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::ctr::CtrCommand;
use crate::error::{HarnessError, Result};
use crate::ids::{random_hex, unique_id};
use crate::image::TestImage;
use crate::process::CommandOutput;
use crate::run::{Run, Runtime};
use config::Layout;

/// File name of the product shim, as containerd derives it from the runtime type
/// `io.containerd.gvisor-hardened.v1`.
pub const SHIM_BINARY_NAME: &str = "containerd-shim-gvisor-hardened-v1";

/// Default runsc `--root` base of the hardened shim (issue 3); the shim appends the namespace.
pub const HARDENED_RUNSC_ROOT_BASE: &str = "/run/gvisor-hardened/runsc";

/// Where containerd 1.6 shims put their ttrpc sockets (host-global, hashed names).
pub const SHIM_SOCKET_DIR: &str = "/run/containerd/s";

/// Binaries a private containerd needs on PATH.
const REQUIRED_BINARIES: &[&str] = &[
    "containerd",
    "ctr",
    "containerd-shim-runc-v2",
    "runsc",
    "runc",
];

/// Unix socket paths are limited to 108 bytes; ours get a suffix of up to 22.
const MAX_DIR_LEN: usize = 80;

/// The name of the environment variable that keeps the directory after shutdown (debugging).
pub const KEEP_DIR_ENV: &str = "GVH_KEEP_DIR";

/// A running private containerd. Stopped by [`shutdown`](Self::shutdown) (which reports what
/// had to be cleaned up) or, best effort, on drop.
#[derive(Debug)]
pub struct Containerd {
    layout: Layout,
    namespace: String,
    snapshotter: String,
    snapshotter_fallback: Option<String>,
    path_env: OsString,
    child: Option<Child>,
    /// Set once teardown ran (by `shutdown` or drop), so it runs once.
    torn_down: bool,
    /// What it was started with, to start it again the same way ([`Containerd::restart`]).
    opts: ContainerdOptions,
    /// The namespace was generated here, so host paths named after it (cgroups `/<ns>`, the
    /// hardened runsc root) are ours alone and teardown may clean them. Not so for a namespace
    /// given in the options: another containerd may use it too.
    owns_namespace: bool,
}

fn find_on_path(name: &str, path: &OsString) -> Option<PathBuf> {
    std::env::split_paths(path).map(|d| d.join(name)).find(|p| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// A fresh directory under the system temp dir, `gvh-<hex>`.
fn create_dir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    let dir = base.join(format!("gvh-{}", random_hex(6)));
    if dir.as_os_str().len() > MAX_DIR_LEN {
        return Err(HarnessError::io(
            "temp dir too long for unix sockets (set TMPDIR to a short path)",
            dir,
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        ));
    }
    fs::create_dir(&dir).map_err(|e| HarnessError::io("creating", &dir, e))?;
    Ok(dir)
}

/// Installs the shim into `bin/`: a hard link when possible (cheap, and a rebuild by cargo
/// replaces the file rather than rewriting it), a copy otherwise.
fn install_shim(src: &Path, bin: &Path) -> Result<()> {
    let dst = bin.join(SHIM_BINARY_NAME);
    if !src.is_file() {
        return Err(HarnessError::io(
            "shim binary",
            src,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    }
    if fs::hard_link(src, &dst).is_err() {
        fs::copy(src, &dst).map_err(|e| HarnessError::io("copying the shim to", &dst, e))?;
    }
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755))
        .map_err(|e| HarnessError::io("chmod", &dst, e))
}

/// Reads containerd's log for plugins that failed to load. Returns the offending line.
fn plugin_failure(log: &str, plugin: &str) -> Option<String> {
    log.lines()
        .find(|l| {
            l.contains(plugin)
                && (l.contains("failed to load plugin") || l.contains("skip loading plugin"))
        })
        .map(str::to_string)
}

impl Containerd {
    /// Starts a private containerd and waits until it serves its grpc socket.
    pub fn start(opts: ContainerdOptions) -> Result<Containerd> {
        // The stack's containerd, ctr, runc shim and runsc first (crate::stack).
        let system_path = crate::stack::path_env()?;
        for bin in REQUIRED_BINARIES {
            if find_on_path(bin, &system_path).is_none() {
                return Err(HarnessError::MissingBinary(bin.to_string()));
            }
        }

        let layout = Layout { dir: create_dir()? };
        // From here on, dropping `c` cleans the directory up if anything below fails.
        let mut paths = vec![layout.bin()];
        paths.extend(std::env::split_paths(&system_path));
        let path_env = std::env::join_paths(paths).expect("PATH entries contain no ':'");
        let mut c = Containerd {
            namespace: opts.namespace.clone().unwrap_or_else(|| unique_id("gvh")),
            layout,
            snapshotter: "overlayfs".to_string(),
            snapshotter_fallback: None,
            path_env,
            child: None,
            torn_down: false,
            opts: opts.clone(),
            owns_namespace: opts.namespace.is_none(),
        };
        for d in c.layout.dirs() {
            fs::create_dir_all(&d).map_err(|e| HarnessError::io("creating", &d, e))?;
        }
        if let Some(shim) = &opts.shim_binary {
            install_shim(shim, &c.layout.bin())?;
        }
        let config_path = c.layout.config();
        let mut config_text = config::render(
            &c.layout,
            &opts,
            crate::stack::Stack::selected().containerd2(),
        );
        if let Some(hook) = &opts.config_hook {
            config_text = (hook.0)(&c.layout.dir, config_text).map_err(HarnessError::Config)?;
        }
        fs::write(&config_path, config_text)
            .map_err(|e| HarnessError::io("writing", &config_path, e))?;

        c.spawn(false)?;
        c.wait_ready(&opts)?;
        Ok(c)
    }

    /// Starts the containerd process on the prepared directory. `append_log` keeps what an
    /// earlier run wrote to the log (a restart); otherwise the log starts empty.
    fn spawn(&mut self, append_log: bool) -> Result<()> {
        let log_path = self.layout.log();
        let log = fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(append_log)
            .truncate(!append_log)
            .open(&log_path)
            .map_err(|e| HarnessError::io("creating", &log_path, e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| HarnessError::io("dup of", &log_path, e))?;
        let mut cmd = Command::new(crate::stack::bin("containerd")?);
        cmd.arg("--config")
            .arg(self.layout.config())
            .env("PATH", &self.path_env)
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        self.child = Some(cmd.spawn().map_err(|source| HarnessError::Spawn {
            program: "containerd".into(),
            source,
        })?);
        Ok(())
    }

    /// Polls until the grpc socket accepts connections (containerd loads every plugin before
    /// it creates its listeners), then checks the plugins the tests depend on.
    fn wait_ready(&mut self, opts: &ContainerdOptions) -> Result<()> {
        let deadline = Instant::now() + opts.start_timeout;
        let socket = self.layout.grpc_socket();
        loop {
            let child = self.child.as_mut().expect("started");
            if let Some(status) = child.try_wait().ok().flatten() {
                return Err(HarnessError::ContainerdExited {
                    status: status.to_string(),
                    log: self.log(),
                });
            }
            if UnixStream::connect(&socket).is_ok() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::ContainerdNotReady {
                    reason: format!(
                        "{} not accepting after {:?}",
                        socket.display(),
                        opts.start_timeout
                    ),
                    log: self.log(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }

        let log = self.log();
        for required in [
            "io.containerd.runtime.v2.task",
            "io.containerd.grpc.v1.tasks",
        ] {
            if let Some(line) = plugin_failure(&log, required) {
                return Err(HarnessError::ContainerdNotReady {
                    reason: format!("plugin {required} failed: {line}"),
                    log,
                });
            }
        }
        if opts.cri {
            if let Some(line) = plugin_failure(&log, CRI_PLUGIN) {
                return Err(HarnessError::ContainerdNotReady {
                    reason: format!("plugin {CRI_PLUGIN} failed: {line}"),
                    log,
                });
            }
        }
        // containerd's overlayfs plugin test-mounts an overlay in its root when it loads, so a
        // failure here means overlay really does not work under our directory.
        if let Some(line) = plugin_failure(&log, "io.containerd.snapshotter.v1.overlayfs") {
            if let Some(native) = plugin_failure(&log, "io.containerd.snapshotter.v1.native") {
                return Err(HarnessError::ContainerdNotReady {
                    reason: format!("no usable snapshotter: {line} / {native}"),
                    log,
                });
            }
            eprintln!(
                "gvh harness: overlayfs snapshotter unusable under {}, falling back to native: {line}",
                self.layout.dir.display()
            );
            self.snapshotter = "native".into();
            self.snapshotter_fallback = Some(line);
        }
        Ok(())
    }

    /// The directory holding everything of this containerd (removed on shutdown).
    pub fn dir(&self) -> &Path {
        &self.layout.dir
    }

    /// The grpc socket (`ctr --address`, the shims' `-address`).
    pub fn address(&self) -> PathBuf {
        self.layout.grpc_socket()
    }

    pub fn ttrpc_address(&self) -> PathBuf {
        self.layout.ttrpc_socket()
    }

    /// The namespace `ctr` uses (unique per instance unless set in the options).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// containerd's `root` (content store, snapshots, metadata).
    pub fn root(&self) -> PathBuf {
        self.layout.root()
    }

    /// containerd's `state` (bundles, shim state).
    pub fn state(&self) -> PathBuf {
        self.layout.state()
    }

    /// The private `bin/` at the front of containerd's PATH (where the shim is installed).
    pub fn bin_dir(&self) -> PathBuf {
        self.layout.bin()
    }

    /// containerd's PATH (`bin/` then the test process's PATH).
    pub fn path_env(&self) -> &OsString {
        &self.path_env
    }

    /// The bundle directory containerd creates for container `id`.
    pub fn bundle_dir(&self, id: &str) -> PathBuf {
        self.layout
            .state()
            .join("io.containerd.runtime.v2.task")
            .join(&self.namespace)
            .join(id)
    }

    /// The directory ctr's stdio fifos are created in (`--fifo-dir`).
    pub fn fifo_dir(&self) -> PathBuf {
        self.layout.fifo()
    }

    /// Parent of the runc shim roots (`--runc-root`) of the baseline and runc runtimes.
    pub fn runtimes_dir(&self) -> PathBuf {
        self.layout.runtimes()
    }

    /// The state root (runsc/runc `--root`) a runtime uses for this namespace, if known:
    /// baseline and runc get one inside our directory; the hardened shim's default is
    /// `/run/gvisor-hardened/runsc/<namespace>`.
    pub fn runtime_root(&self, runtime: &Runtime) -> Option<PathBuf> {
        match runtime {
            Runtime::Hardened { .. } => {
                Some(Path::new(HARDENED_RUNSC_ROOT_BASE).join(&self.namespace))
            }
            Runtime::Baseline => Some(
                self.layout
                    .runtimes()
                    .join("runsc-baseline")
                    .join(&self.namespace),
            ),
            Runtime::Runc => Some(self.layout.runtimes().join("runc").join(&self.namespace)),
            Runtime::Named(_) => None,
        }
    }

    /// The ttrpc socket a containerd 1.6 shim of container `id` listens on:
    /// `/run/containerd/s/<sha256("<address>/<namespace>/<id>")>`.
    pub fn shim_socket(&self, id: &str) -> PathBuf {
        let key = format!("{}/{}/{}", self.address().display(), self.namespace, id);
        Path::new(SHIM_SOCKET_DIR).join(format!("{:x}", Sha256::digest(key.as_bytes())))
    }

    /// containerd's log (stdout and stderr, including what shims log through it).
    pub fn log_path(&self) -> PathBuf {
        self.layout.log()
    }

    /// The log so far (empty if unreadable).
    pub fn log(&self) -> String {
        fs::read_to_string(self.layout.log()).unwrap_or_default()
    }

    /// The snapshotter in use: `overlayfs`, or `native` if overlay failed (see
    /// [`snapshotter_fallback`](Self::snapshotter_fallback)).
    pub fn snapshotter(&self) -> &str {
        &self.snapshotter
    }

    /// The log line explaining why overlayfs was not used, if it was not.
    pub fn snapshotter_fallback(&self) -> Option<&str> {
        self.snapshotter_fallback.as_deref()
    }

    /// containerd's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A `ctr` command bound to this containerd and namespace.
    pub fn ctr(&self) -> CtrCommand {
        crate::ctr::ctr_command(
            &self.path_env,
            &self.address(),
            &self.namespace,
            &self.snapshotter,
        )
    }

    /// Imports the test image (and unpacks it into the snapshotter).
    pub fn import(&self, image: &TestImage) -> Result<()> {
        let out = self
            .ctr()
            .args(["images", "import"])
            .arg(image.path())
            .checked()?;
        // ctr 1.6 prints the reference as it imports; ctr 2.x prints a progress table (with the
        // name cut into columns), so the image list is what tells.
        let listed = self.ctr().args(["images", "ls", "-q"]).checked()?;
        if !listed.stdout.lines().any(|l| l.trim() == image.reference()) {
            return Err(HarnessError::CommandFailed {
                command: out.command,
                status: format!("exit 0 but {} was not imported", image.reference()),
                stdout: out.stdout,
                stderr: out.stderr,
            });
        }
        Ok(())
    }

    /// Runs `ctr run` for `run` and returns its output whatever the exit status (the task's
    /// exit code is `ctr`'s exit code).
    pub fn run_output(&self, run: &Run) -> Result<CommandOutput> {
        self.ctr().args(run.ctr_args_for(self)).output()
    }

    /// `ctr task exec --exec-id <unique> [--fifo-dir ..] <flags> <id> <argv>`, ready to run.
    pub fn exec<I, S>(&self, id: &str, flags: &[&str], argv: I) -> CtrCommand
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.ctr()
            .args([
                "task",
                "exec",
                "--exec-id",
                &unique_id("exec"),
                "--fifo-dir",
            ])
            .arg(self.layout.fifo())
            .args(flags)
            .arg(id)
            .args(argv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines as containerd 1.6.20 writes them.
    const LOG: &str = r#"time="2026-11-29T13:19:38.527253628Z" level=info msg="loading plugin \"io.containerd.snapshotter.v1.native\"..." type=io.containerd.snapshotter.v1
time="2026-11-29T13:19:38.527415695Z" level=info msg="skip loading plugin \"io.containerd.snapshotter.v1.overlayfs\"..." error="overlayfs not supported" type=io.containerd.snapshotter.v1
time="2026-11-29T13:19:38.539399178Z" level=warning msg="failed to load plugin io.containerd.service.v1.tasks-service" error="no plugins registered for io.containerd.runtime.v1: not found"
"#;

    #[test]
    fn plugin_failures_are_found_in_both_log_forms() {
        assert!(plugin_failure(LOG, "io.containerd.snapshotter.v1.overlayfs").is_some());
        assert!(plugin_failure(LOG, "io.containerd.service.v1.tasks-service").is_some());
        assert!(plugin_failure(LOG, "io.containerd.snapshotter.v1.native").is_none());
    }
}
