//! Pids, stats, update, pause and resume: the sandbox's resources as containerd sees them.

use std::sync::Arc;

use containerd_shim_protos::api::{PidsResponse, StatsResponse, UpdateTaskRequest};
use containerd_shim_protos::shim::oci::ProcessDetails;
use containerd_shim_protos::types::task::ProcessInfo;
use serde_json::Value;

use super::Container;
use crate::error::{Result, ShimError};
use crate::process::state::{Op, State};
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::sandbox::update::UpdateError;

impl Container {
    /// The container's processes as the host sees them, since that is what containerd's clients
    /// do with the answer (`nerdctl top` runs ps(1) on the host with these pids, `ctr task ps`
    /// lists them): the sandbox's host processes, and each running exec's `runsc exec` process
    /// carrying its exec id, as runc's shim attaches it. runsc's own `ps` answers with guest
    /// pids, which ps(1) on the host matches against unrelated processes (guest pid 1 is the
    /// host's init). A pod's containers share one sandbox, so they list the same processes.
    pub async fn pids(&self) -> Result<PidsResponse> {
        let mut pids: Vec<u32> = self
            .cgroups
            .get()
            .and_then(|c| c.location())
            .and_then(|cg| cg.processes().ok())
            .unwrap_or_default();
        if pids.is_empty() {
            // No cgroup to read (the fake world, or a sandbox already gone): its own process.
            let sandbox = match &self.pod {
                super::PodRole::Member(first) => first.init.pid(),
                super::PodRole::Sandbox { .. } => self.init.pid(),
            };
            pids.extend(Some(sandbox).filter(|p| *p != 0));
        }
        let mut execs: Vec<(u32, String)> = self
            .execs
            .lock()
            .await
            .iter()
            .filter(|(_, p)| p.pid() != 0 && matches!(p.state(), State::Running))
            .map(|(id, p)| (p.pid(), id.clone()))
            .collect();
        execs.sort_unstable();
        let mut resp = PidsResponse::new();
        for pid in pids {
            if execs.iter().any(|(p, _)| *p == pid) {
                continue;
            }
            let mut info = ProcessInfo::new();
            info.pid = pid;
            resp.processes.push(info);
        }
        for (pid, exec_id) in execs {
            let mut details = ProcessDetails::new();
            details.exec_id = exec_id;
            let any = crate::packed::pack(&details)
                .map_err(|e| ShimError::Internal(format!("encoding ProcessDetails: {e}")))?;
            let mut info = ProcessInfo::new();
            info.pid = pid;
            info.info = Some(any).into();
            resp.processes.push(info);
        }
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
            // Once it has exited, runsc has nothing to say about it, and a `runsc events` run
            // while containerd deletes the task would recreate the bundle directory (runsc
            // makes its log file's directory) after containerd removed it.
            if self.init_ended.is_cancelled() {
                return Err(ShimError::NotFound(format!(
                    "container {} has exited: no stats",
                    self.id
                )));
            }
            let event = self.runtime.stats(self.runsc_id()).await?;
            let sandbox = self.cgroups.get().and_then(|c| c.location());
            super::metrics::sentry_metrics_any(&event, sandbox)?
        } else {
            let cgroups = self.sandbox_cgroups()?;
            let location = cgroups.location().ok_or_else(|| {
                ShimError::Internal(format!(
                    "the cgroups of {} have no place on this host to read",
                    self.id
                ))
            })?;
            super::metrics::metrics_any(location)?
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
        let bounds = gvisor_hardened_core::sandbox::update::Bounds {
            policy: &self.policy.policy,
            annotations: &self.annotations,
            created: policy_injector::AtCreate {
                runsc_platform: self.platform.clone(),
                memory_limit: self.memory_at_create,
            },
        };
        let applied = gvisor_hardened_core::sandbox::update::apply(
            &self.id,
            &resources,
            &bounds,
            self.sandbox_cgroups()?.as_ref(),
            self.runtime.as_ref(),
        )
        .await;
        let clamped = match applied {
            Ok(c) => c,
            Err(UpdateError::Rejected(e)) => {
                let mut rec = self.record(AuditEvent::UpdateRejected);
                rec.error = Some(e.to_string());
                self.audit.append_queued(&rec).await?;
                log::warn!("container {}: update: {e}", self.id);
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        };
        let mut rec = self.record(AuditEvent::Update);
        rec.decisions = Some(&clamped.decisions);
        self.audit_best_effort(&rec).await;
        Ok(())
    }

    pub async fn pause(&self) -> Result<()> {
        self.init
            .check(Op::Pause)
            .map_err(|e| self.state_error(&self.init, e))?;
        self.runtime.pause(self.runsc_id()).await?;
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
        self.runtime.resume(self.runsc_id()).await?;
        self.init
            .apply(Op::Resume)
            .map_err(|e| self.state_error(&self.init, e))?;
        self.events().resumed(&self.id).await;
        Ok(())
    }
}
