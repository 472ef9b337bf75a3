//! nerdctl (the stack's, `hack/deps.sh`) bound to one private containerd, with every piece of
//! its own state inside that containerd's directory:
//!
//! - `--address` and `--namespace` of the private containerd, its snapshotter;
//! - `--data-root <dir>/nerdctl/data` (containers' state, names, logs), instead of
//!   /var/lib/nerdctl;
//! - `--cni-netconfpath <dir>/nerdctl/cni` and `--cni-path /usr/lib/cni` (only read: the tests
//!   use `--network none`, and nerdctl writes its default bridge config into the former);
//! - `NERDCTL_TOML=<dir>/nerdctl/nerdctl.toml` (empty) instead of /etc/nerdctl/nerdctl.toml,
//!   `TMPDIR=<dir>/nerdctl/tmp` (compose's temporary files).
//!
//! [`HostPaths`] records the system paths nerdctl would use by default and checks, at the end
//! of a test, that nothing under them changed.
//!
//! nerdctl cannot pass runtime options to a shim (its `--runtime` takes a runtime type and
//! nothing else), so a nerdctl container runs under the node policy
//! (`/etc/gvisor-hardened/policy.toml`) or the embedded default. [`with_node_policy`] gives a
//! test its own node policy without touching the host's /etc.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use crate::containerd::Containerd;
use crate::error::{HarnessError, Result};
use crate::image::TestImage;
use crate::process::{BoundedCommand, CommandOutput};

/// The runtime type nerdctl's `--runtime` takes for the hardened shim.
pub const HARDENED_RUNTIME: &str = "io.containerd.gvisor-hardened.v1";

/// Deadline of one nerdctl call (a cold sandbox on a loaded 2-core machine takes seconds).
pub const DEFAULT_NERDCTL_TIMEOUT: Duration = Duration::from_secs(120);

/// nerdctl bound to one private containerd.
#[derive(Debug)]
pub struct Nerdctl {
    binary: PathBuf,
    dir: PathBuf,
    address: PathBuf,
    namespace: String,
    snapshotter: String,
    path_env: OsString,
}

impl Nerdctl {
    /// nerdctl for `c`, its state in `<c.dir()>/nerdctl/` (made here).
    pub fn new(c: &Containerd) -> Result<Nerdctl> {
        let n = Nerdctl {
            binary: crate::stack::bin("nerdctl")?,
            dir: c.dir().join("nerdctl"),
            address: c.address(),
            namespace: c.namespace().to_string(),
            snapshotter: c.snapshotter().to_string(),
            path_env: c.path_env().clone(),
        };
        for d in [n.data_root(), n.cni_conf_dir(), n.tmp_dir()] {
            fs::create_dir_all(&d).map_err(|e| HarnessError::io("creating", &d, e))?;
        }
        let toml = n.dir.join("nerdctl.toml");
        fs::write(&toml, "").map_err(|e| HarnessError::io("writing", &toml, e))?;
        Ok(n)
    }

    /// nerdctl's `--data-root`.
    pub fn data_root(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// nerdctl's `--cni-netconfpath`.
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni")
    }

    /// `TMPDIR` of every nerdctl call.
    pub fn tmp_dir(&self) -> PathBuf {
        self.dir.join("tmp")
    }

    /// The nerdctl binary.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// `nerdctl <global flags>`: add the subcommand and its arguments.
    pub fn command(&self) -> BoundedCommand {
        let mut cmd = Command::new(&self.binary);
        // nerdctl reads these when its flags are absent: make sure no caller's value leaks in.
        for var in [
            "CONTAINERD_ADDRESS",
            "CONTAINERD_NAMESPACE",
            "CONTAINERD_SNAPSHOTTER",
            "CNI_PATH",
            "NETCONFPATH",
            "NERDCTL_TOML",
        ] {
            cmd.env_remove(var);
        }
        cmd.env("PATH", &self.path_env)
            .env("NERDCTL_TOML", self.dir.join("nerdctl.toml"))
            .env("TMPDIR", self.tmp_dir())
            .arg("--address")
            .arg(&self.address)
            .arg("--namespace")
            .arg(&self.namespace)
            .arg("--snapshotter")
            .arg(&self.snapshotter)
            .arg("--data-root")
            .arg(self.data_root())
            .arg("--cni-netconfpath")
            .arg(self.cni_conf_dir())
            .arg("--cni-path")
            .arg("/usr/lib/cni");
        BoundedCommand::new(cmd, DEFAULT_NERDCTL_TIMEOUT)
    }

    /// `nerdctl ARGS`, whatever its exit status.
    pub fn output<I, S>(&self, args: I) -> Result<CommandOutput>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command().args(args).output()
    }

    /// `nerdctl ARGS`; a non-zero exit is an error carrying the output.
    pub fn checked<I, S>(&self, args: I) -> Result<CommandOutput>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command().args(args).checked()
    }

    /// `nerdctl load -i` of the test image; checks nerdctl lists it afterwards.
    pub fn load(&self, image: &TestImage) -> Result<()> {
        let out = self.checked([OsString::from("load"), "-i".into(), image.path().into()])?;
        let listed = self.checked(["images", "--format", "{{.Repository}}:{{.Tag}}"])?;
        if !listed.stdout.lines().any(|l| l.trim() == image.reference()) {
            return Err(HarnessError::CommandFailed {
                command: out.command,
                status: format!("exit 0 but {} is not listed", image.reference()),
                stdout: listed.stdout,
                stderr: out.stderr,
            });
        }
        Ok(())
    }

    /// Full ids of every container nerdctl knows in this namespace (`ps -a`).
    pub fn containers(&self) -> Result<Vec<String>> {
        let out = self.checked(["ps", "-a", "-q", "--no-trunc"])?;
        Ok(out.stdout.lines().map(|l| l.trim().to_string()).collect())
    }

    /// The full id of the container named `name`.
    pub fn id_of(&self, name: &str) -> Result<String> {
        let out = self.checked(["inspect", "--format", "{{.ID}}", name])?;
        Ok(out.stdout.trim().to_string())
    }

    /// nerdctl's logging processes (`nerdctl _NERDCTL_INTERNAL_LOGGING <data root>`) that
    /// still run: the shim starts one per detached container, and it must end with it.
    pub fn loggers(&self) -> Vec<crate::inspect::ProcInfo> {
        crate::inspect::processes_mentioning(&self.data_root().display().to_string())
            .into_iter()
            .filter(|p| p.cmdline.contains("_NERDCTL_INTERNAL_LOGGING"))
            .collect()
    }
}

/// The system paths nerdctl uses by default (its data root, config, CNI configs) and the
/// system containerd's, as found before a test: [`HostPaths::assert_unchanged`] fails if
/// anything under them appeared, vanished or changed size or mtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths(BTreeMap<PathBuf, Option<(u64, SystemTime)>>);

/// What nerdctl would use without its flags: its data root and config, the CNI configs, the
/// system containerd's socket. (/var/lib/cni is left out: other tests' Podman uses it, and
/// nothing here runs a CNI plugin.)
pub const NERDCTL_DEFAULT_PATHS: &[&str] = &[
    "/var/lib/nerdctl",
    "/etc/nerdctl",
    "/etc/cni",
    "/run/containerd/containerd.sock",
];

fn walk(path: &Path, out: &mut BTreeMap<PathBuf, Option<(u64, SystemTime)>>, depth: usize) {
    let meta = fs::symlink_metadata(path).ok();
    out.insert(
        path.to_path_buf(),
        meta.as_ref()
            .map(|m| (m.len(), m.modified().unwrap_or(SystemTime::UNIX_EPOCH))),
    );
    if depth == 0 || !meta.is_some_and(|m| m.is_dir()) {
        return;
    }
    if let Ok(entries) = fs::read_dir(path) {
        for e in entries.flatten() {
            walk(&e.path(), out, depth - 1);
        }
    }
}

impl HostPaths {
    pub fn record() -> HostPaths {
        let mut map = BTreeMap::new();
        for p in NERDCTL_DEFAULT_PATHS {
            walk(Path::new(p), &mut map, 3);
        }
        HostPaths(map)
    }

    #[track_caller]
    pub fn assert_unchanged(&self) {
        let now = HostPaths::record();
        let changed: Vec<_> = self
            .0
            .keys()
            .chain(now.0.keys())
            .filter(|k| self.0.get(*k) != now.0.get(*k))
            .collect();
        assert!(
            changed.is_empty(),
            "nerdctl touched system paths: {changed:?}"
        );
    }
}

/// Runs `f` on a thread of its own whose mount namespace is private and sees `policy` at
/// `/etc/gvisor-hardened/policy.toml`, the node policy, through an overlay on /etc (its upper
/// layer in a temporary directory): the host's /etc is never written, and other tests keep
/// seeing the real one. Everything `f` starts (containerd, and through it the shim and runsc)
/// inherits the namespace; the harness's mount checks read the calling thread's view.
pub fn with_node_policy<T: Send + 'static>(
    policy: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let policy = policy.to_string();
    let result = std::thread::spawn(move || {
        let layer = std::env::temp_dir().join(format!("gvh-np-{}", crate::ids::random_hex(6)));
        enter_private_etc(&layer).expect("a private mount namespace with an overlay on /etc");
        let node_dir = Path::new("/etc/gvisor-hardened");
        fs::create_dir_all(node_dir).expect("creating /etc/gvisor-hardened in the overlay");
        fs::write(node_dir.join("policy.toml"), &policy).expect("writing the node policy");
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // SAFETY: umount2 of a path string we own; the namespace is this thread's alone.
        unsafe { libc::umount2(c"/etc".as_ptr(), libc::MNT_DETACH) };
        let _ = fs::remove_dir_all(&layer);
        out
    })
    .join()
    .expect("the node-policy thread");
    match result {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// unshare(CLONE_NEWNS) for the calling thread, no propagation back to the host, and an
/// overlay on /etc whose writes go to `layer`.
fn enter_private_etc(layer: &Path) -> std::io::Result<()> {
    use std::ffi::CString;
    let (upper, work) = (layer.join("upper"), layer.join("work"));
    fs::create_dir_all(&upper)?;
    fs::create_dir_all(&work)?;
    let err = std::io::Error::last_os_error;
    // SAFETY: plain syscalls with NUL-terminated strings that outlive the calls.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(err());
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return Err(err());
        }
        let data = CString::new(format!(
            "lowerdir=/etc,upperdir={},workdir={}",
            upper.display(),
            work.display()
        ))
        .expect("no NUL in a temp path");
        if libc::mount(
            c"overlay".as_ptr(),
            c"/etc".as_ptr(),
            c"overlay".as_ptr(),
            0,
            data.as_ptr().cast(),
        ) != 0
        {
            return Err(err());
        }
    }
    Ok(())
}
