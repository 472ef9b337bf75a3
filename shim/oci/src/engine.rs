//! Which engine made the spec, and the engine's own files for this container, checked on the
//! host. The decisions (remove Docker's setkey hook, accept the engine's rootfs and files past
//! the deny list) are policy-injector's, from [`EngineContext`].
//!
//! Both engines keep a container's root filesystem in their storage and give its absolute
//! path as `root.path` (Docker: `<data-root>/overlay2/<layer>/merged`, Podman:
//! `<graphroot>/overlay/<layer>/merged`); Docker also binds `hosts`, `hostname` and
//! `resolv.conf` from `<data-root>/containers/<id>/`. The default policy denies
//! `/var/lib/docker/**` and every absolute `root.path`, so without this every container would
//! be refused. What is accepted is exactly this container's paths: the layout and the id must
//! match, the rootfs must be a mounted overlay (or the vfs driver's directory), and the files
//! regular files.

use std::collections::BTreeSet;
use std::path::Path;

use policy_injector::{Engine, EngineContext};
use serde_json::Value;

const PODMAN_MANAGER: &str = "io.container.manager";
const DOCKER_FILES: [&str; 3] = ["hosts", "hostname", "resolv.conf"];

/// The audit namespace and runsc root segment per engine.
pub fn namespace(engine: Option<Engine>) -> &'static str {
    match engine {
        Some(Engine::Docker) => "docker",
        Some(Engine::Podman) => "podman",
        None => "oci",
    }
}

/// Which engine wrote `spec`, from what each always writes: Podman its manager annotation;
/// Docker its setkey hook (not always: no hook without a network to plumb), its default
/// cgroup, or a bundle in containerd's `moby` namespace, which is Docker's.
pub fn detect(spec: &Value, id: &str, bundle: &Path) -> Option<Engine> {
    let annotation = spec
        .pointer("/annotations")
        .and_then(|a| a.get(PODMAN_MANAGER))
        .and_then(Value::as_str);
    if annotation == Some("libpod") {
        return Some(Engine::Podman);
    }
    let setkey = spec
        .pointer("/hooks/prestart")
        .and_then(Value::as_array)
        .is_some_and(|hooks| {
            hooks
                .iter()
                .any(|h| h.pointer("/args/0").and_then(Value::as_str) == Some("libnetwork-setkey"))
        });
    let cgroups = spec
        .pointer("/linux/cgroupsPath")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let docker_cgroup =
        cgroups == format!("/docker/{id}") || cgroups == format!("system.slice:docker:{id}");
    let moby_bundle = bundle.ends_with(Path::new("io.containerd.runtime.v2.task/moby").join(id));
    (setkey || docker_cgroup || moby_bundle).then_some(Engine::Docker)
}

/// The engine context for `spec`: what of the engine's own paths checks out on this host.
pub fn context(
    engine: Engine,
    spec: &Value,
    id: &str,
    bundle: &Path,
    mountinfo: &str,
) -> EngineContext {
    let root = spec
        .pointer("/root/path")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let rootfs = match engine {
        Engine::Docker => docker_rootfs(root, mountinfo),
        Engine::Podman => podman_rootfs(root, bundle, id, mountinfo),
    };
    let files = match engine {
        Engine::Docker => docker_files(spec, id),
        Engine::Podman => BTreeSet::new(),
    };
    EngineContext {
        engine,
        rootfs: rootfs.then(|| root.to_string()),
        files,
    }
}

fn is_layer_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_mount_point(path: &str, mountinfo: &str) -> bool {
    // Field 5 of /proc/self/mountinfo; spaces in paths are octal-escaped, which ours never have.
    mountinfo.lines().any(|l| l.split(' ').nth(4) == Some(path))
}

/// `<storage>/<driver dir>/<layer>/merged` (a mount) or `<storage>/vfs/dir/<layer>`; returns
/// the storage directory.
fn storage_of<'a>(root: &'a str, overlay_dir: &str, mountinfo: &str) -> Option<&'a str> {
    let p = Path::new(root);
    let parts: Vec<&str> = root.rsplitn(4, '/').collect();
    if !p.is_absolute() || root.split('/').any(|s| s == "..") {
        return None;
    }
    match parts.as_slice() {
        ["merged", layer, dir, storage] if *dir == overlay_dir && is_layer_id(layer) => {
            is_mount_point(root, mountinfo).then_some(*storage)
        }
        [layer, "dir", "vfs", storage] if is_layer_id(layer) && p.is_dir() => Some(*storage),
        _ => None,
    }
}

fn docker_rootfs(root: &str, mountinfo: &str) -> bool {
    // The id is Docker's container id, and Docker keeps a directory per container beside the
    // layers: a root from another storage or another tool's overlay does not have it.
    storage_of(root, "overlay2", mountinfo)
        .is_some_and(|storage| Path::new(storage).join("containers").is_dir())
}

fn podman_rootfs(root: &str, bundle: &Path, id: &str, mountinfo: &str) -> bool {
    // Podman's bundle is `<graphroot>/overlay-containers/<id>/userdata`: the root must be in
    // the same storage.
    let Some(storage) = storage_of(root, "overlay", mountinfo) else {
        return false;
    };
    bundle
        == Path::new(storage)
            .join("overlay-containers")
            .join(id)
            .join("userdata")
}

fn docker_files(spec: &Value, id: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let Some(mounts) = spec.get("mounts").and_then(Value::as_array) else {
        return out;
    };
    for m in mounts {
        let (Some(dest), Some(source)) = (
            m.get("destination").and_then(Value::as_str),
            m.get("source").and_then(Value::as_str),
        ) else {
            continue;
        };
        let Some(name) = dest.strip_prefix("/etc/") else {
            continue;
        };
        if !DOCKER_FILES.contains(&name) {
            continue;
        }
        let p = Path::new(source);
        let expected_tail = Path::new("containers").join(id).join(name);
        let regular = std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file());
        if p.is_absolute() && p.ends_with(&expected_tail) && !source.contains("/../") && regular {
            out.insert(source.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LAYER: &str = "f8177e806e6a35ba0996a010564056996f35ca7763d5b1884ca60d7136552586";

    #[test]
    fn engines_are_told_apart_by_what_they_always_write() {
        let b = Path::new("/b/c");
        let podman = json!({"annotations": {"io.container.manager": "libpod"}});
        assert_eq!(detect(&podman, "c", b), Some(Engine::Podman));
        let docker_hook = json!({"hooks": {"prestart": [{"path": "/proc/1/exe", "args": ["libnetwork-setkey", "c"]}]}});
        assert_eq!(detect(&docker_hook, "c", b), Some(Engine::Docker));
        let docker_cgroup = json!({"linux": {"cgroupsPath": "/docker/c"}});
        assert_eq!(detect(&docker_cgroup, "c", b), Some(Engine::Docker));
        let moby = Path::new("/run/docker/containerd/daemon/io.containerd.runtime.v2.task/moby/c");
        assert_eq!(detect(&json!({}), "c", moby), Some(Engine::Docker));
        let other = json!({"linux": {"cgroupsPath": "/docker/other"}});
        assert_eq!(detect(&other, "c", b), None);
        assert_eq!(detect(&json!({}), "c", b), None);
    }

    #[test]
    fn dockers_rootfs_and_files_are_accepted_only_where_docker_keeps_them() {
        let data = tempfile::tempdir().unwrap();
        let d = data.path().to_str().unwrap();
        let root = format!("{d}/overlay2/{LAYER}/merged");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(format!("{d}/containers/c1")).unwrap();
        std::fs::write(format!("{d}/containers/c1/hosts"), "").unwrap();
        std::fs::write(format!("{d}/containers/c1/hostname"), "").unwrap();
        let mountinfo = format!("100 30 0:50 / {root} rw,relatime - overlay overlay rw\n");
        let spec = json!({
            "root": {"path": root},
            "mounts": [
                {"destination": "/etc/hosts", "type": "bind", "source": format!("{d}/containers/c1/hosts")},
                {"destination": "/etc/hostname", "type": "bind", "source": format!("{d}/containers/c2/hostname")},
                {"destination": "/data", "type": "bind", "source": format!("{d}/containers/c1/hostname")}
            ]
        });
        let ctx = context(Engine::Docker, &spec, "c1", Path::new("/b"), &mountinfo);
        assert_eq!(ctx.rootfs.as_deref(), Some(root.as_str()));
        assert_eq!(
            ctx.files.into_iter().collect::<Vec<_>>(),
            [format!("{d}/containers/c1/hosts")]
        );
        // Not mounted: not the engine's assembled root.
        assert!(context(Engine::Docker, &spec, "c1", Path::new("/b"), "")
            .rootfs
            .is_none());
        // A root elsewhere.
        let other = json!({"root": {"path": "/srv/rootfs"}});
        assert!(
            context(Engine::Docker, &other, "c1", Path::new("/b"), &mountinfo)
                .rootfs
                .is_none()
        );
    }

    #[test]
    fn podmans_rootfs_must_be_in_the_storage_of_its_bundle() {
        let g = "/var/lib/containers/storage";
        let root = format!("{g}/overlay/{LAYER}/merged");
        let mountinfo = format!("100 30 0:50 / {root} rw - overlay overlay rw\n");
        let spec = json!({"root": {"path": root}});
        let bundle = format!("{g}/overlay-containers/c1/userdata");
        let ctx = context(Engine::Podman, &spec, "c1", Path::new(&bundle), &mountinfo);
        assert_eq!(ctx.rootfs.as_deref(), Some(root.as_str()));
        let elsewhere = "/tmp/other/overlay-containers/c1/userdata";
        assert!(context(
            Engine::Podman,
            &spec,
            "c1",
            Path::new(elsewhere),
            &mountinfo
        )
        .rootfs
        .is_none());
    }
}
