//! Pids, stats, update, pause and resume: the sandbox's resources as containerd sees them.

use std::sync::Arc;

use containerd_shim_protos::api::{PidsResponse, StatsResponse, UpdateTaskRequest};
use containerd_shim_protos::types::task::ProcessInfo;
use policy_injector::clamp_resources;
use serde_json::Value;

use super::Container;
use crate::audit::AuditEvent;
use crate::cgroup::update::Limits;
use crate::error::{Result, ShimError};
use crate::host::SandboxCgroups;
use crate::process::state::Op;

impl Container {
    pub async fn pids(&self) -> Result<PidsResponse> {
        let pids = self.runtime.ps(&self.id).await?;
        let mut resp = PidsResponse::new();
        resp.processes = pids
            .into_iter()
            .map(|pid| {
                let mut info = ProcessInfo::new();
                info.pid = pid;
                info
            })
            .collect();
        Ok(resp)
    }

    fn sandbox_cgroups(&self) -> Result<&Arc<dyn SandboxCgroups>> {
        self.cgroups
            .get()
            .ok_or_else(|| ShimError::Internal(format!("the cgroups of {} are not known", self.id)))
    }

    pub async fn stats(&self) -> Result<StatsResponse> {
        // A pod's later container has no cgroups of its own (runsc keeps one set per sandbox):
        // the sentry's own accounting of it is the best there is.
        let any = if self.is_member() {
            let event = self.runtime.stats(&self.id).await?;
            crate::cgroup::stats::sentry_metrics_any(&event)?
        } else {
            self.sandbox_cgroups()?.metrics()?
        };
        let mut resp = StatsResponse::new();
        resp.stats = Some(any).into();
        Ok(resp)
    }

    /// New resources go through the policy again: an Update can never loosen a ceiling.
    pub async fn update(&self, req: &UpdateTaskRequest) -> Result<()> {
        let raw = req
            .resources
            .as_ref()
            .map(|a| a.value.as_slice())
            .ok_or_else(|| ShimError::InvalidArgument("update without resources".into()))?;
        let resources: Value = serde_json::from_slice(raw).map_err(|e| {
            ShimError::InvalidArgument(format!("update resources are not valid JSON: {e}"))
        })?;
        let clamped = clamp_resources(&resources, &self.policy.policy, &self.annotations)?;
        let bytes = serde_json::to_vec(&clamped.resources).expect("json");
        if !self.runtime.update(&self.id, &bytes).await? {
            // This runsc has no `update`: the limits go straight into the sandbox's cgroups.
            let limits = Limits::from_linux_resources(&clamped.resources)
                .map_err(|e| ShimError::InvalidArgument(e.to_string()))?;
            self.sandbox_cgroups()?.update(&limits)?;
        }
        let mut rec = self.record(AuditEvent::Update);
        rec.decisions = Some(&clamped.decisions);
        self.audit_best_effort(&rec);
        Ok(())
    }

    pub async fn pause(&self) -> Result<()> {
        self.init
            .check(Op::Pause)
            .map_err(|e| self.state_error(&self.init, e))?;
        self.runtime.pause(&self.id).await?;
        self.init
            .apply(Op::Pause)
            .map_err(|e| self.state_error(&self.init, e))?;
        self.events().paused(&self.id).await;
        Ok(())
    }

    pub async fn resume(&self) -> Result<()> {
        self.init
            .check(Op::Resume)
            .map_err(|e| self.state_error(&self.init, e))?;
        self.runtime.resume(&self.id).await?;
        self.init
            .apply(Op::Resume)
            .map_err(|e| self.state_error(&self.init, e))?;
        self.events().resumed(&self.id).await;
        Ok(())
    }
}
