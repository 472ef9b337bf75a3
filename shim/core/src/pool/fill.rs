//! The filler: boots warm sandboxes for one key until the pool holds `[pool] size` of them,
//! within the memory bound and the refill rate, and deletes the ones that died.
//!
//! It is not a daemon. A shim that creates or claims a pod sandbox of a pooled policy starts
//! one (`containerd-shim-gvisor-hardened-v1 pool-fill <key dir>`, detached); the first to take
//! the key's lock fills, any other exits at once; the filler exits when the pool is full or a
//! bound stops it. So a node with no pooled pods runs nothing.
//!
//! The refill rate holds across fillers (the key's last boot is kept on disk): a filler
//! started by a claim waits out the rest of the interval, holding the lock. A drain asks it
//! to stop (SIGTERM); it does so between boots, never in the middle of one.

use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::store::{Entry, KeyDir, PoolError, Template};
use super::{memory, spec};
use crate::audit::{AuditEvent, AuditRecord, PoolAudit, Subject, Trail};
use crate::host::{linux::LinuxHost, Host};
use crate::policy_source::{self, sha256_hex, LoadedPolicy};
use crate::reaper::Reaper;
use crate::runsc::client::{read_pid_file, ProcessIo, Runsc};
use crate::runsc::feature_cache::Identity;
use crate::runtime::runsc::RunscFactory;

/// What one filler run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FillReport {
    pub booted: usize,
    pub removed_dead: usize,
    pub ready: usize,
    /// Why it stopped short of `size`, if it did.
    pub stopped: Option<String>,
    /// Another filler held the key's lock.
    pub already_filling: bool,
    /// Stale keys beside this one it drained, or failed to (`drain_stale`).
    pub drained_stale: Vec<String>,
}

/// Fills the pool of `kd`. Only one filler per key works at a time (an flock on the key's
/// lock file, released when this process ends).
pub async fn fill(kd: &KeyDir, reaper: Reaper) -> Result<FillReport, PoolError> {
    // Before the lock: once a drain can see this filler holds it, SIGTERM must not kill it in
    // the middle of a boot.
    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| PoolError::Io {
            path: kd.dir.clone(),
            what: "handling SIGTERM",
            source,
        })?;
    let lock = open_lock(kd)?;
    if rustix::fs::flock(
        lock.as_fd(),
        rustix::fs::FlockOperation::NonBlockingLockExclusive,
    )
    .is_err()
    {
        return Ok(FillReport {
            already_filling: true,
            ..Default::default()
        });
    }
    write_holder(&lock);
    let (template, policy) = template_and_policy(kd)?;
    if policy.sha256 != template.policy_sha256 {
        return Err(PoolError::PolicyChanged {
            key: kd.key.clone(),
            want: template.policy_sha256.clone(),
            got: policy.sha256.clone(),
        });
    }
    let pool = policy.policy.pool.clone();
    let mut report = FillReport {
        drained_stale: drain_stale(kd, &template, &policy, &reaper).await,
        ..Default::default()
    };
    let factory = RunscFactory::new(reaper.clone());
    let (removed, failed) = prune(kd, &factory, &template).await;
    report.removed_dead = removed;
    if !failed.is_empty() {
        report.stopped = Some(format!(
            "cannot delete dead sandboxes: {}",
            failed.join("; ")
        ));
        return Ok(report);
    }
    let interval = Duration::from_secs(60) / pool.refill_per_minute.max(1);
    loop {
        let ready = kd.entries(&kd.ready());
        report.ready = ready.len();
        if ready.len() >= pool.size as usize {
            break;
        }
        let held: u64 = ready.iter().map(|e| memory::sandbox_pss(e.pid)).sum();
        // The next sandbox is assumed to cost what the ready ones cost on average (they share
        // runsc's pages, so the first is the dearest).
        let next = if ready.is_empty() {
            0
        } else {
            held / ready.len() as u64
        };
        if held + next > pool.memory_limit_bytes() {
            report.stopped = Some(format!(
                "memory bound: the warm sandboxes hold {held} bytes of PSS, one more would pass {}",
                pool.memory_limit_bytes()
            ));
            break;
        }
        // The refill rate: boots are spread out, so a burst of claims is not answered by a
        // burst of boots competing with the pods that claimed. Each claim starts a filler, so
        // the last boot is the key's, not this process's.
        let wait = kd
            .since_last_boot()
            .map_or(Duration::ZERO, |since| interval.saturating_sub(since));
        tokio::select! {
            biased;
            _ = stop.recv() => {
                report.stopped = Some("asked to stop (SIGTERM)".to_string());
                break;
            }
            () = tokio::time::sleep(wait) => {}
        }
        kd.record_boot()?;
        match boot(kd, &factory, &policy, &template).await {
            Ok(entry) => {
                kd.publish(&entry)?;
                report.booted += 1;
            }
            Err(e) => {
                report.stopped = Some(e.to_string());
                break;
            }
        }
    }
    drop(lock);
    Ok(report)
}

fn open_lock(kd: &KeyDir) -> Result<std::fs::File, PoolError> {
    let path = kd.lock_path();
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|source| PoolError::Io {
            path,
            what: "opening the fill lock",
            source,
        })
}

/// Writes this process's pid and start time into the lock it holds, for a drain to stop it by.
fn write_holder(lock: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    let pid = std::process::id() as i32;
    let Some(start) = gvisor_hardened_proc::host_process::start_time_of(pid) else {
        return;
    };
    let _ = lock
        .set_len(0)
        .and_then(|()| lock.write_all_at(format!("{pid} {start}\n").as_bytes(), 0));
}

/// The pid and start time in a lock file's text.
fn parse_holder(text: &str) -> Option<(i32, u64)> {
    let mut words = text.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// Takes the key's fill lock for a drain. A filler that holds it is asked to stop (SIGTERM
/// through a pidfd, checked against the start time it wrote into the lock file) and waited for:
/// it ends after the boot it is in, if any, and writes its last log line before it exits. A
/// filler that holds the lock but has not written its pid yet is not signalled; the lock is
/// then taken when it ends on its own.
fn lock_out_filler(kd: &KeyDir) -> Result<std::fs::File, PoolError> {
    use gvisor_hardened_proc::host_process::{start_time_of, HostProcess};
    use rustix::fs::{flock, FlockOperation};
    let lock = open_lock(kd)?;
    if flock(lock.as_fd(), FlockOperation::NonBlockingLockExclusive).is_ok() {
        return Ok(lock);
    }
    let holder = std::fs::read_to_string(kd.lock_path())
        .ok()
        .and_then(|t| parse_holder(&t))
        .and_then(|(pid, start)| HostProcess::open_checked(pid, Some(start), start_time_of));
    if let Some(filler) = holder {
        if filler.signal(libc::SIGTERM).is_ok() {
            filler.wait_exited(Duration::from_secs(60));
        }
    }
    flock(lock.as_fd(), FlockOperation::LockExclusive).map_err(|e| PoolError::Io {
        path: kd.lock_path(),
        what: "taking the fill lock",
        source: e.into(),
    })?;
    Ok(lock)
}

/// The key's template and the policy it names, loaded now, with runsc at the template's path.
fn template_and_policy(kd: &KeyDir) -> Result<(Template, LoadedPolicy), PoolError> {
    let template = kd.template()?;
    let policy = policy_source::load(template.config_path.as_deref(), &template.node_policy)
        .map_err(|e| PoolError::Boot {
            key: kd.key.clone(),
            reason: e.to_string(),
        })?;
    let policy = with_template_runsc(policy, &template);
    Ok((template, policy))
}

/// The policy with runsc at the path the claiming shim resolved: a filler or a drain started
/// from another environment (another PATH) must run the same runsc binary.
fn with_template_runsc(mut policy: LoadedPolicy, template: &Template) -> LoadedPolicy {
    policy.policy.runsc.path = template.runsc_binary.display().to_string();
    policy
}

/// `name` as `Command` would find it: itself when it holds a slash, else the first executable
/// of that name in `PATH`.
pub fn resolve_binary(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if name.contains('/') {
        return Some(std::path::PathBuf::from(name));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Whether `other`'s warm sandboxes can no longer be claimed by anyone: it was booted for the
/// same policy source as `current`, under a policy that has changed since or from a runsc
/// binary that has been replaced. (Another pod shape of the same policy is not stale.)
fn stale_beside(current: &Template, current_policy_sha256: &str, other: &Template) -> bool {
    other.key != current.key
        && other.namespace == current.namespace
        && other.config_path == current.config_path
        && other.node_policy == current.node_policy
        && (other.policy_sha256 != current_policy_sha256
            || other.runsc_binary != current.runsc_binary
            || other.runsc_identity != Identity::of(&other.runsc_binary.display().to_string()))
}

/// Drains the keys beside `kd` that [`stale_beside`] finds: their sandboxes were booted for a
/// policy or runsc that no pod will claim under again. A filler runs whenever a pooled pod
/// starts, so a changed policy's old pool goes with the first pod under the new one. Best
/// effort: the names of the keys drained, and the errors of those that were not.
async fn drain_stale(
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

fn new_id() -> String {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    format!("pool-{ms}-{}", std::process::id())
}

async fn client_for(
    factory: &RunscFactory,
    policy: &LoadedPolicy,
    template: &Template,
    kd: &KeyDir,
    bundle: &Path,
) -> Result<Runsc, PoolError> {
    let client = factory
        .client(&policy.policy, &template.runsc, &template.namespace, bundle)
        .await
        .map_err(|e| PoolError::Boot {
            key: kd.key.clone(),
            reason: e.to_string(),
        })?;
    let got = spec::keyed_args(&client.global().to_arg_strings());
    // The runsc binary may have changed under the key (another release supports other
    // flags): a sandbox booted with other flags must not be claimed under this key.
    if got != template.global_args {
        return Err(PoolError::FlagsChanged {
            key: kd.key.clone(),
            want: template.global_args.clone(),
            got,
        });
    }
    Ok(client)
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

/// The subject of a warm sandbox's records: no pod yet, the pool's runsc id.
fn subject(template: &Template, policy: &LoadedPolicy, id: &str) -> Subject {
    Subject {
        namespace: template.namespace.clone(),
        container_id: id.to_string(),
        image: None,
        pod: None,
        policy: policy.audit_ref(),
    }
}

/// Boots one warm sandbox and records it; on failure leaves nothing behind.
async fn boot(
    kd: &KeyDir,
    factory: &RunscFactory,
    policy: &LoadedPolicy,
    template: &Template,
) -> Result<Entry, PoolError> {
    let id = new_id();
    let bundle = kd.bundle(&id);
    let fail = |reason: String| PoolError::Boot {
        key: kd.key.clone(),
        reason: format!("{id}: {reason}"),
    };
    // Before anything exists: a runsc that would boot with other flags boots nothing.
    let client = client_for(factory, policy, template, kd, &bundle).await?;
    let spec = spec::boot_spec(
        &template.spec,
        &id,
        &template.hold_binary.display().to_string(),
    );
    let config = serde_json::to_vec_pretty(&spec).expect("a spec serialises");
    let booted = async {
        std::fs::create_dir_all(bundle.join("rootfs")).map_err(|e| fail(e.to_string()))?;
        crate::bundle::write(&bundle, crate::bundle::CONFIG, &config)
            .map_err(|e| fail(e.to_string()))?;
        let pid_file = bundle.join(crate::bundle::INIT_PID_FILE);
        client
            .create(&id, &bundle, &pid_file, None, ProcessIo::default())
            .await
            .map_err(|e| fail(e.to_string()))?;
        client
            .start(&id, None)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let pid = read_pid_file(&pid_file).map_err(|e| fail(e.to_string()))?;
        let start_time = gvisor_hardened_proc::host_process::start_time_of(pid)
            .ok_or_else(|| fail(format!("sandbox pid {pid} is gone right after its start")))?;
        let subject = subject(template, policy, &id);
        let trail = Trail::for_policy(&policy.policy.audit, &policy.sha256, &subject)
            .map_err(|e| fail(e.to_string()))?;
        let args = client.global().to_arg_strings();
        let config_sha256 = sha256_hex(&config);
        let mut rec = AuditRecord::new(AuditEvent::PoolSandboxBooted, &subject);
        rec.runsc_args = Some(&args);
        rec.config_sha256 = Some(&config_sha256);
        rec.pid = Some(pid as u32);
        rec.pool = Some(PoolAudit {
            key: &kd.key,
            sandbox: &id,
            boot_record: None,
        });
        let hash = trail.append(&rec).map_err(|e| fail(e.to_string()))?;
        Ok::<_, PoolError>(Entry {
            id: id.clone(),
            pid,
            start_time,
            boot_record: hash.to_string(),
            booted_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        })
    }
    .await;
    if booted.is_err() {
        let _ = client.delete(&id, true).await;
        remove_pool_cgroups(&id);
        kd.forget(&id);
    }
    booted
}

/// What `runsc delete` may leave of a warm sandbox's own cgroup.
fn remove_pool_cgroups(id: &str) {
    let _ = LinuxHost.remove_cgroups(&spec::pool_cgroups_path(id), id);
}

/// Deletes the warm sandboxes that died (found in `ready/`, or moved to `dead/` by a claimant
/// that found them dead) and those a drain moved there, so a dead one is never claimed and
/// its place is refilled. How many it deleted, and why it could not delete the others (their
/// entries stay in `dead/` for the next filler).
async fn prune(kd: &KeyDir, factory: &RunscFactory, template: &Template) -> (usize, Vec<String>) {
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
    let factory = RunscFactory::new(reaper);
    let mut n = 0;
    for e in kd.entries(&kd.ready()) {
        if kd.take(&e.id, &kd.dead())? {
            n += 1;
        }
    }
    let (removed, failed) = prune(kd, &factory, &template).await;
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

/// The template of a pod's sandbox: what a filler needs to boot warm sandboxes it can claim.
pub struct TemplateInputs<'a> {
    pub namespace: &'a str,
    pub config_path: Option<&'a str>,
    pub node_policy: &'a Path,
    pub policy: &'a LoadedPolicy,
    /// The runsc binary the shim runs, resolved ([`resolve_binary`]).
    pub runsc_binary: &'a Path,
    pub runsc: &'a policy_injector::RunscFlags,
    pub global_args: &'a [String],
    pub hold_binary: &'a Path,
    pub hardened_spec: &'a Value,
}

impl TemplateInputs<'_> {
    /// The key directory and template, or why this pod cannot be pooled
    /// ([`spec::template`]).
    pub fn template(&self) -> Result<(KeyDir, Template), &'static str> {
        let spec = spec::template(self.hardened_spec)?;
        let global_args = spec::keyed_args(self.global_args);
        let runsc_identity = Identity::of(&self.runsc_binary.display().to_string());
        let key = spec::key(
            &self.runsc_binary.display().to_string(),
            runsc_identity.as_ref(),
            &global_args,
            &self.policy.sha256,
            &spec,
        );
        let kd = KeyDir::new(&self.policy.policy.runsc.root, self.namespace, &key);
        Ok((
            kd,
            Template {
                key,
                namespace: self.namespace.to_string(),
                config_path: self.config_path.map(str::to_string),
                node_policy: self.node_policy.to_path_buf(),
                policy_sha256: self.policy.sha256.clone(),
                runsc_binary: self.runsc_binary.to_path_buf(),
                runsc_identity,
                runsc: self.runsc.clone(),
                global_args,
                hold_binary: self.hold_binary.to_path_buf(),
                spec,
            },
        ))
    }
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
            runsc: policy_injector::RunscFlags {
                network: policy_injector::NetworkMode::None,
                oci_seccomp: true,
                net_raw: false,
                host_uds: "none".into(),
                overlay: None,
                platform: None,
                extra: Default::default(),
            },
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
    fn a_lock_file_names_its_holder_by_pid_and_start_time() {
        assert_eq!(parse_holder("4242 987654\n"), Some((4242, 987654)));
        assert_eq!(parse_holder(""), None);
        assert_eq!(parse_holder("4242"), None);
    }

    #[test]
    fn a_drain_takes_a_free_lock_at_once_and_holds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let kd = KeyDir::new(tmp.path().to_str().unwrap(), "default", "k");
        kd.create().unwrap();
        let held = lock_out_filler(&kd).unwrap();
        let other = open_lock(&kd).unwrap();
        assert!(rustix::fs::flock(
            other.as_fd(),
            rustix::fs::FlockOperation::NonBlockingLockExclusive
        )
        .is_err());
        drop(held);
        assert!(rustix::fs::flock(
            other.as_fd(),
            rustix::fs::FlockOperation::NonBlockingLockExclusive
        )
        .is_ok());
    }
}
