//! `ctr` invocations bound to one private containerd.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::process::BoundedCommand;

/// Default deadline of a `ctr` call. Generous: a cold runsc sandbox on a loaded 2-core machine
/// takes seconds, not minutes; anything longer is a hang worth failing on.
pub const DEFAULT_CTR_TIMEOUT: Duration = Duration::from_secs(120);

/// A `ctr` command with `--address` and `--namespace` already set (and
/// `CONTAINERD_SNAPSHOTTER`, which `ctr run` and `ctr images import` read). Add the
/// subcommand and its arguments with [`arg`](BoundedCommand::arg).
pub type CtrCommand = BoundedCommand;

pub(crate) fn ctr_command(
    path_env: &OsStr,
    address: &Path,
    namespace: &str,
    snapshotter: &str,
) -> CtrCommand {
    // The stack's ctr (crate::stack), as found first on the instance's PATH.
    let ctr = crate::stack::bin("ctr").unwrap_or_else(|_| "ctr".into());
    let mut cmd = Command::new(ctr);
    // ctr 2.x prints containerd's "DEPRECATION: The support for cgroup v1 ..." warning on
    // every call on a cgroup v1 host (these machines are); tests compare its stderr.
    cmd.env("PATH", path_env)
        .env("CONTAINERD_SUPPRESS_DEPRECATION_WARNINGS", "1")
        .env("CONTAINERD_SNAPSHOTTER", snapshotter)
        .arg("--address")
        .arg(address)
        .arg("--namespace")
        .arg(namespace);
    BoundedCommand::new(cmd, DEFAULT_CTR_TIMEOUT)
}
