//! HOOK for the pod figures (issue 6, "Pods"), to be filled in once the CRI work (issue 4)
//! has landed: RunPodSandbox plus two containers to ready, through CRI, ours against the Go
//! shim. The harness already starts a containerd with the CRI plugin
//! (`ContainerdOptions { cri: true, extra_config, .. }`); what is missing is a CRI client in
//! the harness and the shim's pod support. Until then the report says so instead of
//! inventing a figure.

use serde_json::{json, Value};

/// What the JSON and the table carry for pods today.
pub fn not_measured() -> Value {
    json!({
        "status": "not measured",
        "reason": "needs CRI pod support (issue 4); hook: tests/examples/bench/pods.rs",
        "planned": "RunPodSandbox + 2 containers to ready through CRI, ours vs the Go shim + runsc",
    })
}
