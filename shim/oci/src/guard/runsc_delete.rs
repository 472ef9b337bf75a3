//! The `runsc delete` a guard starts as it leaves.

use std::path::PathBuf;

use crate::error::OciError;
use crate::state::{proc_start_time, StateDir};
use gvisor_hardened_core::runsc::client::Runsc;

/// The engine's next call after an exit is `delete`, and runsc's part of it (one runsc
/// process, ~30 ms here) is most of that call. It starts now, beside the engine's own work
/// after the exit; `delete` waits for it and runs runsc itself only when this one did not
/// succeed (`runsc-deleted` is written on success). Nobody here waits for it: the guard exits
/// now, and the engine (a subreaper) reaps it. `home`: the cgroups the guard came from.
pub(super) fn start(runsc: &Runsc, id: &str, state: &StateDir, home: &[PathBuf]) {
    let runsc = runsc.delete_command(id, true);
    // Under Podman the guard is still in the sandbox's cgroups, which runsc removes: its
    // delete runs from where the guard came from. The script moves itself there (writing
    // "0" moves the writer) rather than the guard before the spawn: a move between cgroup
    // v1 hierarchies can take a scheduler grace period, ~15 ms measured here, and the guard's
    // exit is what the engine waits for. Arguments: the cgroup.procs files, `--`, runsc's
    // argv; `$M` is the marker. Nothing is quoted into the script.
    let script = r#"while [ "$1" != -- ]; do echo 0 > "$1"; shift; done; shift; "$@" && : > "$M""#;
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .arg("runsc-delete")
        .args(home.iter().map(|d| d.join("cgroup.procs")))
        .arg("--")
        .arg(runsc.get_program())
        .args(runsc.get_args())
        .env("M", state.runsc_deleted_marker())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let recorded = match cmd.spawn() {
        Ok(child) => {
            let pid = child.id() as i32;
            state.set_runsc_delete(pid, proc_start_time(pid))
        }
        Err(e) => Err(OciError::io("starting", "/bin/sh (runsc delete)")(e)),
    };
    if let Err(e) = recorded {
        // `delete` then runs runsc itself.
        log::warn!("container {id}: {e}");
    }
}
