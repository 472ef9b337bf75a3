//! The root filesystem is mounted read-only (writable space comes from the scratch tmpfs
//! mounts), and it is the container's own: a relative `root.path` inside the bundle, or a host
//! directory the policy allows.
//!
//! Why the path is checked: `ctr run --rootfs /` (or a hand-made bundle) puts the host's own root
//! filesystem under the sandbox, read-only but readable (measured: /etc/passwd and the host's
//! binaries were readable inside). The mounts rule never sees it, since it is not a mount.

use serde_json::Value;

use super::mounts::denied_host_path;
use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::glob::{join, normalize, PathGlob};
use crate::json::{self, Object};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(root) = json::opt_object_mut(spec, "root", "")? else {
        return Err(HardenError::malformed(
            "root",
            "missing: a container needs a root filesystem",
        ));
    };
    match root.get("path") {
        Some(Value::String(path)) => check_path(&path.clone(), pass),
        _ => {
            return Err(HardenError::malformed(
                "root.path",
                "missing or not a string: a container needs a root filesystem",
            ))
        }
    }
    let readonly = json::opt_bool(root, "readonly", "root")?;
    if pass.policy.root.readonly && readonly != Some(true) {
        root.insert("readonly".into(), Value::Bool(true));
        pass.record(
            Rule::Root,
            "root.readonly",
            Action::Set,
            readonly.map(Value::Bool),
            Some(Value::Bool(true)),
            "the root filesystem is read-only; scratch tmpfs mounts give writable space",
        );
    }
    Ok(())
}

/// A relative path must stay inside the bundle; an absolute one must be allowed and not denied.
fn check_path(path: &str, pass: &mut Pass<'_>) {
    if path.split('/').any(|seg| seg == "..") {
        pass.reject(
            Rule::Root,
            "root.path",
            format!("{path:?} contains \"..\": the root filesystem must not leave its directory"),
        );
        return;
    }
    let Some(segs) = normalize(path) else {
        if path.is_empty() {
            pass.reject(Rule::Root, "root.path", "empty root path");
        }
        // Relative, without "..": inside the bundle, where containerd mounts the image.
        return;
    };
    let policy = pass.policy;
    // The engine's own storage (Docker's /var/lib/docker, which the deny list names) holds the
    // image it assembled for this container; the front end checked that this is that path.
    if let Some(engine) = pass.ctx.engine.as_ref() {
        if engine.rootfs.as_deref() == Some(path) {
            pass.record(
                Rule::Root,
                "root.path",
                Action::Reported,
                Some(Value::String(path.to_string())),
                None,
                format!(
                    "{:?}'s root filesystem for this container, in the engine's storage",
                    engine.engine
                ),
            );
            return;
        }
    }
    if let Some(pattern) = denied_host_path(policy, &segs) {
        pass.reject(
            Rule::Root,
            "root.path",
            format!(
                "host directory {} as the root filesystem matches or contains denied {pattern:?}",
                join(&segs)
            ),
        );
        return;
    }
    let allowed = policy
        .root
        .allowed_host_paths
        .iter()
        .filter_map(|p| PathGlob::new(p).ok())
        .any(|g| g.matches(&segs));
    if !allowed {
        pass.reject(
            Rule::Root,
            "root.path",
            format!(
                "host directory {} as the root filesystem is not on root.allowed_host_paths (containers run from the image in their bundle)",
                join(&segs)
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::harden::types::{Context, Engine, EngineContext};
    use crate::policy::Policy;
    use serde_json::json;

    fn engine_root(path: &str) -> Context {
        Context {
            engine: Some(EngineContext {
                engine: Engine::Docker,
                rootfs: Some(path.into()),
                files: Default::default(),
            }),
            ..Context::default()
        }
    }

    #[test]
    fn the_engines_checked_rootfs_passes_despite_the_deny_list() {
        let root = "/var/lib/docker/overlay2/0123/merged";
        let mut spec = base_spec();
        spec["root"] = json!({"path": root});
        assert!(rejections(&spec)[0].reason.contains("denied"));
        harden_with(&spec, &Policy::default(), &engine_root(root)).unwrap();
        // Only the path the front end checked, not any other.
        let other = engine_root("/var/lib/docker/overlay2/9999/merged");
        assert_eq!(rejections_with(&spec, &Policy::default(), &other).len(), 1);
    }

    #[test]
    fn writable_root_becomes_readonly() {
        let mut spec = base_spec();
        spec["root"]["readonly"] = json!(false);
        let h = harden_ok(&spec);
        assert_eq!(h.spec["root"]["readonly"], json!(true));
        assert_eq!(h.runsc.overlay, None);
    }

    #[test]
    fn missing_readonly_is_added() {
        let h = harden_ok(&base_spec());
        assert_eq!(h.spec["root"], json!({"path": "rootfs", "readonly": true}));
    }

    #[test]
    fn writable_root_allowed_by_policy_gets_a_memory_overlay() {
        let mut policy = Policy::default();
        policy.root.readonly = false;
        let h = harden_ok_with(&base_spec(), &policy);
        assert!(h.spec["root"].get("readonly").is_none());
        assert_eq!(h.runsc.overlay.as_deref(), Some("root:memory"));
    }

    #[test]
    fn missing_root_is_malformed() {
        let mut spec = base_spec();
        spec.as_object_mut().unwrap().remove("root");
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "root")
        );
    }

    #[test]
    fn readonly_of_wrong_type_is_malformed() {
        let mut spec = base_spec();
        spec["root"]["readonly"] = json!("yes");
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "root.readonly")
        );
    }

    #[test]
    fn the_host_root_as_root_filesystem_is_rejected() {
        let mut spec = base_spec();
        spec["root"]["path"] = json!("/");
        let r = rejections(&spec);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].field, "root.path");
        assert!(r[0].reason.contains("denied \"/\""), "{}", r[0].reason);
    }

    #[test]
    fn a_host_directory_not_on_the_allowlist_is_rejected() {
        let mut spec = base_spec();
        spec["root"]["path"] = json!("/srv/images/alpine");
        let r = rejections(&spec);
        assert_eq!(r.len(), 1, "{r:?}");
        assert!(
            r[0].reason.contains("root.allowed_host_paths"),
            "{}",
            r[0].reason
        );
    }

    #[test]
    fn an_allowed_host_directory_is_kept() {
        let mut policy = Policy::default();
        policy.root.allowed_host_paths = vec!["/srv/images/*".into()];
        let mut spec = base_spec();
        spec["root"]["path"] = json!("/srv/images/alpine");
        let h = harden_ok_with(&spec, &policy);
        assert_eq!(h.spec["root"]["path"], "/srv/images/alpine");
    }

    #[test]
    fn an_allowed_pattern_does_not_override_a_denied_source() {
        let mut policy = Policy::default();
        policy.root.allowed_host_paths = vec!["/**".into()];
        for path in ["/etc", "/var", "/run/containerd/x"] {
            let mut spec = base_spec();
            spec["root"]["path"] = json!(path);
            let r = rejections_with(&spec, &policy, &Default::default());
            assert_eq!(r.len(), 1, "{path}: {r:?}");
            assert!(r[0].reason.contains("denied"), "{path}: {}", r[0].reason);
        }
    }

    #[test]
    fn dot_dot_out_of_the_bundle_is_rejected() {
        for path in ["../../../../", "rootfs/../..", "/srv/images/../../etc"] {
            let mut spec = base_spec();
            spec["root"]["path"] = json!(path);
            let r = rejections(&spec);
            assert_eq!(r.len(), 1, "{path}: {r:?}");
            assert!(r[0].reason.contains(".."), "{path}: {}", r[0].reason);
        }
    }

    #[test]
    fn a_missing_or_empty_root_path_is_refused() {
        let mut spec = base_spec();
        spec["root"].as_object_mut().unwrap().remove("path");
        assert!(
            matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "root.path")
        );
        spec["root"]["path"] = json!("");
        assert_eq!(rejections(&spec)[0].field, "root.path");
    }
}
