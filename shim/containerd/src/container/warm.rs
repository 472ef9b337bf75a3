//! The warm pool at a pod sandbox's Create: which pool its key names, a warm sandbox claimed
//! from it (or a cold start: a pool that cannot be used never fails a Create, the spec is
//! hardened either way), the claimed sandbox adopted into the pod's cgroups and named, and the
//! pool refilled behind the pod. The pool itself is `gvisor_hardened_core::pool`.

use std::sync::Arc;

use super::{Container, CreateParams};
use crate::env::ShimEnv;
use crate::error::{Result, ShimError};
use gvisor_hardened_core::audit::{AuditEvent, PoolAudit};
use gvisor_hardened_core::pool;
use gvisor_hardened_core::prepare::Prepared;

/// A pod sandbox under a pooled policy takes a warm sandbox when one is ready; under a policy
/// whose pool is off, the pools it left are drained. The pool (to refill after the launch)
/// and the claimed sandbox, if any.
pub(super) fn choose(
    env: &ShimEnv,
    p: &CreateParams,
    prepared: &Prepared,
) -> (Option<pool::KeyDir>, Option<pool::Claimed>) {
    if !prepared.policy.policy.pool.enabled() {
        drain_pools_turned_off(env, p, prepared);
        return (None, None);
    }
    let pool = pool_of(env, p, prepared);
    let claimed = pool.as_ref().and_then(|kd| match pool::claim(kd) {
        Ok(c) => c,
        Err(e) => {
            log::warn!("container {}: {e}; booting a sandbox instead", p.id);
            None
        }
    });
    (pool, claimed)
}

/// Whether claimed from or not: the pool is refilled (or filled the first time) behind this
/// pod, by a filler of its own.
pub(super) fn refill(kd: &pool::KeyDir) {
    match std::env::current_exe() {
        Ok(exe) => {
            if let Err(e) = pool::start_filler(&exe, kd) {
                log::warn!("pool {}: cannot start its filler: {e}", kd.key);
            }
        }
        Err(e) => log::warn!("pool {}: cannot find the shim binary: {e}", kd.key),
    }
}

impl Container {
    /// A pod sandbox that claimed a warm sandbox: nothing is booted or mounted (the pause
    /// image's rootfs is not used; the warm sandbox's root process holds the sandbox open as the
    /// pause process would). The sandbox moves into the pod's cgroups, with the pod's limits,
    /// before the pod's first container can be created in it.
    pub(super) async fn boot_claimed(
        self: &Arc<Self>,
        claimed: pool::Claimed,
        resources: &serde_json::Value,
        hostname: &str,
    ) -> Result<u32> {
        let pid = claimed.entry.pid as u32;
        let _ = self.sandbox_process.set(Arc::new(claimed.process));
        // First: from here on a shim that dies leaves a sandbox only this record names.
        pool::claim::ClaimRecord {
            runsc_id: claimed.entry.id.clone(),
            key_dir: claimed.key.dir.clone(),
        }
        .write(&self.bundle)
        .map_err(|e| ShimError::Internal(format!("container {}: {e}", self.id)))?;
        self.env
            .host
            .adopt_cgroups(pid, &self.cgroups_path, &self.id, resources)?;
        pool::adopt::retarget_runsc_cgroup(
            &claimed.key.runsc_root(),
            &claimed.entry.id,
            &pool::spec::pool_cgroups_path(&claimed.entry.id),
            &self.cgroups_path,
        )
        .map_err(|e| ShimError::Internal(format!("container {}: {e}", self.id)))?;
        self.name_claimed_sandbox(hostname).await?;
        let mut rec = self.record(AuditEvent::PoolSandboxClaimed);
        rec.pid = Some(pid);
        rec.pool = Some(PoolAudit {
            key: &claimed.key.key,
            sandbox: &claimed.entry.id,
            boot_record: Some(&claimed.entry.boot_record),
        });
        self.audit.append_queued(&rec).await?;
        Ok(pid)
    }

    /// A claimed warm sandbox is not our child: after a failed Create it is killed even if
    /// runsc could not delete it (before its cgroups are removed), and never offered again.
    /// `unadopted`: the claim when the launch failed before the sandbox was adopted.
    pub(super) fn release_claim(&self, unadopted: Option<pool::Claimed>) {
        let Some(claim) = &self.pool_claim else {
            return;
        };
        if let Some(c) = unadopted {
            let _ = c.process.signal(libc::SIGKILL);
        }
        if let Some(p) = self.sandbox_process.get() {
            let _ = p.signal(libc::SIGKILL);
        }
        claim.key.forget(&claim.entry.id);
    }

    /// Gives the claimed sandbox its pod's hostname. gVisor has one hostname per sandbox, set
    /// from the spec that booted it, and the pool's template has none: the holder sets it,
    /// exec'd in the sandbox's root container with CAP_SYS_ADMIN and nothing else, before any
    /// of the pod's code runs in it.
    async fn name_claimed_sandbox(&self, hostname: &str) -> Result<()> {
        let process = serde_json::json!({
            "args": [pool::spec::HOLD_PATH, "--hostname", hostname],
            "env": ["PATH=/"],
            "cwd": "/",
            "user": {"uid": 0, "gid": 0},
            "capabilities": {
                "bounding": ["CAP_SYS_ADMIN"],
                "effective": ["CAP_SYS_ADMIN"],
                "permitted": ["CAP_SYS_ADMIN"],
            },
            "noNewPrivileges": true,
        });
        // What the holder or runsc says on failure ends up in the error: a file in the bundle,
        // not a pipe, so nothing waits on a writer the sandbox might keep open.
        let said_path = self.bundle.join("pool-hostname.out");
        let said_err = |e: std::io::Error| {
            ShimError::Internal(format!(
                "container {}: {}: {e}",
                self.id,
                said_path.display()
            ))
        };
        let said = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&said_path)
            .map_err(said_err)?;
        let said_too = said.try_clone().map_err(said_err)?;
        let started = self
            .runtime
            .exec(gvisor_hardened_core::runtime::ExecCall {
                id: self.runsc_id(),
                exec_id: "gvh-pool-hostname",
                bundle: &self.bundle,
                process: &process,
                console_socket: None,
                stdio: gvisor_hardened_core::runtime::RunscStdio {
                    stdin: None,
                    stdout: Some(said.into()),
                    stderr: Some(said_too.into()),
                },
            })
            .await;
        let started = match started {
            Ok(s) => s,
            Err(e) => {
                let _ = std::fs::remove_file(&said_path);
                return Err(e.into());
            }
        };
        let exit = self
            .runtime
            .watch(started.pid)
            .map_err(|source| ShimError::Reaper {
                what: format!("setting the hostname of {} (pid {})", self.id, started.pid),
                source,
            })?
            .await;
        let output = std::fs::read(&said_path).unwrap_or_default();
        let _ = std::fs::remove_file(&said_path);
        if exit.containerd_code() != 0 {
            let output = String::from_utf8_lossy(&output[..output.len().min(2048)]);
            return Err(ShimError::Internal(format!(
                "container {}: setting the claimed sandbox's hostname to {hostname:?} failed ({exit:?}): {}",
                self.id,
                output.trim()
            )));
        }
        Ok(())
    }
}

/// The pool of this pod sandbox's key, its template written for the filler; `None` (a cold
/// start) when it cannot be set up.
/// A pod sandbox under a policy with its pool off: warm sandboxes booted for this policy
/// source while its pool was on are handed to a filler each, which drains them (their policy
/// changed), so turning a pool off gives its memory back with the next pod. Nothing is read
/// but a missing directory when there never was a pool.
fn drain_pools_turned_off(env: &ShimEnv, p: &CreateParams, prepared: &Prepared) {
    let namespace_dir =
        pool::store::namespace_dir(&prepared.policy.policy.runsc.root, &env.namespace);
    let stale = pool::drain::warm_keys_of_source(
        &namespace_dir,
        &env.namespace,
        p.options.config_path.as_deref(),
        &env.node_policy,
    );
    if stale.is_empty() {
        return;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            log::warn!("pool: cannot find the shim binary to drain a pool turned off: {e}");
            return;
        }
    };
    for kd in stale {
        log::info!(
            "container {}: the pool of key {} is off under this policy; draining it",
            p.id,
            kd.key
        );
        if let Err(e) = pool::start_filler(&exe, &kd) {
            log::warn!("pool {}: cannot start its drain: {e}", kd.key);
        }
    }
}

fn pool_of(env: &ShimEnv, p: &CreateParams, prepared: &Prepared) -> Option<pool::KeyDir> {
    let hold = std::path::Path::new(policy_injector::egress::DEFAULT_FORWARDER);
    let ready = gvisor_hardened_core::egress::install::ensure_embedded_at(hold)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let runsc = &prepared.policy.policy.runsc.path;
            let runsc_binary = pool::fill::resolve_binary(runsc)
                .ok_or_else(|| format!("runsc {runsc:?} is not in PATH"))?;
            let global_args = prepared.runtime.global_args();
            let inputs = pool::fill::TemplateInputs {
                namespace: &env.namespace,
                config_path: p.options.config_path.as_deref(),
                node_policy: &env.node_policy,
                policy: &prepared.policy,
                runsc_binary: &runsc_binary,
                runsc: &prepared.runsc,
                global_args: &global_args,
                hold_binary: hold,
                hardened_spec: &prepared.spec,
            };
            let (kd, template) = inputs.template()?;
            kd.create().map_err(|e| e.to_string())?;
            kd.write_template(&template).map_err(|e| e.to_string())?;
            Ok(kd)
        });
    match ready {
        Ok(kd) => Some(kd),
        Err(e) => {
            log::warn!(
                "container {}: warm pool unusable: {e}; booting a sandbox",
                p.id
            );
            None
        }
    }
}
