//! Create: the hardening pipeline, in a fixed order (style rule 7: check, then act).
//!
//! 1. Load the policy, read and parse config.json, build the context. No side effects yet.
//! 2. Harden (pure). A rejection is audited and fails the Create; nothing else happened.
//! 3. Keep the original spec beside the bundle's config.json, write the hardened one.
//! 4. Append the create audit line. The audit is part of the contract: failure stops here.
//! 5. Mount the rootfs, open the streams, `runsc create` with the policy's flags.
//! 6. Watch the sandbox process for its exit.
//!
//! Any failure in 5-6 undoes what was done (runsc state, mounts) before the error is returned.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use policy_injector::{harden_owned, Context};
use serde_json::Value;

use super::runsc_runtime::RunscRuntime;
use super::runtime::{CreateCall, SandboxRuntime};
use super::Container;
use crate::audit::{AuditEvent, AuditLog, AuditRecord, PodRef, PolicyRef, Subject};
use crate::cgroup::exit_cause::ExitProbe;
use crate::cgroup::oom::OomWatcher;
use crate::cgroup::SandboxCgroup;
use crate::error::{Result, ShimError};
use crate::options::RuntimeOptions;
use crate::policy_source::{self, sha256_hex, LoadedPolicy};
use crate::process::Process;
use crate::rootfs::{self, RootfsMount};
use crate::service::ShimEnv;
use crate::stdio::{self, ConsoleSocket, StdioPaths};

/// A config.json beyond this size is refused before parsing: no legitimate spec comes close.
pub const MAX_SPEC_BYTES: u64 = 4 << 20;
pub const CONFIG: &str = "config.json";
pub const ORIGINAL_CONFIG: &str = "config.original.json";
pub const INIT_PID_FILE: &str = "init.pid";
const CONSOLE_TIMEOUT: Duration = Duration::from_secs(10);

const CRI_CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
const CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

pub struct CreateParams {
    pub id: String,
    pub bundle: PathBuf,
    pub rootfs: Vec<RootfsMount>,
    pub stdio: StdioPaths,
    pub options: RuntimeOptions,
}

fn bundle_err(bundle: &Path, reason: impl Into<String>) -> ShimError {
    ShimError::Bundle {
        path: bundle.display().to_string(),
        reason: reason.into(),
    }
}

/// Reads config.json: size-capped, UTF-8 JSON object, errors naming line and column.
pub fn read_spec(bundle: &Path) -> Result<(Vec<u8>, Value)> {
    let path = bundle.join(CONFIG);
    let file =
        std::fs::File::open(&path).map_err(|e| bundle_err(bundle, format!("{CONFIG}: {e}")))?;
    let mut bytes = Vec::new();
    file.take(MAX_SPEC_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| bundle_err(bundle, format!("{CONFIG}: {e}")))?;
    if bytes.len() as u64 > MAX_SPEC_BYTES {
        return Err(bundle_err(
            bundle,
            format!("{CONFIG} is larger than {} MiB", MAX_SPEC_BYTES >> 20),
        ));
    }
    let spec: Value = serde_json::from_slice(&bytes)
        .map_err(|e| bundle_err(bundle, format!("{CONFIG} is not valid JSON: {e}")))?;
    if !spec.is_object() {
        return Err(bundle_err(bundle, format!("{CONFIG} is not a JSON object")));
    }
    Ok((bytes, spec))
}

pub fn annotations(spec: &Value) -> BTreeMap<String, String> {
    spec.get("annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

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
    error: &str,
) {
    let ann = BTreeMap::new();
    let mut subject = subject(namespace, id, &ann, log_of);
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

/// What the cleanup action needs if this shim dies: written before the first side effect on
/// the host (runsc state, mounts) so a crash at any later point can be undone.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct BundleState {
    pub runsc_binary: String,
    pub runsc_root: String,
    pub audit_path: PathBuf,
    /// `linux.cgroupsPath` of the hardened spec, to find cgroups a dead shim left behind.
    #[serde(default)]
    pub cgroups_path: String,
    pub subject: Subject,
}

pub const BUNDLE_STATE: &str = "gvisor-hardened.json";

impl Container {
    pub async fn create(
        env: Arc<ShimEnv>,
        p: CreateParams,
        pod: &HashMap<String, Arc<Container>>,
    ) -> Result<Arc<Container>> {
        // 1. Inputs, without side effects (but an audit line if they are unusable).
        let policy = match policy_source::load(p.options.config_path.as_deref(), &env.node_policy) {
            Ok(policy) => policy,
            Err(e) => {
                // The policy names the audit log; without a policy, the default log gets it.
                let fallback = policy_source::embedded();
                audit_early_failure(&env.namespace, &p.id, &fallback, None, &e.to_string());
                return Err(e.into());
            }
        };
        crate::logger::raise_level(crate::logger::policy_level(&policy.policy));
        let (original, spec) = match read_spec(&p.bundle) {
            Ok(read) => read,
            Err(e) => {
                audit_early_failure(
                    &env.namespace,
                    &p.id,
                    &policy,
                    Some(&policy),
                    &e.to_string(),
                );
                return Err(e);
            }
        };
        let ann = annotations(&spec);
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
            pod_namespace_paths: sandbox
                .as_ref()
                .and_then(|s| s.pod_namespace_paths.get().cloned())
                .unwrap_or_default(),
            resolved_sources: resolve_bind_sources(&spec),
            token_sources: crate::token_volumes::token_sources(&spec, &policy.policy.mounts),
        };

        // 2. Harden.
        let hardened = match harden_owned(spec, &policy.policy, &ctx) {
            Ok(h) => h,
            Err(e) => {
                let mut rec = AuditRecord::new(AuditEvent::CreateRejected, &subject);
                rec.error = Some(e.to_string());
                audit.append(&rec)?;
                log::warn!("container {}: {e}", p.id);
                return Err(ShimError::Rejected(e));
            }
        };

        // 3. The hardened spec replaces config.json; the original stays beside it.
        let final_bytes = serde_json::to_vec_pretty(&hardened.spec)
            .map_err(|e| ShimError::Internal(format!("serialising the hardened spec: {e}")))?;
        let write = |name: &str, bytes: &[u8]| {
            stdio::write_file_atomic(&p.bundle.join(name), bytes)
                .map_err(|e| bundle_err(&p.bundle, format!("writing {name}: {e}")))
        };
        write(ORIGINAL_CONFIG, &original)?;
        write(CONFIG, &final_bytes)?;
        let config_sha256 = sha256_hex(&final_bytes);

        let features = env.runsc_features(&policy.policy.runsc.path).await?;
        let runtime = RunscRuntime::new(&policy.policy, &hardened.runsc, &env, &p.bundle, features)
            .map_err(|e| ShimError::Runsc(e.to_string()))?;
        let runtime: Arc<dyn SandboxRuntime> = Arc::new(runtime);
        let global_args = runtime.global_args();

        // 4. The audit line, or no sandbox.
        let mut rec = AuditRecord::new(AuditEvent::Create, &subject);
        rec.decisions = Some(&hardened.decisions);
        rec.config_sha256 = Some(&config_sha256);
        rec.runsc_args = Some(&global_args);
        audit.append(&rec)?;
        let cgroups_path = hardened
            .spec
            .pointer("/linux/cgroupsPath")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let state = BundleState {
            runsc_binary: policy.policy.runsc.path.clone(),
            runsc_root: RunscRuntime::root_for(&policy.policy, &env.namespace),
            audit_path: audit.path().to_path_buf(),
            cgroups_path: cgroups_path.clone(),
            subject: subject.clone(),
        };
        write(
            BUNDLE_STATE,
            &serde_json::to_vec(&state).expect("bundle state serialises"),
        )?;

        let container = Arc::new(Container {
            env: env.clone(),
            id: p.id.clone(),
            bundle: p.bundle.clone(),
            runtime,
            cgroups_path,
            cgroup: Default::default(),
            lifetime: hardened.lifetime,
            annotations: ann,
            subject,
            audit,
            policy,
            pod_sandbox: sandbox.clone(),
            pod_namespace_paths: Default::default(),
            rootfs_mounted: !p.rootfs.is_empty(),
            init: Arc::new(Process::new("", p.stdio.clone(), None)),
            execs: Default::default(),
            timed_out: AtomicBool::new(false),
            start_lock: Default::default(),
            oom_reported: AtomicBool::new(false),
            lifetime_task: Default::default(),
        });

        // 5-6. Side effects on the host, undone on failure.
        match container.clone().launch(&p).await {
            Ok(container) => Ok(container),
            Err(e) => {
                container.undo_create(&e).await;
                Err(e)
            }
        }
    }

    async fn launch(self: Arc<Self>, p: &CreateParams) -> Result<Arc<Container>> {
        if self.pod_sandbox.is_none() {
            self.refuse_existing_cgroup()?;
        }
        let rootfs = self.bundle.join("rootfs");
        rootfs::mount_all(&p.rootfs, &rootfs).map_err(|e| ShimError::Rootfs(e.to_string()))?;
        let console = if p.stdio.terminal {
            Some(ConsoleSocket::new()?)
        } else {
            None
        };
        // A pod's app container gets its streams at start: runsc hands `runsc start`'s own stdio
        // to a subcontainer (and create's to the sandbox's first container).
        let stdio = if p.stdio.terminal || self.pod_sandbox.is_some() {
            stdio::RunscStdio::default()
        } else {
            self.init.io.open_pipes(&p.stdio)?
        };
        let pid_file = self.bundle.join(INIT_PID_FILE);
        self.runtime
            .create(CreateCall {
                id: &self.id,
                bundle: &self.bundle,
                pid_file: &pid_file,
                console_socket: console.as_ref().map(|c| c.path()),
                stdio,
            })
            .await
            .map_err(|e| ShimError::Runsc(format!("runsc create {}: {e}", self.id)))?;
        if let Some(console) = console {
            let master = tokio::task::spawn_blocking(move || console.receive(CONSOLE_TIMEOUT))
                .await
                .map_err(|e| ShimError::Internal(e.to_string()))??;
            self.init.io.attach_console(master, &p.stdio)?;
        }
        // runsc writes the sandbox's pid, also for a pod's later containers.
        let pid = crate::runsc::client::read_pid_file(&pid_file)
            .map_err(|e| ShimError::Runsc(format!("reading runsc's pid file: {e}")))?;
        match &self.pod_sandbox {
            Some(sandbox) => {
                // The pod's sandbox process and cgroups are the first container's; this one's
                // exit comes from `runsc wait` once it has started.
                if let Some(probe) = sandbox.cgroup.get() {
                    let _ = self.cgroup.set(probe.clone());
                }
                self.init.transition(|s| s.created(pid as u32))?;
            }
            None => self.watch_sandbox(pid)?,
        }
        self.events()
            .create(
                &self.id,
                &self.bundle.display().to_string(),
                task_io(&p.stdio),
                pid as u32,
            )
            .await;
        log::info!("container {} created, sandbox pid {pid}", self.id);
        Ok(self)
    }

    /// runsc joins a cgroup that already exists as it is, without applying the spec's limits:
    /// a sandbox must get a fresh cgroup, or it does not start.
    fn refuse_existing_cgroup(&self) -> Result<()> {
        let cg = SandboxCgroup::for_spec(&self.cgroups_path, &self.id)
            .map_err(|e| ShimError::Internal(format!("locating the sandbox's cgroups: {e}")))?;
        match cg.remaining().first() {
            None => Ok(()),
            Some(dir) => Err(ShimError::CgroupExists(dir.display().to_string())),
        }
    }

    /// The first container of a sandbox: its exit is the sandbox process's exit, its cgroups are
    /// the sandbox's, its namespaces are what the pod's later containers join.
    fn watch_sandbox(self: &Arc<Self>, pid: i32) -> Result<()> {
        let exit = self
            .env
            .reaper
            .watch(pid)
            .map_err(|e| ShimError::Internal(format!("watching sandbox pid {pid}: {e}")))?;
        self.init.transition(|s| s.created(pid as u32))?;
        // The counters at create are the baseline: an OOM kill or a pids-limit hit shows up as
        // growth by the time the sandbox exits (runsc keeps its cgroups until delete).
        match SandboxCgroup::of_pid(pid).and_then(ExitProbe::arm) {
            Ok(probe) => {
                match OomWatcher::start(probe.cgroup()) {
                    Ok(mut watcher) => {
                        let weak = Arc::downgrade(self);
                        tokio::spawn(async move {
                            // Ends when the cgroup goes away (runsc delete) or the container does.
                            while let Ok(true) = watcher.next().await {
                                match weak.upgrade() {
                                    Some(c) => c.report_oom().await,
                                    None => break,
                                }
                            }
                        });
                    }
                    Err(e) => log::debug!("container {}: no early OOM notification: {e}", self.id),
                }
                let _ = self.cgroup.set(probe);
            }
            Err(e) => log::warn!(
                "container {}: sandbox cgroups: {e}; OOM and process-limit exits will not be told apart",
                self.id
            ),
        }
        let pod_paths = ["net", "ipc", "uts", "pid"]
            .iter()
            .map(|ns| format!("/proc/{pid}/ns/{ns}"))
            .collect::<Vec<_>>();
        let _ = self.pod_namespace_paths.set(pod_paths);
        let watcher = self.clone();
        tokio::spawn(async move {
            let status = exit.await;
            watcher.on_init_exit(status).await;
        });
        Ok(())
    }

    /// Leaves nothing behind after a failed Create: runsc state, sandbox, mounts.
    async fn undo_create(&self, err: &ShimError) {
        if let Err(e) = self.runtime.delete(&self.id).await {
            log::debug!("container {}: cleanup delete: {e}", self.id);
        }
        // A refused pre-existing cgroup is not ours to remove.
        if !matches!(err, ShimError::CgroupExists(_)) {
            if let Err(e) = self.remove_leftover_cgroups() {
                log::error!("container {}: {e}", self.id);
            }
        }
        self.init.io.close();
        if self.rootfs_mounted {
            if let Err(e) = rootfs::unmount_all(&self.bundle.join("rootfs")) {
                log::error!("container {}: {e}", self.id);
            }
        }
        let mut rec = self.record(AuditEvent::CreateFailed);
        rec.error = Some(err.to_string());
        self.audit_best_effort(&rec);
        log::error!("container {}: create failed: {err}", self.id);
    }
}

fn task_io(s: &StdioPaths) -> containerd_shim_protos::events::task::TaskIO {
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
    fn oversized_config_is_refused_before_parsing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG),
            vec![b' '; (MAX_SPEC_BYTES + 1) as usize],
        )
        .unwrap();
        let err = read_spec(dir.path()).unwrap_err();
        assert!(err.to_string().contains("larger than 4 MiB"), "{err}");
    }

    #[test]
    fn truncated_config_names_line_and_column() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG),
            "{\n  \"ociVersion\": \"1.0.2\",\n  \"process\": {",
        )
        .unwrap();
        let err = read_spec(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains("not valid JSON") && err.contains("line 3"),
            "{err}"
        );
    }

    #[test]
    fn non_utf8_config_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG), b"{\"a\": \"\xff\xfe\"}").unwrap();
        assert!(read_spec(dir.path()).is_err());
    }

    #[test]
    fn config_that_is_not_an_object_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(CONFIG), "[1,2]").unwrap();
        assert!(read_spec(dir.path())
            .unwrap_err()
            .to_string()
            .contains("not a JSON object"));
    }

    #[test]
    fn missing_config_is_a_bundle_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_spec(dir.path()).unwrap_err().to_string();
        assert!(err.contains("config.json"), "{err}");
    }

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
