//! The hardening of a bundle before any sandbox exists, shared by every front end (the shim's
//! Create, `runsc-hardened create`): load the policy, read `config.json`, harden it, write the
//! hardened spec (the original kept beside it), configure runsc as the policy demands, and audit
//! the decision. Nothing on the host changes but the bundle's files and the audit log; what
//! comes after (mounts, `runsc create`) is the caller's.
//!
//! Two steps, because a caller may need the spec's annotations between them (the shim finds the
//! pod a container joins, and with it the namespaces it may share): [`Inputs::read`], then
//! [`Inputs::harden`]. A failure in either is audited (`create-failed`, `create-rejected`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use policy_injector::{
    harden_owned, Context, EgressPlan, EngineContext, Lifetime, Mode, RunscFlags,
};
use serde_json::Value;

use crate::audit::{AuditEvent, AuditLog, AuditRecord, PodRef, PolicyRef, Subject, Trail};
use crate::bundle::{self, BundleState, BUNDLE_STATE, CONFIG, ORIGINAL_CONFIG};
use crate::host_tree;
use crate::policy_source::{self, sha256_hex, LoadedPolicy};
use crate::runtime::{RuntimeFactory, SandboxRuntime};
use crate::workspace::{self, StageRequest};

pub const CRI_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

/// Why a bundle could not be prepared: each step's own error, for the front end to map (the
/// shim onto a ttrpc code in `crate::error`, runsc-hardened onto the engine's message).
#[derive(Debug, thiserror::Error)]
pub enum PrepareError {
    #[error(transparent)]
    Policy(#[from] crate::policy_source::PolicyLoadError),
    #[error(transparent)]
    Bundle(#[from] bundle::BundleError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    /// The bind sources could not be scanned as the policy's host-path rules need.
    #[error("invalid request: {0}")]
    HostTree(String),
    #[error(transparent)]
    RunscConfig(#[from] crate::runtime::RunscConfigError),
    #[error(transparent)]
    Workspace(#[from] workspace::WorkspaceError),
    /// The policy refuses the spec (or the spec is malformed); the message names the rule.
    #[error(transparent)]
    Rejected(#[from] policy_injector::HardenError),
    #[error("serialising the hardened spec: {0}")]
    Serialise(String),
    /// Egress is on and the forwarder binary the policy names cannot be used.
    #[error(transparent)]
    Forwarder(#[from] crate::egress::install::ForwarderUnusable),
}

pub type Result<T, E = PrepareError> = std::result::Result<T, E>;

/// Who asks and where: what the bundle alone does not say.
pub struct Request<'a> {
    pub id: &'a str,
    /// containerd's namespace (`default`, `k8s.io`), or the engine's name for runsc-hardened.
    pub namespace: &'a str,
    pub bundle: &'a Path,
    /// A policy file named by the caller (CRI `ConfigPath`, `--policy`); else `node_policy` if it
    /// exists; else the embedded default.
    pub config_path: Option<&'a str>,
    pub node_policy: &'a Path,
}

/// The policy and the spec, read and checked; nothing written yet.
pub struct Inputs {
    pub id: String,
    pub namespace: String,
    pub bundle: PathBuf,
    pub policy: LoadedPolicy,
    /// The spec's string annotations.
    pub annotations: BTreeMap<String, String>,
    pub subject: Subject,
    /// This container's records; its final record is signed over all of them when the policy
    /// has `[audit] signing_key`.
    pub audit: Arc<Trail>,
    /// The container engine behind the spec and its own files, as a front end that knows the
    /// engine checked them (runsc-hardened); `None` for containerd's clients.
    pub engine: Option<EngineContext>,
    original: Vec<u8>,
    spec: Value,
}

/// A hardened bundle, audited, with the runtime configured for it.
pub struct Prepared {
    pub policy: LoadedPolicy,
    pub annotations: BTreeMap<String, String>,
    pub subject: Subject,
    pub audit: Arc<Trail>,
    pub runtime: Arc<dyn SandboxRuntime>,
    pub lifetime: Lifetime,
    pub runsc: RunscFlags,
    /// `linux.cgroupsPath` of the hardened spec.
    pub cgroups_path: String,
    /// The hardened spec as written to `config.json`.
    pub spec: Value,
    /// What egress needs when the policy's allowlist is on for this container.
    pub egress: Option<EgressPlan>,
    /// The platform runsc runs the sandbox on, as the hardening sized the pids limit for it:
    /// an update is sized the same way.
    pub platform: Option<String>,
    /// What the hardening changed, in one line (enforce mode; also in the hardened spec's
    /// `gvisor-hardened.dev/decisions` annotation).
    pub decisions_summary: Option<String>,
}

impl Prepared {
    /// The hardened spec's memory limit: what gVisor sizes the guest's memory by at boot.
    pub fn memory_limit(&self) -> Option<i64> {
        self.spec
            .pointer("/linux/resources/memory/limit")
            .and_then(Value::as_i64)
    }
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
        policy: policy.audit_ref(),
    }
}

/// A Create that fails before the spec could be hardened (unreadable policy or bundle) is
/// audited too, best effort: the failure is what the caller gets either way. `policy` is the
/// policy that was loaded, if any (it names itself in the record); the log is `log_of`'s.
fn audit_early_failure(
    req: &Request<'_>,
    log_of: &LoadedPolicy,
    policy: Option<&LoadedPolicy>,
    error: &PrepareError,
) {
    let mut subject = subject(req.namespace, req.id, &BTreeMap::new(), log_of);
    if policy.is_none() {
        subject.policy = PolicyRef {
            path: "<not loaded>".into(),
            sha256: String::new(),
            mode: "enforce".into(),
        };
    }
    let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &subject);
    rec.error = Some(error.to_string());
    if let Err(e) = AuditLog::for_policy(&log_of.policy.audit, &log_of.sha256).append(&rec) {
        log::error!("container {}: {e}", req.id);
    }
}

/// The git directories and gitlinks below the binds the policy leaves writable. Which binds
/// those are is the pure rule's decision: a first hardening pass without them answers it (a
/// few tens of microseconds), and only those trees are searched. A spec the policy rejects
/// searches nothing: the real pass rejects it again.
fn find_git(
    spec: &Value,
    policy: &policy_injector::Policy,
    ctx: &Context,
) -> std::result::Result<workspace::Found, workspace::WorkspaceError> {
    if policy.mode != Mode::Enforce || !policy.mounts.workspace.git {
        return Ok(Default::default());
    }
    let Ok(first) = policy_injector::harden(spec, policy, ctx) else {
        return Ok(Default::default());
    };
    let sources: Vec<String> = crate::artifacts::writable_binds(&first.spec)
        .into_iter()
        .map(|m| m.source.display().to_string())
        .collect();
    workspace::find(&sources, &policy.mounts.workspace, &ctx.container_id)
}

/// The paths the repositories' configs point at become protect entries of their bind: a
/// read-only bind of each that exists (the pure rule's protect step).
fn protect_references(
    tree: &mut policy_injector::HostTree,
    references: &BTreeMap<String, Vec<String>>,
) {
    for (source, paths) in references {
        let entries = tree.found.entry(source.clone()).or_default();
        for path in paths {
            let Ok(meta) = std::fs::symlink_metadata(Path::new(source).join(path)) else {
                continue;
            };
            let kind = if meta.file_type().is_symlink() {
                policy_injector::EntryKind::Symlink
            } else if meta.is_dir() {
                policy_injector::EntryKind::Dir
            } else if meta.is_file() {
                policy_injector::EntryKind::File
            } else {
                policy_injector::EntryKind::Other
            };
            if !entries
                .iter()
                .any(|e| e.path == *path && e.list == policy_injector::TreeList::Protect)
            {
                entries.push(policy_injector::TreeEntry {
                    path: path.clone(),
                    kind,
                    list: policy_injector::TreeList::Protect,
                });
            }
        }
    }
    tree.found.retain(|_, v| !v.is_empty());
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
        let is_bind = policy_injector::is_bind_mount(m);
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

impl Inputs {
    /// Loads the policy and reads the spec.
    pub fn read(req: &Request<'_>) -> Result<Inputs> {
        let policy = match policy_source::load(req.config_path, req.node_policy) {
            Ok(policy) => policy,
            Err(e) => {
                // The policy names the audit log; without a policy, the default log gets it.
                let e = PrepareError::from(e);
                audit_early_failure(req, &policy_source::embedded(), None, &e);
                return Err(e);
            }
        };
        crate::log_level::raise_level(crate::log_level::policy_level(&policy.policy));
        if policy.policy.mode == Mode::Audit {
            log::warn!(
                "container {}: policy {} is in audit mode: NO hardening is applied, the spec runs as given",
                req.id,
                policy.source.display_path()
            );
        }
        let (original, spec) = match bundle::read_spec(req.bundle) {
            Ok(read) => read,
            Err(e) => {
                let e = PrepareError::from(e);
                audit_early_failure(req, &policy, Some(&policy), &e);
                return Err(e);
            }
        };
        let annotations = bundle::annotations(&spec);
        let subject = subject(req.namespace, req.id, &annotations, &policy);
        // The signing key is read now: a key the policy names but that cannot be used fails the
        // Create before anything happened.
        let audit = match Trail::for_policy(&policy.policy.audit, &policy.sha256, &subject) {
            Ok(trail) => Arc::new(trail),
            Err(e) => {
                let e = PrepareError::from(e);
                audit_early_failure(req, &policy, Some(&policy), &e);
                return Err(e);
            }
        };
        Ok(Inputs {
            id: req.id.to_string(),
            namespace: req.namespace.to_string(),
            bundle: req.bundle.to_path_buf(),
            subject,
            audit,
            annotations,
            policy,
            engine: None,
            original,
            spec,
        })
    }

    /// A pod's later container joins a sandbox runsc knows by another id than the pod's (a
    /// claimed warm sandbox): runsc finds the sandbox by this annotation. The audit subject
    /// keeps the pod's own sandbox id.
    pub fn join_runsc_sandbox(&mut self, runsc_id: &str) {
        if let Some(ann) = self
            .spec
            .get_mut("annotations")
            .and_then(serde_json::Value::as_object_mut)
        {
            ann.insert(CRI_SANDBOX_ID.to_string(), runsc_id.into());
        }
    }

    /// The spec as read, for a front end that inspects it before hardening (engine detection).
    pub fn spec(&self) -> &Value {
        &self.spec
    }

    /// Records a create that failed before anything was written (`create-failed`, in the
    /// sandbox's trail) and returns its error; the audit's own failure, if it fails, instead.
    async fn failed(&self, e: impl Into<PrepareError>) -> PrepareError {
        let e = e.into();
        let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &self.subject);
        rec.error = Some(e.to_string());
        match self.audit.append_queued(&rec).await {
            Ok(_) => e,
            Err(audit) => audit.into(),
        }
    }

    /// The hardened spec in place of config.json (the original beside it), the runtime
    /// configured, the `create` record, and the bundle state a cleanup after a crash needs.
    async fn write_bundle(
        &self,
        hardened: &policy_injector::Hardened,
        cgroups_path: &str,
        runtimes: &dyn RuntimeFactory,
    ) -> Result<Arc<dyn SandboxRuntime>> {
        // The hardened spec replaces config.json; the original stays beside it.
        let final_bytes = serde_json::to_vec_pretty(&hardened.spec)
            .map_err(|e| PrepareError::Serialise(e.to_string()))?;
        bundle::write(&self.bundle, ORIGINAL_CONFIG, &self.original)?;
        bundle::write(&self.bundle, CONFIG, &final_bytes)?;
        let runtime = runtimes
            .runtime(
                &self.policy.policy,
                &hardened.runsc,
                &self.namespace,
                &self.bundle,
            )
            .await?;
        let global_args = runtime.global_args();
        let config_sha256 = sha256_hex(&final_bytes);
        let mut rec = AuditRecord::new(AuditEvent::Create, &self.subject);
        rec.decisions = Some(&hardened.decisions);
        rec.config_sha256 = Some(&config_sha256);
        rec.runsc_args = Some(&global_args);
        self.audit.append_queued(&rec).await?;
        let state = BundleState {
            runsc_binary: self.policy.policy.runsc.path.clone(),
            runsc_root: crate::runtime::runsc::root_for(&self.policy.policy, &self.namespace),
            audit_path: self.audit.log().path().to_path_buf(),
            cgroups_path: cgroups_path.to_string(),
            subject: self.subject.clone(),
        };
        let state = serde_json::to_vec(&state).expect("bundle state serialises");
        bundle::write(&self.bundle, BUNDLE_STATE, &state)?;
        Ok(runtime)
    }

    /// Hardens the spec (the pod's namespace paths given, if it joins one), writes it, configures
    /// the runtime, audits the decision and writes the bundle state a cleanup after a crash needs.
    pub async fn harden(
        mut self,
        pod_namespace_paths: Vec<String>,
        runtimes: &dyn RuntimeFactory,
    ) -> Result<Prepared> {
        let host_tree = match host_tree::scan(&self.spec, &self.policy.policy, &self.bundle) {
            Ok(tree) => tree,
            Err(e) => return Err(self.failed(PrepareError::HostTree(e.to_string())).await),
        };
        let mut ctx = Context {
            container_id: self.id.clone(),
            namespace: self.namespace.clone(),
            pod_namespace_paths,
            resolved_sources: resolve_bind_sources(&self.spec),
            token_sources: crate::token_volumes::token_sources(
                &self.spec,
                &self.policy.policy.mounts,
            ),
            engine: self.engine.clone(),
            host_tree,
            git_tree: Default::default(),
            runsc_platform: None,
        };
        // The pids limit depends on the platform runsc will use (systrap needs ~2 host tasks a
        // guest process, ptrace ~9): asked of the runtime before the spec is hardened.
        match runtimes.platform(&self.policy.policy).await {
            Ok(p) => ctx.runsc_platform = p,
            Err(e) => return Err(self.failed(e).await),
        }
        let git = match find_git(&self.spec, &self.policy.policy, &ctx) {
            Ok(mut found) => {
                ctx.git_tree = std::mem::take(&mut found.tree);
                protect_references(&mut ctx.host_tree, &found.references);
                found
            }
            Err(e) => return Err(self.failed(e).await),
        };
        let platform = ctx.runsc_platform.clone();
        let mut hardened =
            match harden_owned(std::mem::take(&mut self.spec), &self.policy.policy, &ctx) {
                Ok(h) => h,
                Err(e) => {
                    let mut rec = AuditRecord::new(AuditEvent::CreateRejected, &self.subject);
                    rec.error = Some(e.to_string());
                    // No sandbox: a record of its own, outside any trail.
                    self.audit.log().append_queued(&rec).await?;
                    log::warn!("container {}: {e}", self.id);
                    return Err(e.into());
                }
            };
        if let Some(plan) = &hardened.egress {
            let path = Path::new(&plan.forwarder.host_path);
            if let Err(e) = crate::egress::install::prepare_forwarder(path) {
                return Err(self.failed(e).await);
            }
        }
        let cgroups_path = hardened
            .spec
            .pointer("/linux/cgroupsPath")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let staged = workspace::stage(&StageRequest {
            container_id: &self.id,
            bundle: &self.bundle,
            policy: &self.policy.policy,
            staged: &hardened.staged_git,
            writable: crate::artifacts::writable_binds(&hardened.spec)
                .into_iter()
                .map(|m| (m.source, m.destination))
                .collect(),
            host_tree: &ctx.host_tree,
            git: &git,
        });
        if let Err(e) = staged {
            return Err(self.failed(e).await);
        }
        let decisions_summary = annotate_decisions(&mut hardened);
        let written = self.write_bundle(&hardened, &cgroups_path, runtimes).await;
        let runtime = match written {
            Ok(runtime) => runtime,
            Err(e) => {
                workspace::finish(&self.bundle, workspace::Ending::Failed);
                let mut rec = AuditRecord::new(AuditEvent::CreateFailed, &self.subject);
                rec.error = Some(e.to_string());
                if let Err(audit_err) = self.audit.seal_queued(&rec).await {
                    log::error!("container {}: {audit_err}", self.id);
                }
                return Err(e);
            }
        };
        Ok(Prepared {
            policy: self.policy,
            annotations: self.annotations,
            subject: self.subject,
            audit: self.audit,
            runtime,
            lifetime: hardened.lifetime,
            runsc: hardened.runsc,
            cgroups_path,
            egress: hardened.egress,
            spec: hardened.spec,
            platform,
            decisions_summary,
        })
    }
}

/// What the hardening changed, in one line where a user inspects the container: the hardened
/// spec's annotations, and (the shim) containerd's record of it. Audit mode changed nothing.
fn annotate_decisions(hardened: &mut policy_injector::Hardened) -> Option<String> {
    let summary = (hardened.mode == policy_injector::Mode::Enforce)
        .then(|| policy_injector::decision::summary(&hardened.decisions))?;
    if let Some(spec) = hardened.spec.as_object_mut() {
        let annotations = spec
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(
                policy_injector::annotations::DECISIONS.to_string(),
                Value::String(summary.clone()),
            );
        }
    }
    Some(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

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
