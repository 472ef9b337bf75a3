//! Create: the hardening pipeline, in a fixed order (style rule 7: check, then act).
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
use std::sync::{Arc, Weak};

use policy_injector::{harden_owned, Context, Mode};
use serde_json::Value;

use super::{Container, CreateParams, PodRole};
use crate::audit::{AuditEvent, AuditLog, AuditRecord, PodRef, PolicyRef, Subject};
use crate::bundle::{self, BundleState, BUNDLE_STATE, CONFIG, ORIGINAL_CONFIG};
use crate::cgroup::CgroupError;
use crate::env::ShimEnv;
use crate::error::{Result, ShimError};
use crate::policy_source::{self, sha256_hex, LoadedPolicy};
use crate::process::state::Op;
use crate::process::Process;
use crate::runtime::{CreateCall, ExitWatch};
use crate::stdio;

const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
pub const CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

fn subject(
    namespace: &str,
    id: &str,
    ann: &BTreeMap<String, String>,
    policy: &LoadedPolicy,
) -> Subject {
    let get = |k: &str| ann.get(k).cloned();
    let pod = PodRef {
        name: get("io.kubernetes.cri.sandbox-name"),
        namespace: get("io.kubernetes.cri.sandbox-namespace"),
        uid: get("io.kubernetes.cri.sandbox-uid"),
        sandbox_id: get(CRI_SANDBOX_ID),
        container_name: get("io.kubernetes.cri.container-name"),
    };
    Subject {
        namespace: namespace.to_string(),
        container_id: id.to_string(),
        image: get("io.kubernetes.cri.image-name"),
        pod: (pod != PodRef::default()).then_some(pod),
        policy: PolicyRef {
            path: policy.source.display_path(),
            sha256: policy.sha256.clone(),
            mode: format!("{:?}", policy.policy.mode).to_lowercase(),
        },
    }
}

/// A Create that fails before the spec could be hardened (unreadable policy or bundle) is
/// audited too, best effort: the failure is what the caller gets either way. `policy` is the
/// policy that was loaded, if any (it names itself in the record); the log is `log_of`'s.
fn audit_early_failure(
    namespace: &str,
    id: &str,
    log_of: &LoadedPolicy,
    policy: Option<&LoadedPolicy>,
    error: &ShimError,
) {
    let mut subject = subject(namespace, id, &BTreeMap::new(), log_of);
    if policy.is_none() {
        subject.policy = PolicyRef {
            path: "<not loaded>".into(),
            sha256: String::new(),
            mode: "enforce".into(),
        };
    }
    let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &subject);
    rec.error = Some(error.to_string());
    if let Err(e) = AuditLog::new(&log_of.policy.audit.path).append(&rec) {
        log::error!("container {id}: {e}");
    }
}

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

/// Bind sources as the host resolves them (symlinks followed), so the policy's denylist also
/// catches a link that points at a denied path. Sources that do not exist are left out: runsc
/// fails on them anyway.
fn resolve_bind_sources(spec: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Some(mounts) = spec.get("mounts").and_then(Value::as_array) else {
        return out;
    };
    for m in mounts {
        let is_bind = m.get("type").and_then(Value::as_str) == Some("bind")
            || m.get("options")
                .and_then(Value::as_array)
                .is_some_and(|o| o.iter().any(|x| x == "bind" || x == "rbind"));
        let Some(source) = m.get("source").and_then(Value::as_str) else {
            continue;
        };
        if is_bind {
            if let Ok(real) = std::fs::canonicalize(source) {
                out.insert(source.to_string(), real.display().to_string());
            }
        }
    }
    out
}

impl Container {
    pub async fn create(
        env: Arc<ShimEnv>,
        p: CreateParams,
        pod: &HashMap<String, Arc<Container>>,
    ) -> Result<Arc<Container>> {
        // 1. Inputs.
        let policy = match policy_source::load(p.options.config_path.as_deref(), &env.node_policy) {
            Ok(policy) => policy,
            Err(e) => {
                // The policy names the audit log; without a policy, the default log gets it.
                let e = ShimError::from(e);
                audit_early_failure(&env.namespace, &p.id, &policy_source::embedded(), None, &e);
                return Err(e);
            }
        };
        crate::logger::raise_level(crate::logger::policy_level(&policy.policy));
        if policy.policy.mode == Mode::Audit {
            log::warn!(
                "container {}: policy {} is in audit mode: NO hardening is applied, the spec runs as given",
                p.id,
                policy.source.display_path()
            );
        }
        let (original, spec) = match bundle::read_spec(&p.bundle) {
            Ok(read) => read,
            Err(e) => {
                let e = ShimError::from(e);
                audit_early_failure(&env.namespace, &p.id, &policy, Some(&policy), &e);
                return Err(e);
            }
        };
        let ann = bundle::annotations(&spec);
        let subject = subject(&env.namespace, &p.id, &ann, &policy);
        let audit = AuditLog::new(&policy.policy.audit.path);
        let sandbox = match pod_sandbox_id(&ann, &p.id) {
            Some(sb) => Some(pod.get(&sb).cloned().ok_or_else(|| {
                ShimError::InvalidArgument(format!(
                    "container {} belongs to pod sandbox {sb}, which this shim does not serve",
                    p.id
                ))
            })?),
            None => None,
        };
        let ctx = Context {
            container_id: p.id.clone(),
            namespace: env.namespace.clone(),
            pod_namespace_paths: match sandbox.as_ref().map(|s| &s.pod) {
                Some(PodRole::Sandbox { namespace_paths }) => {
                    namespace_paths.get().cloned().unwrap_or_default()
                }
                _ => Vec::new(),
            },
            resolved_sources: resolve_bind_sources(&spec),
        };

        // 2. Harden.
        let hardened = match harden_owned(spec, &policy.policy, &ctx) {
            Ok(h) => h,
            Err(e) => {
                let mut rec = AuditRecord::new(AuditEvent::CreateRejected, &subject);
                rec.error = Some(e.to_string());
                audit.append(&rec)?;
                log::warn!("container {}: {e}", p.id);
                return Err(e.into());
            }
        };

        let cgroups_path = hardened
            .spec
            .pointer("/linux/cgroupsPath")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        // 3-5. Configs written, runsc configured, the decision audited: or no sandbox.
        let prepared = async {
            // The hardened spec replaces config.json; the original stays beside it.
            let final_bytes = serde_json::to_vec_pretty(&hardened.spec)
                .map_err(|e| ShimError::Internal(format!("serialising the hardened spec: {e}")))?;
            bundle::write(&p.bundle, ORIGINAL_CONFIG, &original)?;
            bundle::write(&p.bundle, CONFIG, &final_bytes)?;
            let runtime = env
                .runtimes
                .runtime(&policy.policy, &hardened.runsc, &env.namespace, &p.bundle)
                .await?;
            let global_args = runtime.global_args();
            let config_sha256 = sha256_hex(&final_bytes);
            let mut rec = AuditRecord::new(AuditEvent::Create, &subject);
            rec.decisions = Some(&hardened.decisions);
            rec.config_sha256 = Some(&config_sha256);
            rec.runsc_args = Some(&global_args);
            audit.append(&rec)?;
            // What a cleanup after a crash needs, before the first side effect on the host.
            let state = BundleState {
                runsc_binary: policy.policy.runsc.path.clone(),
                runsc_root: crate::runtime::runsc::root_for(&policy.policy, &env.namespace),
                audit_path: audit.path().to_path_buf(),
                cgroups_path: cgroups_path.clone(),
                subject: subject.clone(),
            };
            let state = serde_json::to_vec(&state).expect("bundle state serialises");
            bundle::write(&p.bundle, BUNDLE_STATE, &state)?;
            Ok::<_, ShimError>(runtime)
        }
        .await;
        let runtime = match prepared {
            Ok(runtime) => runtime,
            Err(e) => {
                let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &subject);
                rec.error = Some(e.to_string());
                if let Err(audit_err) = audit.append(&rec) {
                    log::error!("container {}: {audit_err}", p.id);
                }
                return Err(e);
            }
        };
        let container = Arc::new(Container {
            env: env.clone(),
            id: p.id.clone(),
            bundle: p.bundle.clone(),
            runtime,
            cgroups_path,
            cgroups: Default::default(),
            lifetime: hardened.lifetime,
            annotations: ann,
            subject,
            audit,
            policy,
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
            expired: AtomicBool::new(false),
            start_lock: Default::default(),
            oom_reported: AtomicBool::new(false),
            lifetime_task: Default::default(),
        });

        // 6-7. Side effects on the host, undone on failure.
        match container.launch().await {
            Ok(()) => Ok(container),
            Err(e) => {
                container.undo_create(&e).await;
                Err(e)
            }
        }
    }

    async fn launch(self: &Arc<Self>) -> Result<()> {
        if !self.is_member() {
            self.env
                .host
                .ensure_no_cgroups(&self.cgroups_path, &self.id)?;
        }
        if !self.rootfs.is_empty() {
            self.env
                .host
                .mount_rootfs(&self.rootfs, &self.bundle.join("rootfs"))?;
            self.rootfs_mounted.store(true, Ordering::SeqCst);
        }
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
        self.init.set_pid(pid);
        let exit = match &self.pod {
            PodRole::Member(sandbox) => {
                // The pod's sandbox process and cgroups are the first container's; this one's
                // exit comes from `runsc wait` once it has started.
                if let Some(cg) = sandbox.cgroups.get() {
                    let _ = self.cgroups.set(cg.clone());
                }
                None
            }
            PodRole::Sandbox { namespace_paths } => {
                let exit = self.watch_sandbox(pid)?;
                let paths = ["net", "ipc", "uts", "pid"]
                    .iter()
                    .map(|ns| format!("/proc/{pid}/ns/{ns}"))
                    .collect();
                let _ = namespace_paths.set(paths);
                Some(exit)
            }
        };
        self.init
            .apply(Op::Create)
            .map_err(|e| self.state_error(&self.init, e))?;
        if let Some(exit) = exit {
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

    /// The first container of a sandbox: its exit is the sandbox process's exit, its cgroups are
    /// the sandbox's.
    fn watch_sandbox(self: &Arc<Self>, pid: u32) -> Result<ExitWatch> {
        let exit = self
            .runtime
            .watch(pid)
            .map_err(|source| ShimError::Reaper {
                what: format!("the sandbox of {} (pid {pid})", self.id),
                source,
            })?;
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

    /// Leaves nothing behind after a failed Create: runsc state and sandbox, cgroups, mounts,
    /// our files.
    async fn undo_create(&self, err: &ShimError) {
        if let Err(e) = self.runtime.delete(&self.id).await {
            if !e.is_gone() {
                log::warn!("container {}: cleanup delete: {e}", self.id);
            }
        }
        // A refused pre-existing cgroup is not ours to remove.
        if !matches!(err, ShimError::Cgroup(CgroupError::Exists { .. })) {
            if let Err(e) = self.env.host.remove_cgroups(&self.cgroups_path, &self.id) {
                log::error!("container {}: {e}", self.id);
            }
        }
        self.init.io.close();
        if self.rootfs_mounted.swap(false, Ordering::SeqCst) {
            if let Err(e) = self.env.host.unmount_rootfs(&self.bundle.join("rootfs")) {
                log::error!("container {}: {e}", self.id);
            }
        }
        bundle::remove_shim_files(&self.bundle);
        let mut rec = self.record(AuditEvent::CreateFailed);
        rec.error = Some(err.to_string());
        self.audit_best_effort(&rec);
        log::error!("container {}: create failed: {err}", self.id);
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

    #[test]
    fn bind_sources_are_resolved_through_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        let spec = serde_json::json!({"mounts": [
            {"destination": "/x", "type": "bind", "source": link.to_str().unwrap(), "options": ["rbind"]},
            {"destination": "/y", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/z", "source": "/nonexistent", "options": ["bind"]}
        ]});
        let r = resolve_bind_sources(&spec);
        assert_eq!(
            r.get(link.to_str().unwrap()).map(String::as_str),
            Some("/etc")
        );
        assert_eq!(r.len(), 1);
    }
}
