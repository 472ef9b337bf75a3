//! The `delete` action: containerd runs `<shim> -id ID -bundle B delete` after a shim died (or
//! its socket went away), to release what the dead shim held. It must leave nothing behind:
//! runsc's sandbox and state, the rootfs mount, our files; and it must work without the policy
//! (the runtime options are not passed), so Create saved what is needed in the bundle.

use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use anyhow::Context as _;
use containerd_shim_protos::api::DeleteResponse;

use crate::audit::{AuditEvent, AuditLog, AuditRecord};
use crate::cgroup::SandboxCgroup;
use crate::container::create::{BundleState, BUNDLE_STATE, INIT_PID_FILE};
use crate::flags::Flags;

/// A killed sandbox: what containerd reports for a task whose shim vanished.
const KILLED: u32 = 128 + libc::SIGKILL as u32;

pub fn run(flags: &Flags) -> anyhow::Result<DeleteResponse> {
    let bundle = if flags.bundle.is_empty() {
        std::env::current_dir().context("cwd")?
    } else {
        flags.bundle.clone().into()
    };
    crate::logger::init(Path::new("/nonexistent"), &flags.namespace, flags.debug);
    let state: Option<BundleState> = std::fs::read(bundle.join(BUNDLE_STATE))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let mut problems = Vec::new();
    if let Some(state) = &state {
        // --force kills a sandbox that still runs; a missing container is already clean.
        let args = crate::runsc::command::argv(
            &crate::runsc::command::GlobalFlags::new(&state.runsc_root),
            &crate::runsc::command::Subcommand::Delete {
                id: flags.id.clone(),
                force: true,
            },
        );
        match Command::new(&state.runsc_binary).args(&args).output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                let stderr = String::from_utf8_lossy(&out.stderr);
                if !stderr.contains("does not exist") && !stderr.contains("not found") {
                    problems.push(format!("runsc delete: {}", stderr.trim()));
                }
            }
            Err(e) => problems.push(format!("running {}: {e}", state.runsc_binary)),
        }
    }
    if let Some(state) = &state {
        // runsc delete removes the sandbox's cgroups; after a crash mid-create it may not
        // have known them. What is left and empty goes now.
        if let Ok(cg) = SandboxCgroup::for_spec(&state.cgroups_path, &flags.id) {
            for dir in cg.remaining() {
                if let Err(e) = std::fs::remove_dir(dir) {
                    problems.push(format!("cgroup {}: {e}", dir.display()));
                }
            }
        }
    }
    // The dead shim's socket: containerd does not remove it, and nothing else will. A pod's
    // socket stays while another container's shim still answers on it.
    let address = crate::start::socket_address(
        crate::start::SOCKET_ROOT,
        &flags.address,
        &flags.namespace,
        &crate::start::grouping_id(&bundle, &flags.id),
    );
    let socket = Path::new(address.trim_start_matches("unix://"));
    if socket.exists() && std::os::unix::net::UnixStream::connect(socket).is_err() {
        if let Err(e) = std::fs::remove_file(socket) {
            problems.push(format!("socket {}: {e}", socket.display()));
        }
    }
    if let Err(e) = crate::rootfs::unmount_all(&bundle.join("rootfs")) {
        problems.push(e.to_string());
    }
    for name in [INIT_PID_FILE, BUNDLE_STATE] {
        let _ = std::fs::remove_file(bundle.join(name));
    }
    if let Some(state) = &state {
        let mut rec = AuditRecord::new(AuditEvent::Delete, &state.subject);
        rec.exit_status = Some(KILLED);
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
    anyhow::ensure!(
        problems.is_empty(),
        "cleanup of {}: {}",
        flags.id,
        problems.join("; ")
    );
    let mut resp = DeleteResponse::new();
    resp.exit_status = KILLED;
    resp.exited_at = Some(crate::events::timestamp(SystemTime::now())).into();
    Ok(resp)
}
