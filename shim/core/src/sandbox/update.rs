//! New resources for a running sandbox, the same under both front ends: through the policy
//! again (an update can never loosen a ceiling), into the sandbox's cgroups, then to runsc.
//! Callers: the shim's Update (`container/resources.rs`) and `runsc-hardened update`
//! (`oci/update.rs`); each audits the decisions in its own trail.

use std::collections::BTreeMap;

use policy_injector::{clamp_resources, AtCreate, ClampedResources, HardenError, Policy};
use serde_json::Value;

use crate::cgroup::update::Limits;
use crate::cgroup::CgroupError;
use crate::host::SandboxCgroups;
use crate::runsc::error::RunscError;
use crate::runtime::SandboxRuntime;

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    /// The policy refuses the resources (or they are malformed); the message names the rule.
    #[error(transparent)]
    Rejected(#[from] HardenError),
    /// The clamped resources do not translate into cgroup limits.
    #[error("{0}")]
    Limits(CgroupError),
    #[error(transparent)]
    Cgroup(CgroupError),
    #[error(transparent)]
    Runsc(#[from] RunscError),
}

/// What an update is clamped by: the container's policy, its annotations (which can only
/// tighten), and what its sandbox was created with (the platform the pids limit is sized for,
/// the memory limit the guest was sized by, which cannot change).
pub struct Bounds<'a> {
    pub policy: &'a Policy,
    pub annotations: &'a BTreeMap<String, String>,
    pub created: AtCreate,
}

/// Applies `resources` (an OCI `LinuxResources`) to sandbox `id`; returns what the policy made
/// of them, for the caller's audit record.
pub async fn apply(
    id: &str,
    resources: &Value,
    bounds: &Bounds<'_>,
    cgroups: &dyn SandboxCgroups,
    runtime: &dyn SandboxRuntime,
) -> Result<ClampedResources, UpdateError> {
    let clamped = clamp_resources(
        resources,
        bounds.policy,
        bounds.annotations,
        &bounds.created,
    )?;
    let bytes = serde_json::to_vec(&clamped.resources).expect("a JSON value serialises");
    // The limits go into the sandbox's cgroups first, in an order cgroup v1 accepts (a higher
    // memory limit after a higher memory+swap limit): `runsc update` (current releases;
    // 20221219 has none) writes the limit first and fails with EINVAL when the new one is above
    // the old memory+swap limit (measured: 64m, then 2Gi). It then only tells the sentry, with
    // the cgroups already at those values.
    let limits = Limits::from_linux_resources(&clamped.resources).map_err(UpdateError::Limits)?;
    cgroups.update(&limits).map_err(UpdateError::Cgroup)?;
    // `false`: this runsc has no `update`; the cgroups hold the limits.
    runtime.update(id, &bytes).await?;
    Ok(clamped)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::exit::ExitCause;
    use crate::fake::host::CgroupsSaying;
    use crate::fake::{Fake, Step};

    fn policy() -> Policy {
        Policy::from_toml_str("[resources]\nmemory = \"1Gi\"\n").unwrap()
    }

    const NONE: BTreeMap<String, String> = BTreeMap::new();

    #[tokio::test]
    async fn resources_go_through_the_policy_then_the_cgroups_then_runsc() {
        let fake = Fake::default();
        let cg = CgroupsSaying(Ok(ExitCause::Exited));
        let wanted = json!({"memory": {"limit": 4u64 << 30}});
        let p = policy();
        let bounds = Bounds {
            policy: &p,
            annotations: &NONE,
            created: AtCreate {
                runsc_platform: Some("systrap".into()),
                memory_limit: Some(1 << 30),
            },
        };
        let clamped = apply("c1", &wanted, &bounds, &cg, &fake).await.unwrap();
        assert_eq!(
            clamped.resources["memory"]["limit"],
            json!(1u64 << 30),
            "{clamped:?}"
        );
        assert_eq!(fake.calls_of("update").len(), 1, "{:?}", fake.calls());
        // Sized for the platform the sandbox runs on (the default budget on systrap).
        let systrap =
            p.resources.pids_base + p.resources.pids_per_process_systrap * p.resources.processes;
        assert_eq!(clamped.resources["pids"]["limit"], json!(systrap));
    }

    #[tokio::test]
    async fn a_change_of_the_memory_limit_is_refused_before_the_cgroups_or_runsc_see_it() {
        let fake = Fake::default();
        let cg = CgroupsSaying(Ok(ExitCause::Exited));
        let p = policy();
        let bounds = Bounds {
            policy: &p,
            annotations: &NONE,
            created: AtCreate {
                runsc_platform: Some("systrap".into()),
                memory_limit: Some(1 << 30),
            },
        };
        let wanted = json!({"memory": {"limit": 300u64 << 20}});
        let e = apply("c1", &wanted, &bounds, &cg, &fake).await.unwrap_err();
        assert!(matches!(e, UpdateError::Rejected(_)), "{e}");
        assert!(e.to_string().contains("cannot change"), "{e}");
        assert!(fake.calls_of("update").is_empty(), "{:?}", fake.calls());
    }

    #[tokio::test]
    async fn runsc_failing_the_update_is_the_caller_s_error() {
        let fake = Fake::default();
        fake.fail_next(Step::Update);
        let cg = CgroupsSaying(Ok(ExitCause::Exited));
        let p = policy();
        let bounds = Bounds {
            policy: &p,
            annotations: &NONE,
            created: AtCreate::default(),
        };
        let e = apply("c1", &json!({}), &bounds, &cg, &fake)
            .await
            .unwrap_err();
        assert!(matches!(e, UpdateError::Runsc(_)), "{e}");
    }
}
