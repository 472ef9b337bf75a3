//! OCI hooks run on the host, as root, outside the sandbox: a spec with any is rejected.
//!
//! One exception, removed instead of rejected: Docker's own `libnetwork-setkey` prestart hook,
//! when the caller knows the spec comes from Docker. It hands dockerd the container's network
//! namespace for libnetwork to plumb; under runsc the sandbox has its own network stack
//! (loopback only with `--network=none`) and Docker runs, stops, restarts and removes
//! containers without the hook (measured with `--network none` and with no network flag; the
//! Docker tests prove it on every run).
//!
//! The same for nerdctl's own pair, `nerdctl [GLOBAL FLAGS] internal oci-hook createRuntime`
//! and `... postStop`, which nerdctl writes into every spec it makes, whatever the runtime: they
//! set up (and tear down) CNI networking in the container's network namespace, which the sandbox
//! does not use, re-acquire and release the container's name, write `--pidfile` and the start
//! time `nerdctl inspect` shows. Without them `nerdctl run`, `exec`, `ps`, `rm` and `compose`
//! work (tests/tests/integration/nerdctl.rs); what is lost is `--pidfile`, `State.StartedAt`,
//! and the name being released at the container's exit rather than at `nerdctl rm`. Removing a
//! hook never runs anything on the host, so a hook that only looks like nerdctl's gains nothing.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::harden::types::Engine;
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

/// nerdctl's own hook for `event` in the stage that runs it: `{"path": P, "args": [P,
/// "--flag=value"..., "internal", "oci-hook", EVENT]}` with P an absolute path to a file named
/// `nerdctl` (what nerdctl's `withNerdctlOCIHook` writes, rootful).
fn is_nerdctl_hook(hook: &Value, event: &str) -> bool {
    let path = hook.get("path").and_then(Value::as_str).unwrap_or_default();
    let Some(args) = hook.get("args").and_then(Value::as_array) else {
        return false;
    };
    let args: Vec<&str> = args.iter().filter_map(Value::as_str).collect();
    let n = args.len();
    path.starts_with('/')
        && path.rsplit('/').next() == Some("nerdctl")
        && n == hook["args"].as_array().map_or(0, Vec::len)
        && n >= 4
        && args[0] == path
        && args[n - 3..] == ["internal", "oci-hook", event]
        && args[1..n - 3]
            .iter()
            .all(|a| a.starts_with("--") && a.contains('='))
}

/// Removes nerdctl's `createRuntime` and `postStop` hooks (and the lists, once empty).
fn remove_nerdctl_hooks(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(hooks) = json::opt_object_mut(spec, "hooks", "")? else {
        return Ok(());
    };
    let mut removed = Vec::new();
    for (stage, event) in [("createRuntime", "createRuntime"), ("poststop", "postStop")] {
        let Some(list) = json::opt_array_mut(hooks, stage, "hooks")? else {
            continue;
        };
        let mut i = 0;
        while i < list.len() {
            if is_nerdctl_hook(&list[i], event) {
                removed.push((stage, list.remove(i)));
            } else {
                i += 1;
            }
        }
        if list.is_empty() {
            hooks.remove(stage);
        }
    }
    if hooks.is_empty() {
        spec.remove("hooks");
    }
    for (stage, hook) in removed {
        // The audit keeps path and args only: nerdctl copies its caller's whole environment
        // into the hook's `env`, which may hold the user's secrets.
        let shown = serde_json::json!({"path": hook["path"], "args": hook["args"]});
        pass.record(
            Rule::Hooks,
            format!("hooks.{stage}"),
            Action::Removed,
            Some(shown),
            None,
            "nerdctl's own oci-hook: CNI setup in a network namespace the sandbox does not use, and nerdctl's bookkeeping",
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
    remove_nerdctl_hooks(spec, pass)?;
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

    fn docker() -> crate::harden::types::Context {
        crate::harden::types::Context {
            engine: Some(crate::harden::types::EngineContext {
                engine: crate::harden::types::Engine::Docker,
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

    fn nerdctl(event: &str) -> serde_json::Value {
        let bin = "/usr/local/bin/nerdctl";
        json!({"path": bin, "args": [bin, "--address=/run/containerd/containerd.sock",
            "--data-root=/var/lib/nerdctl", "--namespace=default", "internal", "oci-hook", event],
            "env": ["PATH=/usr/bin"]})
    }

    #[test]
    fn nerdctls_own_hooks_are_removed_and_recorded() {
        let mut spec = base_spec();
        spec["hooks"] =
            json!({"createRuntime": [nerdctl("createRuntime")], "poststop": [nerdctl("postStop")]});
        let h = harden_ok(&spec);
        assert!(h.spec.get("hooks").is_none(), "{}", h.spec);
        assert_eq!(count(&h, Rule::Hooks, crate::Action::Removed), 2);
        // The caller's environment, copied into the hook by nerdctl, is not in the record.
        assert!(!format!("{:?}", h.decisions).contains("PATH=/usr/bin"));
    }

    #[test]
    fn hooks_that_only_resemble_nerdctls_stay_rejected() {
        let bin = "/usr/local/bin/nerdctl";
        let cases = [
            // the right hook in the wrong stage
            ("prestart", nerdctl("createRuntime")),
            ("poststop", nerdctl("createRuntime")),
            ("createRuntime", nerdctl("postStop")),
            // another program, a relative path, argv[0] not the path
            (
                "createRuntime",
                json!({"path": "/usr/bin/evil", "args": ["/usr/bin/evil", "internal", "oci-hook", "createRuntime"]}),
            ),
            (
                "createRuntime",
                json!({"path": "nerdctl", "args": ["nerdctl", "internal", "oci-hook", "createRuntime"]}),
            ),
            (
                "createRuntime",
                json!({"path": bin, "args": ["/usr/bin/evil", "internal", "oci-hook", "createRuntime"]}),
            ),
            // an argument that is not a global --flag=value, extra arguments, no arguments
            (
                "createRuntime",
                json!({"path": bin, "args": [bin, "run", "internal", "oci-hook", "createRuntime"]}),
            ),
            (
                "createRuntime",
                json!({"path": bin, "args": [bin, "internal", "oci-hook", "createRuntime", "x"]}),
            ),
            ("createRuntime", json!({"path": bin})),
            (
                "createRuntime",
                json!({"path": bin, "args": [bin, 1, "internal", "oci-hook", "createRuntime"]}),
            ),
        ];
        for (stage, hook) in cases {
            let mut spec = base_spec();
            spec["hooks"] = json!({ stage: [hook.clone()] });
            let r = rejections(&spec);
            assert_eq!(r.len(), 1, "{stage} {hook}");
            assert_eq!(r[0].field, format!("hooks.{stage}"), "{hook}");
        }
        // Beside nerdctl's pair, any other hook is still refused.
        let mut spec = base_spec();
        spec["hooks"] = json!({"createRuntime": [nerdctl("createRuntime"), {"path": "/bin/x"}],
            "poststop": [nerdctl("postStop")]});
        let r = rejections(&spec);
        assert_eq!((r.len(), r[0].field.as_str()), (1, "hooks.createRuntime"));
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
