//! Pids, stats, update, pause and resume: the sandbox's resources as containerd sees them.

use containerd_shim_protos::api::{PidsResponse, StatsResponse, UpdateTaskRequest};
use containerd_shim_protos::types::task::ProcessInfo;
use policy_injector::clamp_resources;
use serde_json::Value;

use super::Container;
use crate::audit::AuditEvent;
use crate::cgroup::update::{self, Limits};
use crate::error::{Result, ShimError};

impl Container {
    pub async fn pids(&self) -> Result<PidsResponse> {
        let pids = self
            .runtime
            .ps(&self.id)
            .await
            .map_err(|e| ShimError::Runsc(format!("runsc ps {}: {e}", self.id)))?;
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

    fn sandbox_cgroup(&self) -> Result<&crate::cgroup::SandboxCgroup> {
        self.cgroup
            .get()
            .map(|p| p.cgroup())
            .ok_or_else(|| ShimError::Internal(format!("the cgroups of {} are not known", self.id)))
    }

    pub async fn stats(&self) -> Result<StatsResponse> {
        let any = if self.pod_sandbox.is_some() {
            let event =
                self.runtime.stats(&self.id).await.map_err(|e| {
                    ShimError::Runsc(format!("runsc events --stats {}: {e}", self.id))
                })?;
            crate::cgroup::stats::sentry_metrics_any(&event)
        } else {
            crate::cgroup::stats::metrics_any(self.sandbox_cgroup()?)
        }
        .map_err(|e| ShimError::Internal(format!("stats of {}: {e}", self.id)))?;
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
        let clamped = clamp_resources(&resources, &self.policy.policy, &self.annotations)
            .map_err(ShimError::Rejected)?;
        let bytes = serde_json::to_vec(&clamped.resources).expect("json");
        let applied = self
            .runtime
            .update(&self.id, &bytes)
            .await
            .map_err(|e| ShimError::Runsc(format!("runsc update {}: {e}", self.id)))?;
        if !applied {
            // This runsc has no `update`: the limits go straight into the sandbox's cgroups.
            let limits = Limits::from_linux_resources(&clamped.resources)
                .map_err(|e| ShimError::InvalidArgument(e.to_string()))?;
            update::update(self.sandbox_cgroup()?, &limits)
                .map_err(|e| ShimError::Internal(format!("updating {}: {e}", self.id)))?;
        }
        let mut rec = self.record(AuditEvent::Update);
        rec.decisions = Some(&clamped.decisions);
        self.audit_best_effort(&rec);
        Ok(())
    }

    pub async fn pause(&self) -> Result<()> {
        self.init.transition(|s| {
            // Check only; the transition is applied once runsc paused the sandbox.
            let mut probe = *s;
            probe.pause()
        })?;
        self.runtime
            .pause(&self.id)
            .await
            .map_err(|e| ShimError::Runsc(format!("runsc pause {}: {e}", self.id)))?;
        self.init.transition(|s| s.pause())?;
        self.events().paused(&self.id).await;
        Ok(())
    }

    pub async fn resume(&self) -> Result<()> {
        self.init.transition(|s| {
            let mut probe = *s;
            probe.resume()
        })?;
        self.runtime
            .resume(&self.id)
            .await
            .map_err(|e| ShimError::Runsc(format!("runsc resume {}: {e}", self.id)))?;
        self.init.transition(|s| s.resume())?;
        self.events().resumed(&self.id).await;
        Ok(())
    }
}
