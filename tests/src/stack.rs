//! The container stack the tests run on: containerd (with its `ctr` and runc shim) and runsc.
//!
//! Two stacks, picked for a whole test run by `GVH_STACK`:
//! - `current` (the default): containerd 2.x and a current runsc, built from their Go modules
//!   by `hack/deps.sh` at the versions in `hack/versions.env`;
//! - `compat`: Debian bookworm's containerd 1.6 and runsc 20221219.
//!
//! The binaries are found through `hack/deps.sh --print` (the interface the acceptance checks
//! use too; `GVH_DEPS` may name a file holding its output, which `hack/test.sh` writes once).
//! Every process the harness starts that looks for them on `PATH` (containerd, which starts
//! shims that start runsc; dockerd and Podman, which start runsc-hardened, which starts runsc;
//! `ctr`) gets [`path_env`]: a directory of links to the stack's binaries in front of the test
//! process's own `PATH`, so a whole sandbox tree uses one stack.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use sha2::{Digest, Sha256};

use crate::error::{HarnessError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stack {
    /// containerd 2.x and a current runsc (hack/deps.sh).
    Current,
    /// Debian's containerd 1.6 and runsc 20221219.
    Compat,
}

/// The binaries the harness links into a stack's directory, by the names processes look up.
const LINKED: &[&str] = &["containerd", "ctr", "containerd-shim-runc-v2", "runsc"];

impl Stack {
    /// The stack of this test run: `GVH_STACK` (`current`, `compat`), `current` when unset.
    pub fn selected() -> Stack {
        match std::env::var("GVH_STACK").as_deref() {
            Ok("compat") => Stack::Compat,
            Ok("current") | Err(_) => Stack::Current,
            Ok(other) => panic!("GVH_STACK={other}: use current or compat"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Stack::Current => "current",
            Stack::Compat => "compat",
        }
    }

    /// The `hack/deps.sh --print` name of `binary` in this stack.
    fn deps_name(self, binary: &str) -> String {
        match self {
            Stack::Current => binary.to_string(),
            Stack::Compat => match binary {
                "runsc" => "runsc-20221219".to_string(),
                other => format!("{other}-1.6"),
            },
        }
    }

    /// The path of one of the stack's binaries (`containerd`, `ctr`, `containerd-shim-runc-v2`,
    /// `runsc`, and for the current stack `nerdctl` and `crictl`).
    pub fn binary(self, name: &str) -> Result<PathBuf> {
        let deps = deps()?;
        deps.get(&self.deps_name(name))
            .cloned()
            .ok_or_else(|| HarnessError::MissingBinary(format!("{name} ({} stack)", self.name())))
    }

    /// Whether this stack's containerd is 2.x (config version 3, the CRI plugin split).
    pub fn containerd2(self) -> bool {
        self == Stack::Current
    }

    /// The platform the shim runs runsc on when the policy names none: systrap where runsc
    /// has it (the current runsc), ptrace where it does not (20221219).
    pub fn default_platform(self) -> &'static str {
        match self {
            Stack::Current => "systrap",
            Stack::Compat => "ptrace",
        }
    }

    /// The host pids limit the default policy's resource section writes for a budget of
    /// `processes` guest processes on this stack's default platform.
    pub fn pids_limit(self, processes: u64) -> u64 {
        let r = policy_injector::policy::ResourcesPolicy::default();
        let per_process = match self.default_platform() {
            "systrap" => r.pids_per_process_systrap,
            _ => r.pids_per_process,
        };
        r.pids_base + per_process * processes
    }

    /// [`Stack::pids_limit`] of the default policy's own process budget.
    pub fn default_pids_limit(self) -> u64 {
        self.pids_limit(policy_injector::policy::ResourcesPolicy::default().processes)
    }
}

/// `hack/deps.sh --print`, once per process.
fn deps() -> Result<&'static BTreeMap<String, PathBuf>> {
    static DEPS: OnceLock<std::result::Result<BTreeMap<String, PathBuf>, String>> = OnceLock::new();
    DEPS.get_or_init(|| {
        let text = match std::env::var_os("GVH_DEPS") {
            Some(file) => fs::read_to_string(&file)
                .map_err(|e| format!("reading GVH_DEPS={}: {e}", Path::new(&file).display()))?,
            None => hack_print("deps.sh")?,
        };
        Ok(text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), PathBuf::from(v.trim())))
            .collect())
    })
    .as_ref()
    .map_err(|e| HarnessError::Config(e.clone()))
}

/// What `hack/SCRIPT --print` prints: `name=path` lines of what it built or installed.
pub(crate) fn hack_print(script: &str) -> std::result::Result<String, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hack")
        .join(script);
    let out = Command::new(&script)
        .arg("--print")
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} --print failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The directory of links to the selected stack's binaries, made once per process (and shared
/// by concurrent test processes: it is named after what it holds and made by a rename).
pub fn bin_dir() -> Result<&'static Path> {
    static DIR: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| make_bin_dir(Stack::selected()).map_err(|e| e.to_string()))
        .as_deref()
        .map_err(|e| HarnessError::Config(e.to_string()))
}

fn make_bin_dir(stack: Stack) -> Result<PathBuf> {
    let mut targets = Vec::new();
    let mut hash = Sha256::new();
    for name in LINKED {
        let target = stack.binary(name)?;
        hash.update(name.as_bytes());
        hash.update(target.as_os_str().as_encoded_bytes());
        targets.push((name, target));
    }
    let digest: String = hash
        .finalize()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = std::env::temp_dir().join(format!("gvh-stack-{}-{digest}", stack.name()));
    if dir.join("bin").is_dir() {
        return Ok(dir.join("bin"));
    }
    let tmp = std::env::temp_dir().join(format!(".gvh-stack-{}", crate::ids::random_hex(8)));
    let bin = tmp.join("bin");
    fs::create_dir_all(&bin).map_err(|e| HarnessError::io("creating", &bin, e))?;
    for (name, target) in targets {
        std::os::unix::fs::symlink(&target, bin.join(name))
            .map_err(|e| HarnessError::io("linking", bin.join(name), e))?;
    }
    // Another test process may have made it meanwhile: theirs is the same.
    if fs::rename(&tmp, &dir).is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    Ok(dir.join("bin"))
}

/// `PATH` for a process of the harness: the stack's links, then the test process's own PATH.
pub fn path_env() -> Result<OsString> {
    let system = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    let mut dirs = vec![bin_dir()?.to_path_buf()];
    dirs.extend(std::env::split_paths(&system));
    Ok(std::env::join_paths(dirs).expect("PATH entries contain no ':'"))
}

/// The selected stack's binary `name` (as linked in [`bin_dir`]).
pub fn bin(name: &str) -> Result<PathBuf> {
    Stack::selected().binary(name)
}

/// The kernel release gVisor's sentry reports in `uname`: `4.4.0` up to runsc 20221219,
/// `4.19.0-gvisor` in current releases. A test that checks it is gVisor answering (not the
/// host's kernel) takes either, on either stack.
pub fn is_gvisor_release(release: &str) -> bool {
    release == "4.4.0" || release.ends_with("-gvisor")
}

/// How a sandbox with loopback only answers a connection to any other address: runsc 20221219
/// says `EHOSTUNREACH` ("No route to host"), current releases `ENETUNREACH` ("Network is
/// unreachable"). Both mean no route exists; a test of "unreachable" takes either.
pub const NO_ROUTE_ERRNOS: [&str; 2] = ["EHOSTUNREACH", "ENETUNREACH"];

/// The messages of [`NO_ROUTE_ERRNOS`], as tools print them.
pub const NO_ROUTE_MESSAGES: [&str; 2] = ["No route to host", "Network is unreachable"];

/// Whether `errno` is one of [`NO_ROUTE_ERRNOS`].
pub fn is_no_route(errno: Option<&str>) -> bool {
    errno.is_some_and(|e| NO_ROUTE_ERRNOS.contains(&e))
}

/// Whether `text` holds one of [`NO_ROUTE_ERRNOS`] or [`NO_ROUTE_MESSAGES`].
pub fn mentions_no_route(text: &str) -> bool {
    NO_ROUTE_ERRNOS
        .iter()
        .chain(NO_ROUTE_MESSAGES.iter())
        .any(|m| text.contains(m))
}
