//! `state ID`: runc's state JSON. The pid is the guard's (the one in the engine's pid file);
//! the status is runsc's while the guard lives, `stopped` once the sandbox has exited.

use serde_json::json;

use super::cli::Global;
use super::error::{OciError, Result};
use super::runtime::runsc_for;
use super::state::StateDir;
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runsc::client::Status;

pub async fn run(g: &Global, id: &str) -> Result<()> {
    let state = StateDir::new(g.root.as_deref(), id)?;
    let record = state.record()?;
    let guard = state.live_guard();
    let status = match guard {
        Some(_) if state.exit().is_none() => {
            let reaper = Reaper::install()?;
            let runsc = runsc_for(&record, &record.policy()?, &reaper)?;
            match runsc.state(id).await.map(|s| s.status) {
                Ok(Status::Creating) | Ok(Status::Created) => "created",
                Ok(Status::Running) => "running",
                Ok(Status::Paused) => "paused",
                Ok(Status::Stopped) | Ok(Status::Unknown) => "stopped",
                Err(e) if e.is_gone() => "stopped",
                Err(e) => return Err(OciError::Runsc(e)),
            }
        }
        _ => "stopped",
    };
    let out = json!({
        "ociVersion": "1.0.2-dev",
        "id": id,
        "pid": if status == "stopped" { 0 } else { guard.unwrap_or(0) },
        "status": status,
        "bundle": record.bundle,
        "rootfs": record.bundle.join("rootfs"),
        "created": record.created,
        "owner": "",
        "annotations": record.annotations,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).expect("serialises")
    );
    Ok(())
}
