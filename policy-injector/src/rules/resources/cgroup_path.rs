//! `linux.cgroupsPath`: the sandbox's own cgroup, never one that exists already.
//!
//! Why: runsc applies the spec's limits only to cgroup directories it creates. A directory that
//! already exists is joined as it is (measured with runsc 20221219: `ctr run --cgroup
//! /gvh-victim` with a pre-made `/gvh-victim` ran with memory.limit_in_bytes unlimited and
//! pids.max "max"), so a spec naming a host cgroup (`/`, `/system.slice`) would run without the
//! memory, CPU and process ceilings and inside a cgroup that host services share. The path must
//! therefore be absolute, free of `.`/`..`, below the root, and end in the container id as
//! containerd writes it (`/<namespace>/<id>`, CRI's `/kubepods/.../pod<uid>/<id>` or systemd's
//! `<slice>:<prefix>:<id>`). This is a pure check: a cgroup that happens to exist under such a
//! name can only be refused by whoever can look at the host (the shim).

use serde_json::Value;

use super::super::Pass;
use crate::decision::Rule;
use crate::error::HardenError;
use crate::json::Object;

const FIELD: &str = "linux.cgroupsPath";

pub(crate) fn check(linux: &Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let path = match linux.get("cgroupsPath") {
        // No path: runsc uses /<id>, a cgroup named after the container like the ones below.
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) if s.is_empty() => return Ok(()),
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(HardenError::malformed(FIELD, "must be a string")),
    };
    let leaf = if let Some(rest) = path.strip_prefix('/') {
        let segs: Vec<&str> = rest.split('/').collect();
        if segs.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
            pass.reject(
                Rule::Resources,
                FIELD,
                format!("{path:?} is not a plain cgroup path (empty, \".\" or \"..\" segment, or the root cgroup)"),
            );
            return Ok(());
        }
        segs[segs.len() - 1]
    } else {
        // systemd form: slice:prefix:name.
        let parts: Vec<&str> = path.split(':').collect();
        if parts.len() != 3 || parts.iter().any(|p| p.is_empty() || p.contains('/')) {
            pass.reject(
                Rule::Resources,
                FIELD,
                format!(
                    "{path:?} is neither an absolute cgroup path nor a systemd slice:prefix:name"
                ),
            );
            return Ok(());
        }
        parts[2]
    };
    let id = pass.ctx.container_id.as_str();
    // Podman names the cgroup `libpod-<id>` (under `libpod_parent` or `machine.slice`).
    let podman =
        pass.ctx.engine.as_ref().map(|e| e.engine) == Some(crate::harden::types::Engine::Podman);
    let own = leaf == id || (podman && leaf.strip_prefix("libpod-") == Some(id));
    // The CLI hardens files without knowing the container id: only the shape is checked there.
    if !id.is_empty() && !own {
        pass.reject(
            Rule::Resources,
            FIELD,
            format!(
                "{path:?} does not end in the container id {id:?}: the sandbox must get a cgroup of its own (runsc applies no limit to a cgroup that already exists)"
            ),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::super::testutil::*;
    use crate::harden::types::Context;
    use crate::policy::Policy;
    use serde_json::json;

    fn ctx(id: &str) -> Context {
        Context {
            container_id: id.into(),
            ..Context::default()
        }
    }

    #[test]
    fn podmans_libpod_prefix_counts_as_the_id_only_for_podman() {
        let mut spec = base_spec();
        spec["linux"]["cgroupsPath"] = json!("/libpod_parent/libpod-c1");
        assert_eq!(
            rejected(spec["linux"]["cgroupsPath"].clone(), "c1").len(),
            1
        );
        let podman = Context {
            container_id: "c1".into(),
            engine: Some(crate::harden::types::EngineContext {
                engine: crate::harden::types::Engine::Podman,
                rootfs: None,
                files: Default::default(),
            }),
            ..Context::default()
        };
        harden_with(&spec, &Policy::default(), &podman).unwrap();
    }

    fn rejected(path: serde_json::Value, id: &str) -> Vec<String> {
        let mut spec = base_spec();
        spec["linux"]["cgroupsPath"] = path;
        match harden_with(&spec, &Policy::default(), &ctx(id)) {
            Ok(_) => Vec::new(),
            Err(crate::HardenError::Rejected(r)) => r
                .into_iter()
                .filter(|r| r.field == "linux.cgroupsPath")
                .map(|r| r.reason)
                .collect(),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn paths_containerd_writes_are_accepted() {
        for (path, id) in [
            ("/default/c1", "c1"),
            ("/kubepods/burstable/pod0b7e/2b9c1f0e", "2b9c1f0e"),
            (
                "kubepods-burstable-pod0b7e.slice:cri-containerd:2b9c1f0e",
                "2b9c1f0e",
            ),
            ("/c1", "c1"),
        ] {
            assert!(rejected(json!(path), id).is_empty(), "{path}");
        }
        assert!(rejected(json!(""), "c1").is_empty());
        assert!(rejected(serde_json::Value::Null, "c1").is_empty());
    }

    #[test]
    fn a_host_cgroup_is_rejected() {
        for path in [
            "/",
            "/system.slice",
            "/user.slice/user-0.slice",
            "/default/other",
        ] {
            let r = rejected(json!(path), "c1");
            assert_eq!(r.len(), 1, "{path}: {r:?}");
        }
        let r = rejected(json!("/system.slice"), "c1");
        assert!(r[0].contains("container id"), "{}", r[0]);
    }

    #[test]
    fn dots_and_empty_segments_are_rejected_even_without_an_id() {
        for path in [
            "/default/../c1",
            "/default/./c1",
            "/default//c1",
            "/c1/",
            "/",
        ] {
            assert_eq!(rejected(json!(path), "").len(), 1, "{path}");
        }
        assert_eq!(rejected(json!("system.slice"), "").len(), 1);
        assert_eq!(rejected(json!("a:b/c:d"), "").len(), 1);
    }

    #[test]
    fn without_an_id_only_the_shape_is_checked() {
        assert!(rejected(json!("/system.slice/cron.service"), "").is_empty());
    }

    #[test]
    fn a_cgroups_path_of_wrong_type_is_malformed() {
        let mut spec = base_spec();
        spec["linux"]["cgroupsPath"] = json!(7);
        assert!(matches!(
            harden_with(&spec, &Policy::default(), &ctx("c1")),
            Err(crate::HardenError::Malformed { field, .. }) if field == "linux.cgroupsPath"
        ));
    }
}
