//! `ps --format json ID`: the container's processes as the host sees them, which is what the
//! engines do with the answer (`docker top` runs ps(1) on the host and keeps these pids).
//! Inside gVisor the workload's processes have no host pids of their own: the host processes
//! of a container are the sandbox's (sentry, gofer, and with ptrace one stub per guest
//! thread), all in its cgroup. runsc's own `ps` answers with guest pids, which a host ps(1)
//! would match against unrelated processes (guest pid 1 is the host's init).

use std::io::Write;

use super::cli::Global;
use super::error::{OciError, Result};
use super::state::{alive, StateDir};
use gvisor_hardened_core::cgroup::SandboxCgroup;

pub fn run(g: &Global, id: &str, json: bool) -> Result<()> {
    let state = StateDir::new(g.root.as_deref(), id)?;
    state.record()?;
    let pids = match state.sandbox_pid().filter(|p| alive(*p)) {
        Some(sandbox) => host_pids(sandbox),
        None => Vec::new(),
    };
    let out = if json {
        serde_json::to_string(&pids).expect("a list of numbers serialises") + "\n"
    } else {
        let mut s = String::from("PID\n");
        for p in &pids {
            s.push_str(&format!("{p}\n"));
        }
        s
    };
    std::io::stdout()
        .write_all(out.as_bytes())
        .map_err(OciError::io("writing", "stdout"))
}

/// The processes in the sandbox's cgroup, or the sandbox process alone when its cgroups cannot
/// be read.
fn host_pids(sandbox: i32) -> Vec<i32> {
    let mut pids: Vec<i32> = SandboxCgroup::of_pid(sandbox)
        .and_then(|cg| cg.processes())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|p| i32::try_from(p).ok())
        .collect();
    if pids.is_empty() {
        pids.push(sandbox);
    }
    pids
}
