//! The `delete` action: containerd runs `<shim> -id ID -bundle B delete` after a shim died (or
//! its socket went away), to release what the dead shim held. It must leave nothing behind:
//! runsc's sandbox and state, the rootfs mount, our files; and it must work without the policy
//! (the runtime options are not passed), so Create saved what is needed in the bundle.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use anyhow::Context as _;
use containerd_shim_protos::api::DeleteResponse;

use crate::actions::start::{grouping_id, socket_address, SOCKET_ROOT};
use crate::flags::Flags;
use gvisor_hardened_core::audit::{AuditEvent, AuditLog, AuditRecord};
use gvisor_hardened_core::bundle::{self, BundleState};
use gvisor_hardened_core::host::linux::LinuxHost;
use gvisor_hardened_core::host::Host;
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runsc::state_dir;

pub fn run(flags: &Flags) -> anyhow::Result<DeleteResponse> {
    let bundle = if flags.bundle.is_empty() {
        std::env::current_dir().context("cwd")?
    } else {
        flags.bundle.clone().into()
    };
    crate::logger::init(Path::new("/nonexistent"), &flags.namespace, flags.debug);
    let state = BundleState::read(&bundle);
    // The pid containerd knows the task by: it goes into the TaskExit and TaskDelete containerd
    // publishes for the dead shim, as for runc's shim. Read before the shim files go.
    let init_pid =
        gvisor_hardened_core::runsc::client::read_pid_file(&bundle.join(bundle::INIT_PID_FILE))
            .ok()
            .and_then(|pid| u32::try_from(pid).ok());
    let mut problems = Vec::new();
    let grouping = grouping_id(&bundle, &flags.id);
    // A pod sandbox that claimed a warm sandbox runs under the pool's runsc id.
    let claim = gvisor_hardened_core::pool::claim::ClaimRecord::read(&bundle);
    let runsc_id = claim
        .as_ref()
        .map_or_else(|| flags.id.clone(), |c| c.runsc_id.clone());
    delete_in_runsc(
        state.as_ref(),
        &runsc_id,
        &grouping,
        claim.as_ref(),
        &mut problems,
    );
    if let Some(claim) = &claim {
        claim.forget();
    }
    if let Some(state) = &state {
        // runsc delete removes the sandbox's cgroups; after a crash mid-create it may not
        // have known them. What is left and empty goes now.
        if let Err(e) = LinuxHost.remove_cgroups(&state.cgroups_path, &flags.id) {
            problems.push(e.to_string());
        }
    }
    remove_dead_socket(flags, &grouping, &mut problems);
    if let Err(e) = LinuxHost.unmount_rootfs(&bundle.join("rootfs")) {
        problems.push(e.to_string());
    }
    // The dead shim may have died before the exit concluded the workspace: the sandbox is gone
    // now (runsc delete above), so conclude it here.
    let workspace = bundle::release_after_delete(&bundle, bundle::Files::Shim);
    if let Some(state) = &state {
        record_delete(state, workspace.as_ref(), &mut problems);
    }
    anyhow::ensure!(
        problems.is_empty(),
        "cleanup of {}: {}",
        flags.id,
        problems.join("; ")
    );
    let mut resp = DeleteResponse::new();
    resp.pid = init_pid.unwrap_or_default();
    resp.exit_status = ExitStatus::killed().containerd_code();
    resp.exited_at = Some(crate::events::timestamp(SystemTime::now())).into();
    Ok(resp)
}

/// runsc's side: `runsc delete --force` of the dead shim's sandbox (again once no other
/// delete runs, if the first lost a race), then the lock files runsc left of a sandbox whose
/// last container is gone, all under the runsc root's cleanup lock.
fn delete_in_runsc(
    state: Option<&BundleState>,
    runsc_id: &str,
    grouping: &str,
    claim: Option<&gvisor_hardened_core::pool::claim::ClaimRecord>,
    problems: &mut Vec<String>,
) {
    // containerd runs this action for every task of a dead shim at once: their runsc deletes
    // run together, and the lock sweep below waits for all of them (state_dir::CleanupLock).
    let runsc_root = state.map(|s| PathBuf::from(&s.runsc_root));
    let cleanup_lock = runsc_root
        .as_deref()
        .and_then(|root| state_dir::CleanupLock::shared(root).ok());
    let runsc_sandbox = runsc_root
        .as_deref()
        .and_then(|root| state_dir::sandbox_of(root, runsc_id));
    // --force kills a sandbox that still runs; a missing container is already clean.
    let runsc_delete = |state: &BundleState| -> Result<(), String> {
        let args = gvisor_hardened_core::runsc::command::argv(
            &gvisor_hardened_core::runsc::flags::GlobalFlags::for_cleanup(&state.runsc_root),
            &gvisor_hardened_core::runsc::command::Subcommand::Delete {
                id: runsc_id.to_string(),
                force: true,
            },
        );
        match Command::new(&state.runsc_binary).args(&args).output() {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                if stderr.contains("does not exist") || stderr.contains("not found") {
                    Ok(())
                } else {
                    Err(format!("runsc delete: {}", stderr.trim()))
                }
            }
            Err(e) => Err(format!("running {}: {e}", state.runsc_binary)),
        }
    };
    let first = state.map(runsc_delete);
    // Held to the end of this function: the rest of the action touches nothing another
    // delete's runsc could race with.
    let _swept_under = cleanup_lock.and_then(|l| l.exclusive().ok());
    // A pod container's delete can lose a race with its sandbox's: runsc 20221219 then fails
    // to reach the sandbox's control server that the other delete just killed. Once no other
    // delete runs (the exclusive lock), runsc sees the sandbox stopped and deletes the rest.
    let outcome = match (first, state) {
        (Some(Err(_)), Some(state)) => Some(runsc_delete(state)),
        (first, _) => first,
    };
    if let Some(Err(e)) = outcome {
        problems.push(e);
    }
    if let Some(root) = &runsc_root {
        // Lock files runsc left of a sandbox whose last container is now gone (see state_dir).
        let sandboxes = [
            Some(grouping.to_string()),
            runsc_sandbox,
            claim.map(|c| c.runsc_id.clone()),
        ];
        for sandbox in sandboxes.into_iter().flatten().collect::<BTreeSet<_>>() {
            if let Err(e) = state_dir::sweep_gone_sandbox_locks(root, &sandbox) {
                problems.push(format!(
                    "runsc locks of {sandbox} in {}: {e}",
                    root.display()
                ));
            }
        }
    }
}

/// The dead shim's socket: containerd does not remove it, and nothing else will. A pod's
/// socket stays while another container's shim still answers on it.
fn remove_dead_socket(flags: &Flags, grouping: &str, problems: &mut Vec<String>) {
    let address = socket_address(SOCKET_ROOT, &flags.address, &flags.namespace, grouping);
    let socket = Path::new(address.trim_start_matches("unix://"));
    if socket.exists() && std::os::unix::net::UnixStream::connect(socket).is_err() {
        match std::fs::remove_file(socket) {
            // containerd 2.x runs this action after every shim exit, also a clean one: the
            // exiting shim removes its own socket at the same time.
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                problems.push(format!("socket {}: {e}", socket.display()));
            }
            _ => {}
        }
    }
}

/// The delete record in the sandbox's audit log, with what the cleanup could not do.
fn record_delete(
    state: &BundleState,
    workspace: Option<&gvisor_hardened_core::workspace::WorkspaceReport>,
    problems: &mut Vec<String>,
) {
    let mut rec = AuditRecord::new(AuditEvent::Delete, &state.subject);
    rec.workspace = workspace;
    rec.exit_status = Some(ExitStatus::killed().containerd_code());
    rec.error = Some(if problems.is_empty() {
        "shim exited unexpectedly; cleaned up by containerd's delete action".to_string()
    } else {
        format!(
            "cleanup after shim exit incomplete: {}",
            problems.join("; ")
        )
    });
    // The dead shim's trail (its records' hashes) died with it: this record is unsigned,
    // and `audit verify --public-key` reports the sandbox as having no signed final record.
    let log = AuditLog::new(&state.audit_path).with_policy_sha256(&state.subject.policy.sha256);
    if let Err(e) = log.append(&rec) {
        problems.push(e.to_string());
    }
}
