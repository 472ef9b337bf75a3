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
//! to stop (SIGTERM); it does so between boots, never in the middle of one. A filler that
//! finds its key's policy changed (or its pool turned off) drains the key instead (`drain`).

use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::store::{Entry, KeyDir, PoolError, Template};
use super::{drain, memory, spec};
use crate::audit::{AuditEvent, AuditRecord, PoolAudit, Subject, Trail};
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
    /// The policy changed since the key's template was written (or turned its pool off): no
    /// pod claims from this key again, so its warm sandboxes were drained, this many.
    pub drained_own: Option<usize>,
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
    let Some(lock) = super::lock::take_for_filler(kd)? else {
        return Ok(FillReport {
            already_filling: true,
            ..Default::default()
        });
    };
    let (template, policy) = template_and_policy(kd)?;
    if policy.sha256 != template.policy_sha256 {
        // Pods under the policy as it is now compute another key (none, with the pool off).
        let n = drain::drain_locked(kd, &template, reaper).await?;
        return Ok(FillReport {
            drained_own: Some(n),
            ..Default::default()
        });
    }
    let pool = policy.policy.pool.clone();
    let mut report = FillReport {
        drained_stale: drain::drain_stale(kd, &template, &policy, &reaper).await,
        ..Default::default()
    };
    let factory = RunscFactory::new(reaper.clone());
    let (removed, failed) = drain::prune(kd, &factory, &template).await;
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
        drain::remove_pool_cgroups(&id);
        kd.forget(&id);
    }
    booted
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
