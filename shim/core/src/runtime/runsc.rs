//! The real [`SandboxRuntime`]: each call is one command of the typed runsc client, and the
//! processes runsc leaves behind are watched through the shim's reaper.
//!
//! Every command of a container gets the same global flags: runsc re-reads its configuration
//! per invocation, and `start` without `--network=none` tries to set up the networking that
//! `create` never asked for. runsc's own messages go to a JSON log in the bundle (`--log`):
//! for create/exec/start its stdio *is* the container's, so the client reads the reason for a
//! failure from that log.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use policy_injector::{NetworkMode, Policy, RunscFlags};
use serde_json::Value;
use tokio::sync::Mutex;

use super::{
    CreateCall, ExecCall, ExecStarted, ExitWatch, KillTarget, RuntimeFactory, SandboxRuntime,
};
use crate::bundle::{self, INIT_PID_FILE, RUNSC_LOG};
use crate::reaper::{ExitStatus, Reaper, ReaperError};
use crate::runsc::client::{read_pid_file, ExecOpts, Runsc, DEFAULT_TIMEOUT};
use crate::runsc::command::WaitTarget;
use crate::runsc::error::RunscError;
use crate::runsc::feature_cache::{self, FeatureCache, Identity};
use crate::runsc::features::Features;
use crate::runsc::flags::{
    ExtraFlag, FlagError, GlobalFlags, HostUds, LogFormat, Network, Overlay, Platform,
};
use crate::runtime::RunscStdio;
use crate::sandbox::host_process::HostProcess;

#[derive(Debug, thiserror::Error)]
pub enum RunscConfigError {
    #[error(
        "policy runsc.platform {0:?} is not a platform this shim knows (ptrace, kvm, systrap)"
    )]
    Platform(String),
    #[error("runsc overlay {0:?} is not one of none, root:memory, all:memory, root:self")]
    Overlay(String),
    #[error("runsc --host-uds={0} is never granted by this shim")]
    HostUds(String),
    #[error(transparent)]
    Flag(#[from] FlagError),
    #[error("{binary}: cannot tell what it supports: {source}")]
    Detect {
        binary: String,
        #[source]
        source: RunscError,
    },
    #[error("{binary} cannot be configured as the policy demands: {source}")]
    Runsc {
        binary: String,
        #[source]
        source: RunscError,
    },
}

/// The global flags the policy and the hardening result ask for (before reconciling them with
/// what the installed runsc supports).
pub fn wanted_flags(
    policy: &Policy,
    flags: &RunscFlags,
    namespace: &str,
    bundle: &Path,
) -> Result<GlobalFlags, RunscConfigError> {
    let mut global = GlobalFlags::new(root_for(policy, namespace));
    global.platform = match flags.platform.as_deref() {
        None | Some("") => None,
        Some(p) => Some(Platform::parse(p).ok_or_else(|| RunscConfigError::Platform(p.into()))?),
    };
    global.network = Some(match flags.network {
        NetworkMode::None => Network::None,
        NetworkMode::Sandbox => Network::Sandbox,
        NetworkMode::Host => Network::Host,
    });
    global.oci_seccomp = flags.oci_seccomp;
    global.net_raw = flags.net_raw;
    global.host_uds = Some(match flags.host_uds.as_str() {
        "none" => HostUds::None,
        // The policy core never asks for more; refuse rather than widen silently.
        other => return Err(RunscConfigError::HostUds(other.into())),
    });
    global.overlay = match flags.overlay.as_deref() {
        None => None,
        Some(o) => Some(Overlay::parse(o).ok_or_else(|| RunscConfigError::Overlay(o.into()))?),
    };
    global.log = Some(bundle.join(RUNSC_LOG));
    global.log_format = Some(LogFormat::Json);
    if policy.runsc.debug {
        global.debug = true;
        let dir =
            Path::new(&policy.runsc.debug_log_dir).join(bundle.file_name().unwrap_or_default());
        // A trailing slash makes runsc write one file per command inside the directory.
        global.debug_log = Some(PathBuf::from(format!("{}/", dir.display())));
    }
    for (name, value) in &flags.extra {
        if name == "directfs" {
            global.directfs = Some(value == "true");
        } else {
            global.extra.push(ExtraFlag::parse(name, value)?);
        }
    }
    Ok(global)
}

/// `<policy runsc.root>/<namespace>`: containers of different namespaces never share state.
pub fn root_for(policy: &Policy, namespace: &str) -> String {
    Path::new(&policy.runsc.root)
        .join(namespace)
        .display()
        .to_string()
}

/// Makes [`RunscRuntime`]s, asking each runsc binary once what it supports.
pub struct RunscFactory {
    reaper: Reaper,
    /// Features per binary path, for this shim's lifetime.
    features: Mutex<HashMap<String, Features>>,
    /// The node's cache of earlier shims' answers, keyed by the binary's identity.
    persisted: FeatureCache,
}

impl RunscFactory {
    pub fn new(reaper: Reaper) -> Self {
        RunscFactory {
            reaper,
            features: Mutex::new(HashMap::new()),
            persisted: FeatureCache::new(feature_cache::DEFAULT_DIR),
        }
    }

    /// What `binary` supports: from this shim's memory, else from the node's cache, else by
    /// asking runsc (`runsc flags`, `runsc help`).
    pub async fn features(&self, binary: &str) -> Result<Features, RunscConfigError> {
        let mut cache = self.features.lock().await;
        if let Some(f) = cache.get(binary) {
            return Ok(f.clone());
        }
        let identity = Identity::of(binary);
        if let Some(f) = identity.as_ref().and_then(|id| self.persisted.load(id)) {
            cache.insert(binary.to_string(), f.clone());
            return Ok(f);
        }
        let f = Runsc::detect(Path::new(binary), &self.reaper, DEFAULT_TIMEOUT)
            .await
            .map_err(|source| RunscConfigError::Detect {
                binary: binary.to_string(),
                source,
            })?;
        if let Some(id) = &identity {
            self.persisted.store(id, &f);
        }
        cache.insert(binary.to_string(), f.clone());
        Ok(f)
    }
}

impl RunscFactory {
    /// The typed runsc client for one container, configured as its policy demands (or refused):
    /// for front ends that drive runsc themselves (runsc-hardened).
    pub async fn client(
        &self,
        policy: &Policy,
        flags: &RunscFlags,
        namespace: &str,
        bundle: &Path,
    ) -> Result<Runsc, RunscConfigError> {
        let features = self.features(&policy.runsc.path).await?;
        client_with(
            policy,
            flags,
            namespace,
            bundle,
            features,
            self.reaper.clone(),
        )
    }
}

impl RunscFactory {
    /// A client that only deletes: `binary` on state root `root` with the flags of
    /// [`GlobalFlags::for_cleanup`](crate::runsc::flags::GlobalFlags::for_cleanup), for
    /// sandboxes whose policy may have changed or be gone.
    pub async fn cleanup_client(
        &self,
        binary: &str,
        root: &str,
    ) -> Result<Runsc, RunscConfigError> {
        let features = self.features(binary).await?;
        Runsc::new(
            binary,
            &crate::runsc::flags::GlobalFlags::for_cleanup(root),
            features,
            self.reaper.clone(),
        )
        .map_err(|source| RunscConfigError::Runsc {
            binary: binary.to_string(),
            source,
        })
    }
}

/// [`RunscFactory::client`] with what runsc supports already known: runsc-hardened records the
/// features at create, so its later calls (one process each) neither ask runsc nor read the
/// node's cache again.
pub fn client_with(
    policy: &Policy,
    flags: &RunscFlags,
    namespace: &str,
    bundle: &Path,
    features: Features,
    reaper: Reaper,
) -> Result<Runsc, RunscConfigError> {
    let wanted = wanted_flags(policy, flags, namespace, bundle)?;
    let client = Runsc::new(&policy.runsc.path, &wanted, features, reaper).map_err(|source| {
        RunscConfigError::Runsc {
            binary: policy.runsc.path.clone(),
            source,
        }
    })?;
    for a in client.adjustments() {
        log::info!("runsc --{}: left out: {}", a.flag, a.reason);
    }
    Ok(client)
}

#[async_trait::async_trait]
impl RuntimeFactory for RunscFactory {
    async fn platform(&self, policy: &Policy) -> Result<Option<String>, RunscConfigError> {
        if !policy.runsc.platform.is_empty() {
            return Ok(Some(policy.runsc.platform.clone()));
        }
        let features = self.features(&policy.runsc.path).await?;
        Ok(features.default_platform().map(|p| p.as_str().to_string()))
    }

    async fn runtime(
        &self,
        policy: &Policy,
        flags: &RunscFlags,
        namespace: &str,
        bundle: &Path,
    ) -> Result<Arc<dyn SandboxRuntime>, RunscConfigError> {
        let client = self.client(policy, flags, namespace, bundle).await?;
        Ok(Arc::new(
            RunscRuntime::new(client, self.reaper.clone()).with_attached_exec(),
        ))
    }
}

pub struct RunscRuntime {
    client: Runsc,
    reaper: Reaper,
    /// Where `create` has runsc write the sandbox's pid; the bundle's `init.pid` by default.
    pid_file: Option<PathBuf>,
    /// Execs without a terminal run as one attached `runsc exec` ([`Runsc::exec_attached`])
    /// rather than `--detach`'s two processes.
    attached_exec: bool,
    /// The exits of attached execs, by runsc's pid, until `watch` takes them: the reaper
    /// delivers an exit to the waiters registered when it happens, and a fast exec can be gone
    /// before anyone asks.
    attached: std::sync::Mutex<std::collections::HashMap<u32, ExitWatch>>,
}

impl RunscRuntime {
    /// The runtime over a configured client (runsc-hardened's calls, which configure theirs
    /// from the container's record).
    pub fn new(client: Runsc, reaper: Reaper) -> RunscRuntime {
        RunscRuntime {
            client,
            reaper,
            pid_file: None,
            attached_exec: false,
            attached: Default::default(),
        }
    }

    /// Execs without a terminal as one attached runsc process each, rather than `--detach`'s
    /// runsc that re-executes itself to wait (both front ends: the shim, and runsc-hardened's
    /// exec guard, whose subreaper owns the attached runsc as it owned the detached one's).
    pub fn with_attached_exec(mut self) -> RunscRuntime {
        self.attached_exec = true;
        self
    }

    /// `create` writes the sandbox's pid to `path` rather than into the bundle, which under
    /// Docker and Podman belongs to the engine.
    pub fn with_pid_file(mut self, path: PathBuf) -> RunscRuntime {
        self.pid_file = Some(path);
        self
    }
}

#[async_trait::async_trait]
impl SandboxRuntime for RunscRuntime {
    fn global_args(&self) -> Vec<String> {
        self.client.global().to_arg_strings()
    }

    async fn create(&self, call: CreateCall<'_>) -> Result<u32, RunscError> {
        let pid_file = self
            .pid_file
            .clone()
            .unwrap_or_else(|| call.bundle.join(INIT_PID_FILE));
        self.client
            .create(
                call.id,
                call.bundle,
                &pid_file,
                call.console_socket,
                call.stdio,
            )
            .await?;
        // runsc writes the sandbox's pid, also for a pod's later containers.
        Ok(read_pid_file(&pid_file)? as u32)
    }

    fn watch(&self, pid: u32) -> Result<ExitWatch, ReaperError> {
        let attached = self
            .attached
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&pid);
        if let Some(exit) = attached {
            return Ok(exit);
        }
        let exit = self.reaper.watch(pid as i32)?;
        Ok(Box::pin(async move { exit.await.unfold_runsc() }))
    }

    fn host_process(&self, pid: u32) -> Option<Arc<HostProcess>> {
        HostProcess::open_child(pid as i32).ok().map(Arc::new)
    }

    fn spawn_logger(&self, cmd: std::process::Command) -> Result<ExitWatch, ReaperError> {
        let spawned = self.reaper.spawn(cmd)?;
        log::info!("started logging program, pid {}", spawned.pid);
        Ok(Box::pin(spawned.exit))
    }

    async fn start(&self, id: &str, stdio: Option<RunscStdio>) -> Result<(), RunscError> {
        self.client.start(id, stdio).await
    }

    async fn exec(&self, call: ExecCall<'_>) -> Result<ExecStarted, RunscError> {
        let file = |suffix| call.bundle.join(bundle::exec_file(call.exec_id, suffix));
        let (process_file, pid_file, guest_pid_file) = (file("json"), file("pid"), file("gpid"));
        let process = serde_json::to_vec(call.process).expect("a JSON value serialises");
        crate::atomic_file::write(
            &process_file,
            &process,
            crate::atomic_file::Options::PRIVATE,
        )
        .map_err(|source| RunscError::Io {
            subcommand: "exec",
            context: "writing the process file",
            source,
        })?;
        let opts = ExecOpts {
            process_json: process_file.clone(),
            pid_file: pid_file.clone(),
            internal_pid_file: Some(guest_pid_file.clone()),
            detach: true,
            console_socket: call.console_socket.map(Path::to_path_buf),
        };
        if self.attached_exec && call.console_socket.is_none() {
            let started = self.client.exec_attached(call.id, &opts, call.stdio).await;
            // runsc read the process file before it started the process; the FIFO is read.
            for f in [process_file, guest_pid_file] {
                let _ = std::fs::remove_file(f);
            }
            let started = started?;
            let exit = started.exit;
            self.attached
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(
                    started.pid as u32,
                    Box::pin(async move { exit.await.unfold_runsc() }),
                );
            return Ok(ExecStarted {
                pid: started.pid as u32,
                guest_pid: started.guest_pid,
            });
        }
        let started = async {
            self.client.exec(call.id, &opts, call.stdio).await?;
            Ok(ExecStarted {
                pid: read_pid_file(&pid_file)? as u32,
                guest_pid: read_pid_file(&guest_pid_file)?,
            })
        }
        .await;
        // Read once; nothing needs them later (kill goes by the guest pid).
        for f in [process_file, pid_file, guest_pid_file] {
            let _ = std::fs::remove_file(f);
        }
        started
    }

    async fn kill(&self, id: &str, signal: u32, target: KillTarget) -> Result<(), RunscError> {
        let (all, pid) = match target {
            KillTarget::Init => (false, None),
            KillTarget::All => (true, None),
            KillTarget::Guest(p) => (false, Some(p)),
        };
        self.client.kill(id, signal as i32, all, pid).await
    }

    async fn delete(&self, id: &str) -> Result<(), RunscError> {
        self.client.delete(id, true).await
    }

    async fn pause(&self, id: &str) -> Result<(), RunscError> {
        self.client.pause(id).await
    }

    async fn resume(&self, id: &str) -> Result<(), RunscError> {
        self.client.resume(id).await
    }

    async fn wait(&self, id: &str) -> Result<ExitStatus, RunscError> {
        let code = self.client.wait(id, WaitTarget::Init).await?;
        Ok(ExitStatus::Exited(code as i32).unfold_runsc())
    }

    async fn stats(&self, id: &str) -> Result<Value, RunscError> {
        self.client.stats(id).await
    }

    async fn update(&self, id: &str, resources: &[u8]) -> Result<bool, RunscError> {
        match self.client.update(id, resources).await {
            Ok(()) => Ok(true),
            Err(RunscError::Unsupported(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn forwarder(
        &self,
        id: &str,
        state_dir: &Path,
        process: Value,
    ) -> Arc<dyn crate::egress::ForwarderSpawner> {
        forwarder_spawner(&self.client, &self.reaper, id, state_dir, process)
    }

    fn egress_confinement(
        &self,
        sandbox_pid: Option<i32>,
    ) -> Result<Option<crate::egress::confined::Confinement>, String> {
        egress_confinement(&self.reaper, sandbox_pid).map(Some)
    }
}

/// The confinement of a real sandbox's proxy process: this binary again, in the cgroups of the
/// sandbox's host process.
pub fn egress_confinement(
    reaper: &Reaper,
    sandbox_pid: Option<i32>,
) -> Result<crate::egress::confined::Confinement, String> {
    let pid = sandbox_pid.ok_or("the sandbox's host process is not known")?;
    let cgroup = crate::cgroup::SandboxCgroup::of_pid(pid)
        .map_err(|e| format!("the sandbox's cgroups: {e}"))?;
    Ok(crate::egress::confined::Confinement {
        exe: PathBuf::from("/proc/self/exe"),
        cgroup_procs: cgroup
            .dirs()
            .into_iter()
            .map(|d| d.join("cgroup.procs"))
            .collect(),
        reaper: Some(Arc::new(reaper.clone())),
    })
}

/// The `runsc exec` spawner of a sandbox's egress forwarder, run through `reaper` (the only
/// waiter in the shim and in runsc-hardened's guard).
pub fn forwarder_spawner(
    client: &Runsc,
    reaper: &Reaper,
    id: &str,
    state_dir: &Path,
    process: Value,
) -> Arc<dyn crate::egress::ForwarderSpawner> {
    Arc::new(crate::egress::spawn::RunscExec {
        runsc: client.binary().to_path_buf(),
        // The same global flags as every other command on this sandbox.
        global_args: client.global().to_args(),
        container_id: id.to_string(),
        state_dir: state_dir.to_path_buf(),
        process,
        reaper: Some(Arc::new(reaper.clone())),
    })
}

/// The runsc flags the default policy gives a spec: loopback only, spec seccomp applied, no raw
/// sockets, no host sockets, runsc's own platform and overlay. A fixture for the tests of this
/// crate that need flags but do not test how they are made.
#[cfg(test)]
pub(crate) fn default_policy_flags() -> RunscFlags {
    RunscFlags {
        network: NetworkMode::None,
        oci_seccomp: true,
        net_raw: false,
        host_uds: "none".into(),
        overlay: None,
        platform: None,
        extra: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_policy_asks_for_loopback_only_no_raw_sockets_no_host_sockets() {
        let policy = Policy::default();
        let flags = default_policy_flags();
        let args = wanted_flags(&policy, &flags, "default", Path::new("/b/c1"))
            .unwrap()
            .to_arg_strings();
        for want in [
            "--root=/run/gvisor-hardened/runsc/default",
            "--network=none",
            "--oci-seccomp",
            "--net-raw=false",
            "--host-uds=none",
            "--log=/b/c1/runsc.log.json",
            "--log-format=json",
        ] {
            assert!(
                args.contains(&want.to_string()),
                "{want} missing from {args:?}"
            );
        }
        assert!(!args
            .iter()
            .any(|a| a.contains("ignore-cgroups") || a.contains("allow-flag-override")));
    }

    #[test]
    fn unknown_platform_fails_closed() {
        let policy = Policy::default();
        let flags = RunscFlags {
            oci_seccomp: false,
            platform: Some("vmware".into()),
            ..default_policy_flags()
        };
        assert!(matches!(
            wanted_flags(&policy, &flags, "ns", Path::new("/b")),
            Err(RunscConfigError::Platform(_))
        ));
    }
}
