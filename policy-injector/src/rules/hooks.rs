//! OCI hooks run on the host, as root, outside the sandbox: a spec with any is rejected.
//!
//! One exception, removed instead of rejected: Docker's own `libnetwork-setkey` prestart hook,
//! when the caller knows the spec comes from Docker. It hands dockerd the container's network
//! namespace for libnetwork to plumb; under runsc the sandbox has its own network stack
//! (loopback only with `--network=none`) and Docker runs, stops, restarts and removes
//! containers without the hook (measured with `--network none` and with no network flag; the
//! Docker tests prove it on every run).

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::harden::Engine;
use crate::json::{self, Object};

/// `{"path": "/proc/<pid>/exe", "args": ["libnetwork-setkey", ...]}`: dockerd re-executing
/// itself, the only form Docker writes.
fn is_docker_setkey(hook: &Value) -> bool {
    let path = hook.get("path").and_then(Value::as_str).unwrap_or_default();
    let pid = path
        .strip_prefix("/proc/")
        .and_then(|p| p.strip_suffix("/exe"));
    let first_arg = hook
        .get("args")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str);
    pid.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        && first_arg == Some("libnetwork-setkey")
}

/// Removes Docker's setkey hook from `hooks.prestart` (and the list, once empty).
fn remove_docker_setkey(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(hooks) = json::opt_object_mut(spec, "hooks", "")? else {
        return Ok(());
    };
    let Some(prestart) = json::opt_array_mut(hooks, "prestart", "hooks")? else {
        return Ok(());
    };
    let mut removed = Vec::new();
    let mut i = 0;
    while i < prestart.len() {
        if is_docker_setkey(&prestart[i]) {
            removed.push(prestart.remove(i));
        } else {
            i += 1;
        }
    }
    if prestart.is_empty() {
        hooks.remove("prestart");
    }
    if hooks.is_empty() {
        spec.remove("hooks");
    }
    for hook in removed {
        pass.record(
            Rule::Hooks,
            "hooks.prestart",
            Action::Removed,
            Some(hook),
            None,
            "Docker's libnetwork-setkey hook: the sandbox has its own network stack, Docker does not need it under runsc",
        );
    }
    Ok(())
}

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    if !pass.policy.hooks.reject {
        return Ok(());
    }
    if pass.ctx.engine.as_ref().map(|e| e.engine) == Some(Engine::Docker) {
        remove_docker_setkey(spec, pass)?;
    }
    let Some(hooks) = json::opt_object(spec, "hooks", "")? else {
        return Ok(());
    };
    let mut found = Vec::new();
    for (stage, _) in hooks.iter() {
        let list = json::opt_array(hooks, stage, "hooks")?;
        let n = list.map_or(0, Vec::len);
        if n > 0 {
            found.push((stage.clone(), n));
        }
    }
    for (stage, n) in found {
        pass.reject(
            Rule::Hooks,
            format!("hooks.{stage}"),
            format!("{n} {stage} hook(s) would run on the host as root, outside the sandbox"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::Rule;
    use crate::policy::Policy;
    use serde_json::json;

    #[test]
    fn any_hook_is_rejected() {
        for stage in [
            "prestart",
            "createRuntime",
            "createContainer",
            "startContainer",
            "poststart",
            "poststop",
        ] {
            let mut spec = base_spec();
            spec["hooks"] = json!({ stage: [{"path": "/usr/bin/evil"}] });
            let r = rejections(&spec);
            assert_eq!(r.len(), 1);
            assert_eq!(
                (r[0].rule, r[0].field.as_str()),
                (Rule::Hooks, format!("hooks.{stage}").as_str())
            );
        }
    }

    #[test]
    fn empty_hook_lists_pass_unchanged() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [], "poststop": null});
        let h = harden_ok(&spec);
        assert_eq!(h.spec["hooks"], json!({"prestart": [], "poststop": null}));
    }

    #[test]
    fn hooks_pass_when_the_policy_allows_them() {
        let mut policy = Policy::default();
        policy.hooks.reject = false;
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [{"path": "/bin/true"}]});
        harden_ok_with(&spec, &policy);
    }

    fn docker() -> crate::harden::Context {
        crate::harden::Context {
            engine: Some(crate::harden::EngineContext {
                engine: crate::harden::Engine::Docker,
                rootfs: None,
                files: Default::default(),
            }),
            ..Default::default()
        }
    }

    fn setkey() -> serde_json::Value {
        json!({"path": "/proc/7616/exe", "args": ["libnetwork-setkey", "-exec-root=/run/docker", "c1", "fe27"]})
    }

    #[test]
    fn dockers_setkey_hook_is_removed_when_docker_made_the_spec() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [setkey()]});
        let h = harden_with(&spec, &Policy::default(), &docker()).unwrap();
        assert!(h.spec.get("hooks").is_none(), "{}", h.spec);
        assert_eq!(count(&h, Rule::Hooks, crate::Action::Removed), 1);
    }

    #[test]
    fn the_setkey_hook_is_rejected_without_docker_and_other_hooks_stay_rejected_with_it() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": [setkey()]});
        assert_eq!(rejections(&spec)[0].rule, Rule::Hooks);
        spec["hooks"] = json!({"prestart": [setkey(), {"path": "/proc/1/exe", "args": ["other"]}]});
        let r = rejections_with(&spec, &Policy::default(), &docker());
        assert_eq!((r.len(), r[0].field.as_str()), (1, "hooks.prestart"));
        spec["hooks"] =
            json!({"prestart": [{"path": "/usr/bin/x", "args": ["libnetwork-setkey"]}]});
        assert_eq!(
            rejections_with(&spec, &Policy::default(), &docker()).len(),
            1
        );
    }

    #[test]
    fn hooks_of_the_wrong_type_are_malformed() {
        let mut spec = base_spec();
        spec["hooks"] = json!({"prestart": "x"});
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { .. }
        ));
    }
}
