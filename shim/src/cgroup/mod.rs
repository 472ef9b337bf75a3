//! PLACEHOLDER until the cgroup module lands from the `runsc` branch.
use crate::process::state::ExitCause;
use crate::reaper::ExitStatus;

pub struct SandboxCgroup;

impl SandboxCgroup {
    pub fn from_spec(_spec: &serde_json::Value) -> Self {
        SandboxCgroup
    }
    pub fn classify_exit(&self, _status: &ExitStatus) -> ExitCause {
        ExitCause::Normal
    }
    pub fn stats(
        &self,
    ) -> Result<containerd_shim_protos::protobuf::well_known_types::any::Any, String> {
        Err("stats: cgroup module pending".into())
    }
    pub fn update(&self, _r: &serde_json::Value) -> Result<(), String> {
        Err("update: cgroup module pending".into())
    }
}
