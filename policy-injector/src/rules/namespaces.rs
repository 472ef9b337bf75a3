//! Namespaces: sharing the host's network, pid or ipc namespace (no entry for it, or a path
//! that is neither one of the pod's namespaces nor on the allowed list) is rejected.

use super::Pass;
use crate::decision::Rule;
use crate::error::HardenError;
use crate::glob::{normalize, PathGlob};
use crate::json::{self, Object};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let empty = Vec::new();
    let list = match json::opt_object(spec, "linux", "")? {
        Some(linux) => json::opt_array(linux, "namespaces", "linux")?.unwrap_or(&empty),
        None => &empty,
    };
    let mut seen: Vec<(String, Option<String>)> = Vec::with_capacity(list.len());
    for (i, ns) in list.iter().enumerate() {
        let field = format!("linux.namespaces[{i}]");
        let obj = ns
            .as_object()
            .ok_or_else(|| HardenError::malformed(&field, "expected an object"))?;
        let kind = json::opt_str(obj, "type", &field)?
            .ok_or_else(|| HardenError::malformed(format!("{field}.type"), "missing"))?;
        let path = json::opt_str(obj, "path", &field)?.filter(|p| !p.is_empty());
        if seen.iter().any(|(k, _)| k == kind) {
            pass.reject(
                Rule::Namespaces,
                format!("linux.namespaces[{kind}]"),
                format!("the {kind} namespace is listed twice"),
            );
            continue;
        }
        seen.push((kind.to_string(), path.map(str::to_string)));
    }
    for kind in &pass.policy.namespaces.reject_host {
        let field = format!("linux.namespaces[{kind}]");
        match seen.iter().find(|(k, _)| k == kind) {
            None => pass.reject(
                Rule::Namespaces,
                field,
                format!("no {kind} namespace entry: the container would share the host's {kind} namespace"),
            ),
            Some((_, None)) => {}
            Some((_, Some(path))) => {
                if !path_allowed(path, pass) {
                    pass.reject(
                        Rule::Namespaces,
                        field,
                        format!("joins {kind} namespace {path}, which is neither a namespace of this pod nor in namespaces.allowed_paths"),
                    );
                }
            }
        }
    }
    Ok(())
}

fn path_allowed(path: &str, pass: &Pass<'_>) -> bool {
    if pass.ctx.pod_namespace_paths.iter().any(|p| p == path) {
        return true;
    }
    let Some(segs) = normalize(path) else {
        return false;
    };
    // A path with ".." could walk out of an allowed directory; only accept it already normal.
    if path.split('/').any(|s| s == "..") {
        return false;
    }
    pass.policy
        .namespaces
        .allowed_paths
        .iter()
        .any(|p| PathGlob::new(p).is_ok_and(|g| g.matches(&segs)))
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::Rule;
    use crate::harden::types::Context;
    use crate::policy::Policy;
    use serde_json::json;

    fn with_namespaces(ns: serde_json::Value) -> serde_json::Value {
        let mut spec = base_spec();
        spec["linux"]["namespaces"] = ns;
        spec
    }

    #[test]
    fn missing_linux_section_means_host_namespaces_and_is_rejected() {
        let mut spec = base_spec();
        spec.as_object_mut().unwrap().remove("linux");
        let fields: Vec<String> = rejections(&spec)
            .into_iter()
            .filter(|r| r.rule == Rule::Namespaces)
            .map(|r| r.field)
            .collect();
        assert_eq!(
            fields,
            [
                "linux.namespaces[network]",
                "linux.namespaces[pid]",
                "linux.namespaces[ipc]"
            ]
        );
    }

    #[test]
    fn host_network_is_rejected() {
        let spec = with_namespaces(json!([{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}]));
        let r = rejections(&spec);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].field, "linux.namespaces[network]");
    }

    #[test]
    fn joining_a_host_process_namespace_is_rejected() {
        let spec = with_namespaces(
            json!([{"type": "pid", "path": "/proc/1/ns/pid"}, {"type": "ipc"}, {"type": "network"}]),
        );
        let r = rejections(&spec);
        assert_eq!(r[0].field, "linux.namespaces[pid]");
    }

    #[test]
    fn pod_namespaces_and_cni_netns_are_allowed() {
        let spec = with_namespaces(json!([
            {"type": "pid", "path": "/proc/4242/ns/pid"},
            {"type": "ipc", "path": "/proc/4242/ns/ipc"},
            {"type": "network", "path": "/var/run/netns/cni-1234"}
        ]));
        let ctx = Context {
            pod_namespace_paths: vec!["/proc/4242/ns/pid".into(), "/proc/4242/ns/ipc".into()],
            ..Context::default()
        };
        harden_with(&spec, &Policy::default(), &ctx).expect("pod namespaces are allowed");
    }

    #[test]
    fn dotdot_out_of_an_allowed_directory_is_rejected() {
        let spec = with_namespaces(
            json!([{"type": "pid"}, {"type": "ipc"}, {"type": "network", "path": "/var/run/netns/../../proc/1/ns/net"}]),
        );
        assert_eq!(rejections(&spec)[0].field, "linux.namespaces[network]");
    }

    #[test]
    fn duplicate_namespace_is_rejected() {
        let spec = with_namespaces(
            json!([{"type": "pid"}, {"type": "ipc"}, {"type": "network"}, {"type": "network", "path": "/proc/1/ns/net"}]),
        );
        assert!(rejections(&spec).iter().any(|r| r.reason.contains("twice")));
    }
}
