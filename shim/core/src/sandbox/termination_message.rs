//! Why the runtime stopped a Kubernetes container, where `kubectl describe` shows it.
//!
//! containerd's CRI only knows two reasons for a container that ended badly: `OOMKilled` (from
//! TaskOOM) and `Error`. A pod whose wall-clock limit, idle timeout or process limit ended it
//! would show exit 137 and `Error`, and the reason would be only in the node's audit log. The
//! kubelet, though, reads each container's termination-message file after the exit and puts its
//! content into `status.containerStatuses[].state.terminated.message`. The kubelet creates that
//! file on the host and bind-mounts it into the container at `terminationMessagePath`; the
//! shim appends one line to it, before the exit is published, when enforcement ended the
//! container.
//!
//! Which mount is that file is decided from the spec alone (pure), and only for the layout
//! the kubelet makes: the source is `<kubelet root>/pods/<pod uid>/containers/<container
//! name>/<file>`, with the pod uid and container name the CRI annotations give. A spec from
//! `ctr` or nerdctl that merely names some host file at `/dev/termination-log` is never written.
//! The write itself refuses symlinks and anything but a regular file.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use policy_injector::quantity::HumanDuration;
use serde_json::Value;

use crate::exit::ExitCause;

const POD_UID: &str = "io.kubernetes.cri.sandbox-uid";
const CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// The host file of the kubelet's termination-message mount in `spec`, for an app container of
/// a pod; `None` for anything else.
pub fn kubelet_message_file(spec: &Value) -> Option<PathBuf> {
    let ann = spec.get("annotations")?;
    let text = |k: &str| ann.get(k)?.as_str().filter(|s| !s.is_empty());
    if text(CONTAINER_TYPE)? != "container" {
        return None;
    }
    let (uid, name) = (text(POD_UID)?, text(CONTAINER_NAME)?);
    spec.get("mounts")?
        .as_array()?
        .iter()
        .filter(|m| policy_injector::mount::is_bind_mount(m))
        .filter_map(|m| m.get("source")?.as_str())
        .map(Path::new)
        .find(|source| in_kubelet_layout(source, uid, name))
        .map(Path::to_path_buf)
}

/// `.../pods/<uid>/containers/<name>/<file>`, absolute, with no `..` anywhere.
fn in_kubelet_layout(source: &Path, uid: &str, name: &str) -> bool {
    if !source.is_absolute()
        || source
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return false;
    }
    let tail: Vec<&str> = source
        .components()
        .rev()
        .take(5)
        .filter_map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    matches!(tail.as_slice(), [_file, n, "containers", u, "pods"] if *n == name && *u == uid)
}

/// The line for `cause`, or `None` when the container ended on its own or by a Kill: then
/// the workload's own message (if any) is the whole story.
pub fn message(
    cause: ExitCause,
    max_runtime: Duration,
    idle_timeout: Option<Duration>,
) -> Option<String> {
    let what = match cause {
        ExitCause::Timeout => format!(
            "stopped at the policy's maximum runtime ({})",
            HumanDuration(max_runtime)
        ),
        ExitCause::IdleTimeout => format!(
            "stopped after sitting idle for the policy's idle timeout ({})",
            idle_timeout
                .map(|d| HumanDuration(d).to_string())
                .unwrap_or_else(|| "set".into())
        ),
        ExitCause::Oom => "killed at the sandbox's memory limit (OOM)".into(),
        ExitCause::ProcessLimit => {
            "stopped at the sandbox's process limit (pids ceiling reached)".into()
        }
        ExitCause::Exited | ExitCause::Signaled => return None,
    };
    Some(format!("gvisor-hardened: {what}"))
}

/// Appends `line` to the termination-message file at `path` (the kubelet keeps the last 4 KiB,
/// so the runtime's line survives whatever the workload wrote before it). No symlink is
/// followed and only a regular file is written; opening never blocks (a FIFO put there is
/// refused, not waited on).
pub fn append(path: &Path, line: &str) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let sep = if file.metadata()?.len() > 0 { "\n" } else { "" };
    file.write_all(format!("{sep}{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SOURCE: &str = "/var/lib/kubelet/pods/0d1e-uid/containers/app/5f3a9c1e";

    fn pod_spec(source: &str) -> Value {
        json!({
            "annotations": {
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.sandbox-uid": "0d1e-uid",
                "io.kubernetes.cri.container-name": "app",
            },
            "mounts": [
                {"destination": "/etc/hosts", "type": "bind", "source": "/var/lib/kubelet/pods/0d1e-uid/etc-hosts"},
                {"destination": "/dev/termination-log", "type": "bind", "source": source},
            ]
        })
    }

    #[test]
    fn the_kubelet_termination_log_of_an_app_container_is_found() {
        assert_eq!(
            kubelet_message_file(&pod_spec(SOURCE)),
            Some(PathBuf::from(SOURCE))
        );
        // A custom terminationMessagePath is found by its source too.
        let mut spec = pod_spec(SOURCE);
        spec["mounts"][1]["destination"] = json!("/tmp/why");
        assert_eq!(kubelet_message_file(&spec), Some(PathBuf::from(SOURCE)));
    }

    #[test]
    fn files_outside_the_kubelet_layout_of_this_pod_and_container_are_never_chosen() {
        for source in [
            "/etc/shadow",
            "/var/lib/kubelet/pods/other-uid/containers/app/5f3a9c1e",
            "/var/lib/kubelet/pods/0d1e-uid/containers/sidecar/5f3a9c1e",
            "/var/lib/kubelet/pods/0d1e-uid/containers/app/../../../../../etc/shadow",
            "/var/lib/kubelet/pods/0d1e-uid/containers/app",
            "pods/0d1e-uid/containers/app/5f3a9c1e",
        ] {
            assert_eq!(kubelet_message_file(&pod_spec(source)), None, "{source}");
        }
    }

    #[test]
    fn only_app_containers_of_a_pod_have_one() {
        let mut sandbox = pod_spec(SOURCE);
        sandbox["annotations"]["io.kubernetes.cri.container-type"] = json!("sandbox");
        assert_eq!(kubelet_message_file(&sandbox), None);
        let mut plain = pod_spec(SOURCE);
        plain["annotations"] = json!({});
        assert_eq!(kubelet_message_file(&plain), None);
        let mut not_bind = pod_spec(SOURCE);
        not_bind["mounts"][1]["type"] = json!("tmpfs");
        assert_eq!(kubelet_message_file(&not_bind), None);
    }

    #[test]
    fn a_bind_is_a_bind_by_its_options_too_as_everywhere_else() {
        let mut untyped = pod_spec(SOURCE);
        untyped["mounts"][1] =
            json!({"destination": "/dev/termination-log", "source": SOURCE, "options": ["rbind"]});
        assert_eq!(kubelet_message_file(&untyped), Some(PathBuf::from(SOURCE)));
    }

    #[test]
    fn enforced_ends_have_a_message_and_the_workloads_own_ends_do_not() {
        let five = Duration::from_secs(5);
        assert_eq!(
            message(ExitCause::Timeout, five, None).as_deref(),
            Some("gvisor-hardened: stopped at the policy's maximum runtime (5s)")
        );
        assert_eq!(
            message(ExitCause::IdleTimeout, five, Some(Duration::from_secs(600))).as_deref(),
            Some("gvisor-hardened: stopped after sitting idle for the policy's idle timeout (10m)")
        );
        assert!(message(ExitCause::Oom, five, None)
            .unwrap()
            .contains("memory limit"));
        assert!(message(ExitCause::ProcessLimit, five, None)
            .unwrap()
            .contains("process limit"));
        assert_eq!(message(ExitCause::Exited, five, None), None);
        assert_eq!(message(ExitCause::Signaled, five, None), None);
    }

    #[test]
    fn the_line_is_appended_after_what_the_workload_wrote() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        append(&empty, "gvisor-hardened: x").unwrap();
        assert_eq!(
            std::fs::read_to_string(&empty).unwrap(),
            "gvisor-hardened: x\n"
        );
        let written = dir.path().join("written");
        std::fs::write(&written, "disk full").unwrap();
        append(&written, "gvisor-hardened: x").unwrap();
        assert_eq!(
            std::fs::read_to_string(&written).unwrap(),
            "disk full\ngvisor-hardened: x\n"
        );
    }

    #[test]
    fn symlinks_fifos_and_missing_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, "").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(append(&link, "x").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(append(&fifo, "x").is_err());
        assert!(append(&dir.path().join("missing"), "x").is_err());
    }
}
