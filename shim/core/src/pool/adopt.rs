//! Telling runsc where a claimed sandbox's cgroup is now.
//!
//! runsc records the sandbox's cgroup in the root container's state file when it boots the
//! sandbox, copies that record into every later container's state, and joins it to start each
//! later container's gofer. A claim moves the sandbox into its pod's cgroup
//! (`crate::cgroup::adopt`); unless the record follows, the next `runsc start` fails opening
//! the pool's cgroup, which is gone. So the claim rewrites the record, under runsc's own lock
//! of that container, before the pod's first container is created.

use std::os::fd::AsFd;
use std::path::Path;

use serde_json::Value;

use super::store::PoolError;

/// Replaces every string equal to `from` under the state's sandbox record with `to`; how
/// many it replaced.
fn retarget(state: &mut Value, from: &str, to: &str) -> usize {
    fn walk(v: &mut Value, from: &str, to: &str) -> usize {
        match v {
            Value::String(s) if s == from => {
                *s = to.to_string();
                1
            }
            Value::Array(a) => a.iter_mut().map(|x| walk(x, from, to)).sum(),
            Value::Object(o) => o.values_mut().map(|x| walk(x, from, to)).sum(),
            _ => 0,
        }
    }
    let Some(obj) = state.as_object_mut() else {
        return 0;
    };
    obj.iter_mut()
        .filter(|(k, _)| k.eq_ignore_ascii_case("sandbox"))
        .map(|(_, v)| walk(v, from, to))
        .sum()
}

/// Rewrites the cgroup runsc recorded for the sandbox of root container `id` from `from` (the
/// pool's cgroups path) to `to` (the pod's). Fails when the record holds no such path: runsc
/// would then start the pod's containers in a cgroup that is gone.
pub fn retarget_runsc_cgroup(
    runsc_root: &Path,
    id: &str,
    from: &str,
    to: &str,
) -> Result<(), PoolError> {
    let (state_path, lock_path) = crate::runsc::state_dir::state_and_lock(runsc_root, id, id);
    let fail = |reason: String| PoolError::Adopt {
        key: String::new(),
        id: id.to_string(),
        reason,
    };
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&lock_path)
        .map_err(|e| fail(format!("{}: {e}", lock_path.display())))?;
    rustix::fs::flock(lock.as_fd(), rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| fail(format!("locking {}: {e}", lock_path.display())))?;
    let bytes =
        std::fs::read(&state_path).map_err(|e| fail(format!("{}: {e}", state_path.display())))?;
    let mut state: Value = serde_json::from_slice(&bytes)
        .map_err(|e| fail(format!("{}: {e}", state_path.display())))?;
    if retarget(&mut state, from, to) == 0 {
        return Err(fail(format!(
            "runsc's state {} names no cgroup {from}: this runsc records its sandbox's cgroup in a way the pool does not know",
            state_path.display()
        )));
    }
    // runsc's own mode for the file, kept.
    let mode = std::fs::metadata(&state_path)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
        .unwrap_or(0o640);
    let out = serde_json::to_vec(&state).expect("a JSON value serialises");
    crate::atomic_file::write(
        &state_path,
        &out,
        crate::atomic_file::Options {
            mode,
            durable: false,
        },
    )
    .map_err(|e| fail(format!("writing {}: {e}", state_path.display())))?;
    drop(lock);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_sandbox_record_follows_the_move_and_the_container_spec_is_left_alone() {
        let mut state = json!({
            "id": "pool-1",
            "spec": {"linux": {"cgroupsPath": "/gvisor-hardened-pool/pool-1"}},
            "sandbox": {"cgroup": {"cgroupv1": {"name": "/gvisor-hardened-pool/pool-1", "own": {"memory": true}}}},
        });
        assert_eq!(
            retarget(
                &mut state,
                "/gvisor-hardened-pool/pool-1",
                "/kubepods/pod1/abc"
            ),
            1
        );
        assert_eq!(
            state["sandbox"]["cgroup"]["cgroupv1"]["name"],
            "/kubepods/pod1/abc"
        );
        assert_eq!(
            state["spec"]["linux"]["cgroupsPath"],
            "/gvisor-hardened-pool/pool-1"
        );
    }

    #[test]
    fn a_state_without_the_pool_path_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        let (state, lock) = crate::runsc::state_dir::state_and_lock(dir.path(), "pool-1", "pool-1");
        let original = br#"{"sandbox":{"cgroup":{"cgroupv1":{"name":"/elsewhere"}}}}"#;
        std::fs::write(&state, original).unwrap();
        std::fs::write(&lock, b"").unwrap();
        let err = retarget_runsc_cgroup(dir.path(), "pool-1", "/gvisor-hardened-pool/pool-1", "/p")
            .unwrap_err();
        assert!(err.to_string().contains("names no cgroup"), "{err}");
        assert_eq!(std::fs::read(&state).unwrap(), original);
    }
}
