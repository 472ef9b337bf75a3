//! `ctr run` invocations: which runtime, which flags, which command.

use std::path::{Path, PathBuf};

use crate::probe::PROBE_IN_IMAGE;

/// Runtime type of the product shim.
pub const HARDENED_RUNTIME: &str = "io.containerd.gvisor-hardened.v1";
/// containerd's Go runc shim (drives runc, or runsc through the baseline wrapper).
pub const RUNC_RUNTIME: &str = "io.containerd.runc.v2";

/// The wrapper that makes containerd's runc shim drive runsc: the baseline runtime the
/// hardened shim is compared against. See `tests/baseline/runsc-baseline` for why it exists.
pub fn runsc_baseline_wrapper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("baseline")
        .join("runsc-baseline")
}

/// Which runtime `ctr run` uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Runtime {
    /// The product: `io.containerd.gvisor-hardened.v1`, resolved to the shim binary installed
    /// in the private containerd's `bin/` (see `ContainerdOptions::shim_binary`).
    Hardened {
        /// Sent as the runtime options' `ConfigPath` (`ctr run --runtime-config-path`).
        config_path: Option<PathBuf>,
    },
    /// runsc through containerd's Go runc shim and the `runsc-baseline` wrapper
    /// (`--platform=ptrace --network=none`), with its runsc root inside the containerd dir.
    Baseline,
    /// Plain runc through containerd's Go runc shim, root inside the containerd dir.
    Runc,
    /// Any runtime name, passed as is (no runtime options).
    Named(String),
}

impl Runtime {
    /// The product shim with its default policy selection.
    pub fn hardened() -> Self {
        Runtime::Hardened { config_path: None }
    }

    /// The product shim with `ConfigPath` set to `policy`.
    pub fn hardened_with_policy(policy: impl Into<PathBuf>) -> Self {
        Runtime::Hardened {
            config_path: Some(policy.into()),
        }
    }

    /// The `ctr run` flags selecting this runtime. `runtime_roots` is where the runc shim
    /// keeps its state (`--runc-root`), one subdirectory per runtime.
    pub(crate) fn ctr_flags(&self, runtime_roots: &Path) -> Vec<String> {
        let s = |p: &Path| p.to_string_lossy().into_owned();
        match self {
            Runtime::Hardened { config_path } => {
                let mut flags = vec!["--runtime".to_string(), HARDENED_RUNTIME.to_string()];
                if let Some(path) = config_path {
                    flags.push("--runtime-config-path".into());
                    flags.push(s(path));
                }
                flags
            }
            Runtime::Baseline => vec![
                "--runtime".into(),
                RUNC_RUNTIME.into(),
                "--runc-binary".into(),
                s(&runsc_baseline_wrapper()),
                "--runc-root".into(),
                s(&runtime_roots.join("runsc-baseline")),
            ],
            Runtime::Runc => vec![
                "--runtime".into(),
                RUNC_RUNTIME.into(),
                "--runc-root".into(),
                s(&runtime_roots.join("runc")),
            ],
            Runtime::Named(name) => vec!["--runtime".into(), name.clone()],
        }
    }
}

/// One `ctr run`: image, container id, runtime, extra flags and the command.
///
/// Defaults: the hardened runtime, `--rm` (the container and its snapshot are removed when the
/// task exits), the image's default command.
#[derive(Debug, Clone)]
pub struct Run {
    image: String,
    id: String,
    runtime: Runtime,
    rm: bool,
    detach: bool,
    flags: Vec<String>,
    command: Vec<String>,
}

impl Run {
    pub fn new(image_ref: impl Into<String>, id: impl Into<String>) -> Self {
        Run {
            image: image_ref.into(),
            id: id.into(),
            runtime: Runtime::hardened(),
            rm: true,
            detach: false,
            flags: Vec::new(),
            command: Vec::new(),
        }
    }

    pub fn runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = runtime;
        self
    }

    /// Keeps the container after the task exits (no `--rm`), e.g. to inspect it.
    pub fn keep(mut self) -> Self {
        self.rm = false;
        self
    }

    /// `ctr run --detach`: returns once the task started; the container stays (no `--rm`).
    pub fn detach(mut self) -> Self {
        self.rm = false;
        self.detach = true;
        self
    }

    /// Adds raw `ctr run` flags, e.g. `["--mount", "type=bind,src=/,dst=/host"]`,
    /// `["--env", "A=b"]`, `["--memory-limit", "67108864"]`.
    pub fn flags<I, S>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// The command and its arguments.
    pub fn cmd<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.command = argv.into_iter().map(Into::into).collect();
        self
    }

    /// Runs the sandbox probe: `/bin/sandbox-probe <args>`.
    pub fn probe<I, S>(self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let argv = std::iter::once(PROBE_IN_IMAGE.to_string())
            .chain(args.into_iter().map(Into::into))
            .collect::<Vec<_>>();
        self.cmd(argv)
    }

    /// Runs `sh -c script` in the busybox image.
    pub fn sh(self, script: impl Into<String>) -> Self {
        self.cmd(["/bin/sh".to_string(), "-c".to_string(), script.into()])
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn runtime_ref(&self) -> &Runtime {
        &self.runtime
    }

    /// The `ctr` arguments of this run for containerd `c`, for callers that need to drive
    /// `ctr` themselves (stdin, spawn): `c.ctr().args(run.ctr_args_for(&c))`.
    pub fn ctr_args_for(&self, c: &crate::Containerd) -> Vec<String> {
        self.ctr_args(&c.runtimes_dir(), &c.fifo_dir())
    }

    /// The `ctr` arguments after the global flags: `run [flags] IMAGE ID [CMD...]`.
    /// `runtime_roots` holds the runc shim roots; `fifo_dir` keeps ctr's stdio fifos inside
    /// the containerd dir instead of the host-global /run/containerd/fifo.
    pub(crate) fn ctr_args(&self, runtime_roots: &Path, fifo_dir: &Path) -> Vec<String> {
        let mut args = vec!["run".to_string()];
        if self.rm {
            args.push("--rm".into());
        }
        if self.detach {
            args.push("--detach".into());
        }
        args.push("--fifo-dir".into());
        args.push(fifo_dir.to_string_lossy().into_owned());
        args.extend(self.runtime.ctr_flags(runtime_roots));
        args.extend(self.flags.iter().cloned());
        args.push(self.image.clone());
        args.push(self.id.clone());
        args.extend(self.command.iter().cloned());
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(run: &Run) -> Vec<String> {
        run.ctr_args(Path::new("/c/runtimes"), Path::new("/c/fifo"))
    }

    #[test]
    fn default_run_uses_the_hardened_runtime_and_removes_the_container() {
        let run = Run::new("img", "id1").cmd(["true"]);
        assert_eq!(
            args(&run),
            [
                "run",
                "--rm",
                "--fifo-dir",
                "/c/fifo",
                "--runtime",
                HARDENED_RUNTIME,
                "img",
                "id1",
                "true"
            ]
        );
    }

    #[test]
    fn hardened_runtime_with_a_policy_passes_the_config_path() {
        let run = Run::new("img", "id1").runtime(Runtime::hardened_with_policy("/p.toml"));
        let a = args(&run);
        let i = a.iter().position(|x| x == "--runtime-config-path").unwrap();
        assert_eq!(a[i + 1], "/p.toml");
    }

    #[test]
    fn baseline_drives_runsc_through_the_runc_shim_with_a_private_root() {
        let run = Run::new("img", "id1").runtime(Runtime::Baseline).keep();
        let a = args(&run);
        assert!(!a.contains(&"--rm".to_string()));
        let wrapper = runsc_baseline_wrapper().to_string_lossy().into_owned();
        assert!(a.windows(2).any(|w| w == ["--runtime", RUNC_RUNTIME]));
        assert!(a
            .windows(2)
            .any(|w| w[0] == "--runc-binary" && w[1] == wrapper));
        assert!(a
            .windows(2)
            .any(|w| w == ["--runc-root", "/c/runtimes/runsc-baseline"]));
    }

    #[test]
    fn flags_go_before_the_image_and_the_command_after_the_id() {
        let run = Run::new("img", "id1")
            .runtime(Runtime::Runc)
            .flags(["--env", "A=b"])
            .probe(["caps"]);
        let a = args(&run);
        let n = a.len();
        assert_eq!(
            &a[n - 6..],
            ["--env", "A=b", "img", "id1", PROBE_IN_IMAGE, "caps"]
        );
    }
}
