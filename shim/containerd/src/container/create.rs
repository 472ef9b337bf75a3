//! Create: the hardening pipeline, in a fixed order (style rule 7: check, then act). Steps 1-5
//! are `gvisor_hardened_core::prepare`, shared with runsc-hardened; 6-7 are the shim's.
//!
//! 1. Load the policy, read and parse config.json, find the pod. Nothing changes on the host
//!    yet, except the audit line that records an unusable input.
//! 2. Harden (pure). A rejection is audited and fails the Create.
//! 3. Keep the original spec beside the bundle's config.json, write the hardened one.
//! 4. Configure runsc as the policy demands, or fail closed.
//! 5. Append the create audit line (the audit is part of the contract: failure stops here; a
//!    failure in 3-5 is audited as such), then the bundle state for a cleanup after a crash.
//! 6. Refuse an existing cgroup, mount the rootfs, open the streams, `runsc create`.
//! 7. Watch the sandbox process for its exit, its cgroups for an OOM kill.
//!
//! Any failure in 6-7 undoes what was done (runsc state, cgroups, mounts, our files) before the
//! error is returned.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;

use super::evidence::Evidence;
use super::warm;
use super::{Container, CreateParams, PodRole, PoolClaim};
use crate::env::ShimEnv;
use crate::error::{Result, ShimError};
use crate::process::state::Op;
use crate::process::Process;
use crate::stdio;
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::bundle;
use gvisor_hardened_core::host::{Host, SandboxCgroups};
use gvisor_hardened_core::pool;
use gvisor_hardened_core::prepare::{Inputs, Request, CRI_SANDBOX_ID};
use gvisor_hardened_core::runtime::{CreateCall, ExitWatch, SandboxRuntime};
use gvisor_hardened_core::sandbox::launch::{self, LaunchPlan, LaunchSteps};

const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";

/// The pod sandbox this container must join, when CRI says it is an app container.
fn pod_sandbox_id(ann: &BTreeMap<String, String>, id: &str) -> Option<String> {
    match (
        ann.get(CRI_CONTAINER_TYPE).map(String::as_str),
        ann.get(CRI_SANDBOX_ID),
    ) {
        (Some("container"), Some(sb)) if sb != id => Some(sb.clone()),
        _ => None,
    }
}

/// The pod sandbox container this one joins, when CRI says it is an app container: it must
/// be one this shim serves.
fn pod_sandbox(
    ann: &BTreeMap<String, String>,
    id: &str,
    pod: &HashMap<String, Arc<Container>>,
) -> Result<Option<Arc<Container>>> {
    let Some(sb) = pod_sandbox_id(ann, id) else {
        return Ok(None);
    };
    pod.get(&sb).cloned().map(Some).ok_or_else(|| {
        ShimError::InvalidArgument(format!(
            "container {id} belongs to pod sandbox {sb}, which this shim does not serve"
        ))
    })
}

impl Container {
    pub async fn create(
        env: Arc<ShimEnv>,
        p: CreateParams,
        pod: &HashMap<String, Arc<Container>>,
    ) -> Result<Arc<Container>> {
        // 1. Inputs.
        let mut inputs = Inputs::read(&Request {
            id: &p.id,
            namespace: &env.namespace,
            bundle: &p.bundle,
            config_path: p.options.config_path.as_deref(),
            node_policy: &env.node_policy,
        })?;
        let sandbox = pod_sandbox(&inputs.annotations, &p.id, pod)?;
        let cri_sandbox = sandbox.is_none()
            && inputs
                .annotations
                .get(CRI_CONTAINER_TYPE)
                .map(String::as_str)
                == Some("sandbox");
        if let Some(sb) = &sandbox {
            if sb.pool_claim.is_some() {
                // The pod's sandbox is a claimed warm one: runsc knows it by the pool's id.
                inputs.join_runsc_sandbox(sb.runsc_id());
            }
        }
        let pod_namespace_paths = match sandbox.as_ref().map(|s| &s.pod) {
            Some(PodRole::Sandbox { namespace_paths }) => {
                namespace_paths.get().cloned().unwrap_or_default()
            }
            _ => Vec::new(),
        };
        // 2-5.
        let prepared = inputs
            .harden(pod_namespace_paths, env.runtimes.as_ref())
            .await?;
        let (pool, claimed) = if cri_sandbox {
            warm::choose(&env, &p, &prepared)
        } else {
            (None, None)
        };
        let resources = prepared
            .spec
            .pointer("/linux/resources")
            .cloned()
            .unwrap_or_default();
        let hostname = prepared
            .spec
            .get("hostname")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        let decisions_summary = prepared.decisions_summary.clone();
        let pool_claim = claimed.as_ref().map(|c| PoolClaim {
            key: c.key.clone(),
            entry: c.entry.clone(),
        });
        let container = Arc::new(Container::of_prepared(
            env, p, prepared, sandbox, pool_claim,
        ));

        // 6-7. Side effects on the host, undone on failure.
        let launched = container.launch(claimed, &resources, &hostname).await;
        if let Some(kd) = &pool {
            warm::refill(kd);
        }
        launched?;
        if let Some(summary) = decisions_summary {
            container.note_decisions_in_containerds_record(summary);
        }
        Ok(container)
    }

    /// The container a Create makes of its hardened inputs, before anything runs on the host.
    fn of_prepared(
        env: Arc<ShimEnv>,
        p: CreateParams,
        prepared: gvisor_hardened_core::prepare::Prepared,
        sandbox: Option<Arc<Container>>,
        pool_claim: Option<PoolClaim>,
    ) -> Container {
        let memory_at_create = prepared.memory_limit();
        let evidence = Evidence::new(
            &prepared.policy.policy,
            &prepared.lifetime,
            &prepared.spec,
            sandbox.as_ref(),
        );
        Container {
            env,
            id: p.id.clone(),
            pool_claim,
            bundle: p.bundle.clone(),
            runtime: prepared.runtime,
            cgroups_path: prepared.cgroups_path,
            cgroups: Default::default(),
            sandbox_process: Default::default(),
            lifetime: prepared.lifetime,
            annotations: prepared.annotations,
            platform: prepared.platform,
            memory_at_create,
            subject: prepared.subject,
            audit: prepared.audit,
            policy: prepared.policy,
            pod: match sandbox {
                Some(sb) => PodRole::Member(sb),
                None => PodRole::Sandbox {
                    namespace_paths: Default::default(),
                },
            },
            rootfs: p.rootfs,
            rootfs_mounted: AtomicBool::new(false),
            init: Arc::new(Process::init(p.stdio)),
            execs: Default::default(),
            stopped_for: Default::default(),
            evidence,
            start_lock: Default::default(),
            oom_reported: AtomicBool::new(false),
            killed_all: AtomicBool::new(false),
            lifetime_task: Default::default(),
            network_namespace: gvisor_hardened_core::egress::net::spec_network_namespace(
                &prepared.spec,
            ),
            egress_plan: prepared.egress,
            egress: Default::default(),
            init_ended: Default::default(),
            termination_message:
                gvisor_hardened_core::sandbox::termination_message::kubelet_message_file(
                    &prepared.spec,
                ),
        }
    }

    /// What the hardening changed, where `crictl inspect`, `nerdctl inspect` and `ctr c info`
    /// look: containerd's record (`crate::record`). In the background, after the Create: it
    /// holds up nothing, and a failure costs only that view (the hardened spec in the bundle and
    /// the create record in the audit log say the same).
    fn note_decisions_in_containerds_record(&self, summary: String) {
        let records = self.env.records.clone();
        let id = self.id.clone();
        let original = self
            .bundle
            .join(gvisor_hardened_core::bundle::ORIGINAL_CONFIG);
        tokio::spawn(async move {
            let written = match std::fs::read(&original) {
                Ok(spec) => records.note_decisions(&id, &summary, &spec).await,
                Err(e) => {
                    log::warn!("container {id}: reading {}: {e}", original.display());
                    return;
                }
            };
            if let Err(e) = written {
                log::warn!(
                    "container {id}: writing the hardening's summary to containerd's record: {e}"
                );
            }
        });
    }

    /// The core's launch sequence (`gvisor_hardened_core::sandbox::launch`) with the shim's
    /// steps (`Launch` below), then the container exists for containerd: its exit is watched
    /// and TaskCreate is published.
    async fn launch(
        self: &Arc<Self>,
        claimed: Option<pool::Claimed>,
        resources: &serde_json::Value,
        hostname: &str,
    ) -> Result<()> {
        let steps = Launch {
            c: self,
            claimed: Mutex::new(claimed),
            resources,
            hostname,
            exit: Mutex::new(None),
        };
        let plan = LaunchPlan {
            id: &self.id,
            runsc_id: self.runsc_id(),
            namespace: &self.env.namespace,
            cgroups_path: &self.cgroups_path,
            makes_sandbox: !self.is_member(),
            egress: self.egress_plan.as_ref(),
            idle_timeout: self.lifetime.idle_timeout,
        };
        let pid = launch::launch(&steps, &plan).await?;
        if let Some(exit) = steps.exit.into_inner().unwrap_or_else(|e| e.into_inner()) {
            let me = self.clone();
            tokio::spawn(async move {
                let status = exit.await;
                me.on_exit(&me.init, status).await;
            });
        }
        self.events()
            .create(
                &self.id,
                &self.bundle.display().to_string(),
                task_io(&self.init.stdio),
                pid,
            )
            .await;
        log::info!("container {} created, sandbox pid {pid}", self.id);
        Ok(())
    }

    /// A booted sandbox: its rootfs mounted, its streams open, `runsc create`.
    async fn boot(self: &Arc<Self>) -> Result<u32> {
        if !self.rootfs.is_empty() {
            self.env
                .host
                .mount_rootfs(&self.rootfs, &self.bundle.join("rootfs"))?;
            self.rootfs_mounted.store(true, Ordering::SeqCst);
        }
        self.init.io.bound_by(self.evidence.output.as_ref());
        self.init.io.with_notes();
        self.init.io.log_with(stdio::LogContext {
            container_id: self.id.clone(),
            namespace: self.env.namespace.clone(),
            runtime: self.runtime.clone(),
        });
        let (console, streams) = stdio::for_runsc(
            &self.init.io,
            &self.init.stdio,
            &self.env.console_dir,
            !self.is_member(),
        )?;
        let pid = self
            .runtime
            .create(CreateCall {
                id: &self.id,
                bundle: &self.bundle,
                console_socket: console.as_ref().map(|c| c.path()),
                stdio: streams,
            })
            .await?;
        stdio::take_console(console, &self.init.io, &self.init.stdio).await?;
        Ok(pid)
    }

    /// The sandbox's exit watch (the first container's) or the pod's cgroups (a later one's,
    /// whose exit comes from `runsc wait` once it has started).
    fn watch(self: &Arc<Self>, pid: u32) -> Result<Option<ExitWatch>> {
        match &self.pod {
            PodRole::Member(sandbox) => {
                if let Some(cg) = sandbox.cgroups.get() {
                    let _ = self.cgroups.set(cg.clone());
                }
                Ok(None)
            }
            PodRole::Sandbox { namespace_paths } => {
                let exit = self.watch_sandbox(pid)?;
                let paths = ["net", "ipc", "uts", "pid"]
                    .iter()
                    .map(|ns| format!("/proc/{pid}/ns/{ns}"))
                    .collect();
                let _ = namespace_paths.set(paths);
                Ok(Some(exit))
            }
        }
    }

    /// The first container of a sandbox: its exit is the sandbox process's exit, its cgroups are
    /// the sandbox's.
    fn watch_sandbox(self: &Arc<Self>, pid: u32) -> Result<ExitWatch> {
        let exit = if self.pool_claim.is_some() {
            // A claimed warm sandbox is not our child: its end is seen through its pidfd, its
            // status is not ours to collect. Killed is what ends it (the pod's stop, or the
            // cgroups' OOM or process ceiling, which the exit path tells apart).
            let process = self.sandbox_process.get().cloned().ok_or_else(|| {
                ShimError::Internal(format!("the claimed sandbox of {} has no pidfd", self.id))
            })?;
            Box::pin(async move {
                process.exited().await;
                gvisor_hardened_core::reaper::ExitStatus::killed()
            }) as ExitWatch
        } else {
            // Before the watch: until the reaper has seen its exit, the pid is our child's.
            if let Some(p) = self.runtime.host_process(pid) {
                let _ = self.sandbox_process.set(p);
            }
            self.runtime
                .watch(pid)
                .map_err(|source| ShimError::Reaper {
                    what: format!("the sandbox of {} (pid {pid})", self.id),
                    source,
                })?
        };
        // The counters at create are the baseline: an OOM kill or a pids-limit hit shows up as
        // growth by the time the sandbox exits (runsc keeps its cgroups until delete).
        match self.env.host.sandbox_cgroups(pid) {
            Ok(cg) => {
                match cg.watch_oom() {
                    Ok(ooms) => self.forward_ooms(ooms),
                    Err(e) => log::debug!("container {}: no early OOM notification: {e}", self.id),
                }
                let _ = self.cgroups.set(cg);
            }
            Err(e) => log::warn!(
                "container {}: sandbox cgroups: {e}; OOM and process-limit exits will not be told apart",
                self.id
            ),
        }
        Ok(exit)
    }

    /// TaskOOM as soon as the kernel says so, not only when the exit is classified.
    fn forward_ooms(self: &Arc<Self>, mut ooms: tokio::sync::mpsc::Receiver<()>) {
        let weak: Weak<Container> = Arc::downgrade(self);
        tokio::spawn(async move {
            while ooms.recv().await.is_some() {
                match weak.upgrade() {
                    Some(c) => c.report_oom().await,
                    None => break,
                }
            }
        });
    }

    /// The shim's part of a failed Create's undo, after the core's (runsc, the cgroups, the
    /// credentials): the streams, the rootfs, our files, and the sealed `create-failed` record.
    async fn undo_create(&self, err: &ShimError) {
        self.init.io.close();
        if self.rootfs_mounted.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.env.host.unmount_rootfs(&self.bundle.join("rootfs")) {
                log::error!("container {}: {e}", self.id);
            }
        }
        bundle::release_after_failed_create(&self.bundle, bundle::Files::Shim);
        let mut rec = self.record(AuditEvent::CreateFailed);
        rec.error = Some(err.to_string());
        self.seal_best_effort(&rec).await;
        log::error!("container {}: create failed: {err}", self.id);
    }
}

/// The shim's steps of the core's launch sequence, for one Create.
struct Launch<'a> {
    c: &'a Arc<Container>,
    /// A warm sandbox claimed for this pod, until it is booted as the pod's.
    claimed: Mutex<Option<pool::Claimed>>,
    resources: &'a serde_json::Value,
    hostname: &'a str,
    /// The sandbox's exit, watched from the launch, handed to the exit path once it is done.
    exit: Mutex<Option<ExitWatch>>,
}

#[async_trait]
impl LaunchSteps for Launch<'_> {
    type Error = ShimError;

    fn runtime(&self) -> &dyn SandboxRuntime {
        self.c.runtime.as_ref()
    }

    fn host(&self) -> &dyn Host {
        self.c.env.host.as_ref()
    }

    /// A claimed warm sandbox is adopted and named (nothing booted or mounted); any other is
    /// booted. Either way the init is created.
    async fn boot(&self) -> Result<u32> {
        let pid = match self.take_claim() {
            Some(c) => {
                self.c
                    .boot_claimed(c, self.resources, self.hostname)
                    .await?
            }
            None => self.c.boot().await?,
        };
        self.c.init.set_pid(pid);
        self.c
            .init
            .apply(Op::Create)
            .map_err(|e| self.c.state_error(&self.c.init, e))?;
        Ok(pid)
    }

    fn watch(&self, pid: u32) -> Result<Option<Arc<dyn SandboxCgroups>>> {
        let exit = self.c.watch(pid)?;
        *self.exit.lock().unwrap_or_else(|e| e.into_inner()) = exit;
        Ok(self.c.cgroups.get().cloned())
    }

    /// A claimed warm sandbox, adopted or (refused before the boot) still only claimed.
    async fn kill_leftovers(&self) {
        self.c.release_claim(self.take_claim());
    }

    async fn undo(&self, error: &ShimError) {
        self.c.undo_create(error).await;
    }
}

impl Launch<'_> {
    /// The warm sandbox claimed for this pod, once: the boot adopts it, or an undo releases it.
    fn take_claim(&self) -> Option<pool::Claimed> {
        self.claimed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

fn task_io(s: &stdio::StdioPaths) -> containerd_shim_protos::events::task::TaskIO {
    let mut io = containerd_shim_protos::events::task::TaskIO::new();
    io.stdin = s.stdin.clone();
    io.stdout = s.stdout.clone();
    io.stderr = s.stderr.clone();
    io.terminal = s.terminal;
    io
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_container_of_a_pod_names_its_sandbox() {
        let mut ann = BTreeMap::new();
        ann.insert(CRI_CONTAINER_TYPE.to_string(), "container".to_string());
        ann.insert(CRI_SANDBOX_ID.to_string(), "sb".to_string());
        assert_eq!(pod_sandbox_id(&ann, "c1"), Some("sb".to_string()));
        ann.insert(CRI_CONTAINER_TYPE.to_string(), "sandbox".to_string());
        assert_eq!(pod_sandbox_id(&ann, "sb"), None);
    }
}
