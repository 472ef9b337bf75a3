//! `update --resources FILE|- ID`: the new limits go through the policy again
//! (`clamp_resources`: never above its ceilings or the container's own tighter annotations),
//! then into the sandbox's cgroups and to `runsc update` where runsc has one (not 20221219),
//! as the shim does.

use std::io::Read;

use policy_injector::clamp_resources;
use serde_json::Value;

use super::cli::Source;
use super::error::{OciError, Result};
use super::{not_running, Opened};
use crate::audit::{AuditEvent, AuditRecord};
use crate::cgroup::update::{update, Limits};
use crate::cgroup::SandboxCgroup;
use crate::runsc::error::RunscError;

const MAX_RESOURCES_BYTES: u64 = 1 << 20;

fn read(source: &Source) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let read = match source {
        Source::Stdin => std::io::stdin()
            .take(MAX_RESOURCES_BYTES)
            .read_to_end(&mut bytes),
        Source::File(path) => std::fs::File::open(path)
            .and_then(|f| f.take(MAX_RESOURCES_BYTES).read_to_end(&mut bytes)),
    };
    read.map_err(OciError::io("reading the resources", "--resources"))?;
    Ok(bytes)
}

pub async fn run(c: &Opened, source: &Source) -> Result<()> {
    let id = &c.record.id;
    let resources: Value =
        serde_json::from_slice(&read(source)?).map_err(|e| OciError::Invalid {
            what: "update",
            reason: format!("the resources are not valid JSON: {e}"),
        })?;
    let clamped = clamp_resources(&resources, &c.policy, &c.record.annotations)?;
    let bytes = serde_json::to_vec(&clamped.resources).expect("serialises");
    // Into the sandbox's cgroups first, in an order cgroup v1 accepts, then `runsc update` where
    // runsc has one (it writes the memory limit before memory+swap, which cgroup v1 refuses
    // with EINVAL when the limit grows past the old memory+swap: see the shim's update).
    let limits = Limits::from_linux_resources(&clamped.resources)?;
    let pid = c
        .state
        .sandbox_pid()
        .ok_or_else(|| OciError::NotRunning(id.clone()))?;
    update(&SandboxCgroup::of_pid(pid)?, &limits)?;
    match c.runsc.update(id, &bytes).await {
        Ok(()) | Err(RunscError::Unsupported(_)) => {}
        Err(e) => return Err(not_running(e, id)),
    }
    let mut rec = AuditRecord::new(AuditEvent::Update, &c.record.subject);
    rec.decisions = Some(&clamped.decisions);
    c.audit_best_effort(&rec);
    Ok(())
}
