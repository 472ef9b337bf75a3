//! Draining warm sandboxes: a key that no pod can claim from any more (its policy changed or
//! turned the pool off, its runsc was replaced), or every key (`pool-drain`: an operator
//! turning the pool off, a node drained, a test's end). Deleting runs through the template's
//! runsc with only the flags a delete needs, so it works after the policy changed or went.

use std::path::Path;

use super::lock::lock_out_filler;
use super::spec;
use super::store::{Entry, KeyDir, PoolError, Template};
use crate::host::{linux::LinuxHost, Host};
use crate::policy_source::LoadedPolicy;
use crate::reaper::Reaper;
use crate::runsc::client::Runsc;
use crate::runsc::feature_cache::Identity;
use crate::runtime::runsc::RunscFactory;

/// Whether `other`'s warm sandboxes can no longer be claimed by anyone: it was booted for the
/// same policy source as `current`, under a policy that has changed since or from a runsc
/// binary that has been replaced. (Another pod shape of the same policy is not stale.)
fn stale_beside(current: &Template, current_policy_sha256: &str, other: &Template) -> bool {
    other.key != current.key
        && other.is_of_source(
            &current.namespace,
            current.config_path.as_deref(),
            &current.node_policy,
        )
        && (other.policy_sha256 != current_policy_sha256
            || other.runsc_binary != current.runsc_binary
            || other.runsc_identity != Identity::of(&other.runsc_binary.display().to_string()))
}

/// Drains the keys beside `kd` that [`stale_beside`] finds: their sandboxes were booted for a
/// policy or runsc that no pod will claim under again. A filler runs whenever a pooled pod
/// starts, so a changed policy's old pool goes with the first pod under the new one. Best
/// effort: the names of the keys drained, and the errors of those that were not.
pub(super) async fn drain_stale(
    kd: &KeyDir,
    template: &Template,
    policy: &LoadedPolicy,
    reaper: &Reaper,
) -> Vec<String> {
    let Some(namespace_dir) = kd.dir.parent() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for other in keys(namespace_dir) {
        let Ok(t) = other.template() else { continue };
        if !stale_beside(template, &policy.sha256, &t) {
            continue;
        }
        match drain(&other, reaper.clone()).await {
            Ok(n) => out.push(format!("drained stale key {} ({n} warm)", other.key)),
            Err(e) => out.push(format!("draining stale key {}: {e}", other.key)),
        }
    }
    out
}

/// The client that deletes the key's warm sandboxes: the template's runsc binary and state
/// root, with no more flags than a delete needs (as containerd's `delete` action runs it). It
/// does not depend on the policy, which may have changed its flags or be gone.
async fn cleanup_client(
    factory: &RunscFactory,
    template: &Template,
    kd: &KeyDir,
) -> Result<Runsc, PoolError> {
    let fail = |reason: String| PoolError::Boot {
        key: kd.key.clone(),
        reason,
    };
    let root = template
        .global_args
        .iter()
        .find_map(|a| a.strip_prefix("--root="))
        .ok_or_else(|| fail("the template names no runsc --root".to_string()))?;
    factory
        .cleanup_client(&template.runsc_binary.display().to_string(), root)
        .await
        .map_err(|e| fail(e.to_string()))
}

/// What `runsc delete` may leave of a warm sandbox's own cgroup.
pub(super) fn remove_pool_cgroups(id: &str) {
    let _ = LinuxHost.remove_cgroups(&spec::pool_cgroups_path(id), id);
}

/// Deletes the warm sandboxes that died (found in `ready/`, or moved to `dead/` by a claimant
/// that found them dead) and those a drain moved there, so a dead one is never claimed and
/// its place is refilled. How many it deleted, and why it could not delete the others (their
/// entries stay in `dead/` for the next filler).
pub(super) async fn prune(
    kd: &KeyDir,
    factory: &RunscFactory,
    template: &Template,
) -> (usize, Vec<String>) {
    let mut dead: Vec<Entry> = kd.entries(&kd.dead());
    for e in kd.entries(&kd.ready()) {
        if !super::claim::alive(&e) && kd.take(&e.id, &kd.dead()).unwrap_or(false) {
            dead.push(e);
        }
    }
    let mut removed = 0;
    let mut failed = Vec::new();
    for e in &dead {
        let deleted = match cleanup_client(factory, template, kd).await {
            Ok(client) => match client.delete(&e.id, true).await {
                Ok(()) => Ok(()),
                Err(err) if err.is_gone() => Ok(()),
                Err(err) => Err(err.to_string()),
            },
            Err(err) => Err(err.to_string()),
        };
        match deleted {
            Ok(()) => {
                remove_pool_cgroups(&e.id);
                kd.forget(&e.id);
                removed += 1;
            }
            Err(err) => failed.push(format!("{}: {err}", e.id)),
        }
    }
    (removed, failed)
}

/// The keys with a template under a namespace's pool directory.
pub fn keys(namespace_dir: &Path) -> Vec<KeyDir> {
    let Ok(rd) = std::fs::read_dir(namespace_dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| KeyDir::at(e.path()))
        .filter(|kd| kd.template_path().is_file())
        .collect()
}

/// Deletes every warm sandbox of `kd` that no pod claimed, and the key's directory if nothing
/// claimed is left in it: a node's pool turned off, or a test's end. Returns how many were
/// deleted.
pub async fn drain(kd: &KeyDir, reaper: Reaper) -> Result<usize, PoolError> {
    // Held until the key is gone: no filler boots while it is drained, or after, into a
    // directory that no longer exists.
    let _lock = lock_out_filler(kd)?;
    // Only the template: a drain deletes what a policy booted that may have changed since,
    // or whose file is gone.
    let template = kd.template()?;
    drain_locked(kd, &template, reaper).await
}

/// [`drain`] by a process that holds the key's fill lock already.
pub(super) async fn drain_locked(
    kd: &KeyDir,
    template: &Template,
    reaper: Reaper,
) -> Result<usize, PoolError> {
    let factory = RunscFactory::new(reaper);
    let mut n = 0;
    for e in kd.entries(&kd.ready()) {
        if kd.take(&e.id, &kd.dead())? {
            n += 1;
        }
    }
    let (removed, failed) = prune(kd, &factory, template).await;
    if !failed.is_empty() {
        return Err(PoolError::Boot {
            key: kd.key.clone(),
            reason: format!("cannot delete warm sandboxes: {}", failed.join("; ")),
        });
    }
    if kd.entries(&kd.claimed()).is_empty() {
        let _ = std::fs::remove_dir_all(&kd.dir);
    }
    Ok(n.max(removed))
}

/// The keys under `namespace_dir` booted for the policy source `(namespace, config_path,
/// node_policy)` that still hold warm sandboxes, ready or dead. A pod sandbox created under
/// that source with its pool turned off hands them to a filler, which finds the policy changed
/// and drains them: the memory they hold is not kept for pods that will never claim it.
pub fn warm_keys_of_source(
    namespace_dir: &Path,
    namespace: &str,
    config_path: Option<&str>,
    node_policy: &Path,
) -> Vec<KeyDir> {
    keys(namespace_dir)
        .into_iter()
        .filter(|kd| {
            kd.template()
                .is_ok_and(|t| t.is_of_source(namespace, config_path, node_policy))
        })
        .filter(|kd| !kd.entries(&kd.ready()).is_empty() || !kd.entries(&kd.dead()).is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template of key `key` for policy `sha`, with runsc at `runsc` as it is now.
    fn template(key: &str, sha: &str, runsc: &Path) -> Template {
        Template {
            key: key.into(),
            namespace: "k8s.io".into(),
            config_path: Some("/etc/gvisor-hardened/tool.toml".into()),
            node_policy: "/etc/gvisor-hardened/policy.toml".into(),
            policy_sha256: sha.into(),
            runsc_binary: runsc.to_path_buf(),
            runsc_identity: Identity::of(&runsc.display().to_string()),
            runsc: crate::runtime::runsc::default_policy_flags(),
            global_args: Vec::new(),
            hold_binary: "/hold".into(),
            spec: serde_json::json!({}),
        }
    }

    #[test]
    fn a_key_of_a_changed_policy_or_a_replaced_runsc_is_stale_and_another_shape_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let runsc = tmp.path().join("runsc");
        std::fs::write(&runsc, b"old runsc").unwrap();
        let current = template("new", "sha-2", &runsc);
        // Booted under the policy before its change.
        assert!(stale_beside(
            &current,
            "sha-2",
            &template("old", "sha-1", &runsc)
        ));
        // Another pod shape under the same policy: its pods still come.
        assert!(!stale_beside(
            &current,
            "sha-2",
            &template("shape", "sha-2", &runsc)
        ));
        // Another policy file's pool is not this one's to judge.
        let mut other_source = template("other", "sha-9", &runsc);
        other_source.config_path = Some("/etc/gvisor-hardened/agent.toml".into());
        assert!(!stale_beside(&current, "sha-2", &other_source));
        assert!(!stale_beside(&current, "sha-2", &current));
        // runsc replaced in place: a key written before is stale, though path and policy match.
        let before = template("before", "sha-2", &runsc);
        std::fs::remove_file(&runsc).unwrap();
        std::fs::write(&runsc, b"new runsc, another file").unwrap();
        assert!(stale_beside(&current, "sha-2", &before));
    }

    #[test]
    fn a_policy_with_its_pool_off_finds_only_its_own_keys_that_hold_warm_sandboxes() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap();
        let runsc = tmp.path().join("runsc");
        std::fs::write(&runsc, b"runsc").unwrap();
        let entry = |id: &str| Entry {
            id: id.into(),
            pid: 1,
            start_time: 1,
            boot_record: "h".into(),
            booted_at: "t".into(),
        };
        let key = |name: &str, config_path: &str, warm: bool| {
            let mut t = template(name, "sha-1", &runsc);
            t.config_path = Some(config_path.into());
            let kd = KeyDir::new(root, "k8s.io", name);
            kd.create().unwrap();
            kd.write_template(&t).unwrap();
            if warm {
                kd.publish(&entry(&format!("{name}-1"))).unwrap();
            }
            kd
        };
        let tool = "/etc/gvisor-hardened/tool.toml";
        let mine = key("mine", tool, true);
        key("emptied", tool, false);
        key("other-class", "/etc/gvisor-hardened/agent.toml", true);
        let ns = crate::pool::store::namespace_dir(root, "k8s.io");
        let node = Path::new("/etc/gvisor-hardened/policy.toml");
        let found = warm_keys_of_source(&ns, "k8s.io", Some(tool), node);
        assert_eq!(
            found.iter().map(|k| k.key.as_str()).collect::<Vec<_>>(),
            [mine.key.as_str()]
        );
        // Another namespace's pods, or the node policy in place of the class's file: not its.
        assert!(warm_keys_of_source(&ns, "default", Some(tool), node).is_empty());
        assert!(warm_keys_of_source(&ns, "k8s.io", None, node).is_empty());
        // Never a pool: nothing to read.
        let none = crate::pool::store::namespace_dir(root, "moby");
        assert!(warm_keys_of_source(&none, "moby", Some(tool), node).is_empty());
    }
}
