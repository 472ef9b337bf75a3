//! The runtime of an existing container, as `create` configured it: its runsc client (and the
//! sandbox core's `SandboxRuntime` over it), and the cleanup a failed create and `delete` share.

use std::time::Duration;

use policy_injector::Policy;

use super::error::Result;
use super::state::Record;
use gvisor_hardened_core::host::Host;
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runsc::client::Runsc;
use gvisor_hardened_core::runtime::runsc::client_with;
use gvisor_hardened_core::runtime::SandboxRuntime;

/// `delete`'s waits usually end within a few milliseconds
/// (the engine calls `delete` once the guard's pid has exited): a coarse poll would add most
/// of its period to every `run --rm`.
pub(super) const POLL: Duration = Duration::from_millis(2);

/// The runsc client of a container, as its policy configured it at create.
pub fn runsc_for(record: &Record, policy: &Policy, reaper: &Reaper) -> Result<Runsc> {
    let resolved;
    let policy = match &record.runsc_binary {
        Some(binary) => {
            let mut p = policy.clone();
            p.runsc.path = binary.display().to_string();
            resolved = p;
            &resolved
        }
        None => policy,
    };
    Ok(client_with(
        policy,
        &record.runsc,
        &record.namespace,
        &record.bundle,
        record.features.clone(),
        reaper.clone(),
    )?)
}

/// A create that failed after runsc started: remove what runsc made.
pub(super) async fn undo(runtime: &dyn SandboxRuntime, host: &dyn Host, record: &Record) {
    let _ = runtime.delete(&record.id).await;
    let _ = gvisor_hardened_core::sandbox::launch::remove_cgroups(
        host,
        &record.cgroups_path,
        &record.id,
    )
    .await;
}
