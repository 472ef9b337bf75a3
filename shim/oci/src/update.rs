//! `update --resources FILE|- ID`: the new limits go through the policy again
//! (`clamp_resources`: never above its ceilings or the container's own tighter annotations),
//! then into the sandbox's cgroups and to `runsc update` where runsc has one (not 20221219),
//! as the shim does.

use std::io::Read;

use serde_json::Value;

use super::cli::Source;
use super::error::{OciError, Result};
use crate::opened::{not_running, Opened};
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord};
use gvisor_hardened_core::bundle::MAX_PROCESS_BYTES;
use gvisor_hardened_core::sandbox::update::UpdateError;

fn read(source: &Source) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    let read = match source {
        Source::Stdin => std::io::stdin()
            .take(MAX_PROCESS_BYTES)
            .read_to_end(&mut bytes),
        Source::File(path) => std::fs::File::open(path)
            .and_then(|f| f.take(MAX_PROCESS_BYTES).read_to_end(&mut bytes)),
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
    let pid = c
        .state
        .sandbox_pid()
        .ok_or_else(|| OciError::NotRunning(id.clone()))?;
    let cgroups = c.host.sandbox_cgroups(pid as u32)?;
    // The platform the create sized the pids limit for: the policy's, else runsc's default as
    // found at create.
    let platform = c.record.runsc.platform.clone().or_else(|| {
        c.record
            .features
            .default_platform()
            .map(|p| p.as_str().to_string())
    });
    let bounds = gvisor_hardened_core::sandbox::update::Bounds {
        policy: &c.policy,
        annotations: &c.record.annotations,
        created: policy_injector::AtCreate {
            runsc_platform: platform,
            memory_limit: c.record.memory_at_create,
        },
    };
    let applied = gvisor_hardened_core::sandbox::update::apply(
        id,
        &resources,
        &bounds,
        cgroups.as_ref(),
        c.runtime.as_ref(),
    )
    .await;
    let clamped = match applied {
        Ok(clamped) => clamped,
        Err(UpdateError::Rejected(e)) => {
            let mut rec = AuditRecord::new(AuditEvent::UpdateRejected, &c.record.subject);
            rec.error = Some(e.to_string());
            c.audit_best_effort(&rec);
            return Err(e.into());
        }
        Err(UpdateError::Limits(e) | UpdateError::Cgroup(e)) => return Err(e.into()),
        Err(UpdateError::Runsc(e)) => return Err(not_running(e, id)),
    };
    let mut rec = AuditRecord::new(AuditEvent::Update, &c.record.subject);
    rec.decisions = Some(&clamped.decisions);
    c.audit_best_effort(&rec);
    Ok(())
}
