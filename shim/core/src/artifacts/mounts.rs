//! Which host directories of a hardened spec the sandbox can write: pure, from the spec JSON.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A bind mount the sandbox can write to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WritableMount {
    /// The host path, as the spec names it (the mounts rule checked it and its resolution).
    pub source: PathBuf,
    /// Where the container sees it; manifests and diffs are keyed by it.
    pub destination: String,
}

/// The writable bind mounts of a (hardened) spec, in spec order: mounts of type `bind` or with
/// a `bind`/`rbind` option, an absolute source, and no `ro` option unless `rw` is there too.
/// That counts a mount with both as writable, whichever one the runtime honours: it is safer
/// to record a volume that could not be written than to miss one that could. tmpfs and other
/// non-bind mounts hold no host files and are not listed.
///
/// A bind whose source and destination both lie inside another listed bind's is part of that
/// one and not listed again (a git directory's staging copy and data binds inside a project,
/// `crate::workspace`): its files would be walked twice.
pub fn writable_binds(spec: &Value) -> Vec<WritableMount> {
    let Some(mounts) = spec.get("mounts").and_then(Value::as_array) else {
        return Vec::new();
    };
    let all: Vec<WritableMount> = mounts.iter().filter_map(writable_bind).collect();
    let inside = |a: &WritableMount, b: &WritableMount| {
        a != b
            && a.source.starts_with(&b.source)
            && std::path::Path::new(&a.destination).starts_with(&b.destination)
    };
    let mut out: Vec<WritableMount> = Vec::new();
    for m in &all {
        if !all.iter().any(|o| inside(m, o)) && !out.contains(m) {
            out.push(m.clone());
        }
    }
    out
}

fn writable_bind(m: &Value) -> Option<WritableMount> {
    let options: Vec<&str> = m
        .get("options")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let is_bind = policy_injector::is_bind_mount(m);
    let read_only = options.contains(&"ro") && !options.contains(&"rw");
    let source = m.get("source").and_then(Value::as_str)?;
    let destination = m.get("destination").and_then(Value::as_str)?;
    (is_bind && !read_only && source.starts_with('/')).then(|| WritableMount {
        source: PathBuf::from(source),
        destination: destination.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_writable_host_binds_are_listed() {
        let spec = json!({"mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["size=1"]},
            {"destination": "/data", "type": "bind", "source": "/var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/data", "options": ["rbind", "rprivate", "rw", "nosuid", "nodev"]},
            {"destination": "/etc/hosts", "type": "bind", "source": "/var/lib/kubelet/pods/u/etc-hosts", "options": ["rbind", "ro", "nosuid", "nodev"]},
            {"destination": "/work", "source": "/srv/ws", "options": ["bind"]},
            {"destination": "/both", "type": "bind", "source": "/srv/both", "options": ["ro", "rw"]},
            {"destination": "/rel", "type": "bind", "source": "relative", "options": ["rw"]}
        ]});
        let got: Vec<String> = writable_binds(&spec)
            .into_iter()
            .map(|m| m.destination)
            .collect();
        assert_eq!(got, ["/data", "/work", "/both"]);
        assert_eq!(writable_binds(&spec)[1].source, PathBuf::from("/srv/ws"));
    }

    #[test]
    fn binds_inside_another_writable_bind_are_part_of_it() {
        let spec = json!({"mounts": [
            {"destination": "/work", "type": "bind", "source": "/srv/p", "options": ["rbind", "rw"]},
            {"destination": "/work/.git", "type": "bind", "source": "/srv/p/.git/gvisor-hardened/c1", "options": ["rbind", "rw"]},
            {"destination": "/work/.git/objects", "type": "bind", "source": "/srv/p/.git/objects", "options": ["rbind", "rw"]},
            {"destination": "/work/cache", "type": "bind", "source": "/srv/cache", "options": ["rbind", "rw"]}
        ]});
        let got: Vec<String> = writable_binds(&spec)
            .into_iter()
            .map(|m| m.destination)
            .collect();
        assert_eq!(got, ["/work", "/work/cache"]);
    }

    #[test]
    fn a_spec_without_mounts_has_none() {
        assert!(writable_binds(&json!({})).is_empty());
        assert!(writable_binds(&json!({"mounts": "x"})).is_empty());
    }
}
