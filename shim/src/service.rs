//! The shim's state: the containers it serves, and the per-call entry points the task service
//! dispatches to. Each method finds the container and delegates; the work is in `container/`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use containerd_shim_protos::api::{
    ConnectResponse, CreateTaskRequest, CreateTaskResponse, DeleteResponse, ExecProcessRequest,
    PidsResponse, StartResponse, StateResponse, StatsResponse, UpdateTaskRequest, WaitResponse,
};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::container::{Container, CreateParams};
use crate::error::{Result, ShimError};
use crate::events::EventSink;
use crate::reaper::Reaper;
use crate::runsc::client::{Runsc, DEFAULT_TIMEOUT};
use crate::runsc::feature_cache::{self, FeatureCache, Identity};
use crate::runsc::features::Features;

/// What every container of this shim shares.
pub struct ShimEnv {
    pub namespace: String,
    pub reaper: Reaper,
    pub events: Arc<dyn EventSink>,
    /// `/etc/gvisor-hardened/policy.toml`, overridable for tests.
    pub node_policy: PathBuf,
    /// What each runsc binary supports, asked once per shim (`runsc flags`, `runsc help`).
    features: Mutex<HashMap<String, Features>>,
}

impl ShimEnv {
    pub fn new(
        namespace: String,
        reaper: Reaper,
        events: Arc<dyn EventSink>,
        node_policy: PathBuf,
    ) -> Self {
        ShimEnv {
            namespace,
            reaper,
            events,
            node_policy,
            features: Mutex::new(HashMap::new()),
        }
    }

    /// What `binary` supports: from this shim's memory, else from the node's cache of earlier
    /// shims' answers (keyed by the binary's identity), else by asking runsc.
    pub async fn runsc_features(&self, binary: &str) -> Result<Features> {
        let mut cache = self.features.lock().await;
        if let Some(f) = cache.get(binary) {
            return Ok(f.clone());
        }
        let identity = Identity::of(binary);
        let persisted = FeatureCache::new(feature_cache::DEFAULT_DIR);
        if let Some(f) = identity.as_ref().and_then(|id| persisted.load(id)) {
            cache.insert(binary.to_string(), f.clone());
            return Ok(f);
        }
        let f = Runsc::detect(Path::new(binary), &self.reaper, DEFAULT_TIMEOUT)
            .await
            .map_err(|e| {
                ShimError::Runsc(format!("runsc {binary}: cannot tell what it supports: {e}"))
            })?;
        if let Some(id) = &identity {
            persisted.store(id, &f);
        }
        cache.insert(binary.to_string(), f.clone());
        Ok(f)
    }
}

/// A Create parses, rewrites and serialises the whole spec and leaves the heap full of freed
/// chunks that malloc keeps resident; a shim lives as long as its pod, so that peak would be paid
/// for the pod's lifetime. Handing the free pages back costs microseconds once per Create.
fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free memory to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub struct Shim {
    pub env: Arc<ShimEnv>,
    containers: Mutex<HashMap<String, Arc<Container>>>,
    /// Cancelled when the shim should exit (Shutdown with nothing left, or SIGTERM).
    pub exit: CancellationToken,
}

impl Shim {
    pub fn new(env: ShimEnv) -> Self {
        Shim {
            env: Arc::new(env),
            containers: Mutex::new(HashMap::new()),
            exit: CancellationToken::new(),
        }
    }

    async fn get(&self, id: &str) -> Result<Arc<Container>> {
        self.containers
            .lock()
            .await
            .get(id)
            .cloned()
            .ok_or_else(|| ShimError::NotFound(id.to_string()))
    }

    pub async fn create(&self, req: CreateTaskRequest) -> Result<CreateTaskResponse> {
        if !req.checkpoint.is_empty() || !req.parent_checkpoint.is_empty() {
            return Err(ShimError::Unsupported("restoring from a checkpoint"));
        }
        let params = CreateParams::from_request(&req)?;
        // Hold the map across creation: a second Create with the same id must not race in.
        let mut containers = self.containers.lock().await;
        if containers.contains_key(&params.id) {
            return Err(ShimError::AlreadyExists(format!("container {}", params.id)));
        }
        let container = Container::create(self.env.clone(), params, &containers).await?;
        let pid = container.init_pid();
        containers.insert(container.id().to_string(), container);
        drop(containers);
        release_freed_memory();
        let mut resp = CreateTaskResponse::new();
        resp.pid = pid;
        Ok(resp)
    }

    pub async fn start(&self, id: &str, exec_id: &str) -> Result<StartResponse> {
        let c = self.get(id).await?;
        let pid = if exec_id.is_empty() {
            c.start().await?
        } else {
            c.start_exec(exec_id).await?
        };
        let mut resp = StartResponse::new();
        resp.pid = pid;
        Ok(resp)
    }

    pub async fn delete(&self, id: &str, exec_id: &str) -> Result<DeleteResponse> {
        let c = self.get(id).await?;
        if !exec_id.is_empty() {
            return c.delete_exec(exec_id).await;
        }
        let resp = c.delete().await?;
        self.containers.lock().await.remove(id);
        Ok(resp)
    }

    pub async fn state(&self, id: &str, exec_id: &str) -> Result<StateResponse> {
        self.get(id).await?.state(exec_id).await
    }

    pub async fn pids(&self, id: &str) -> Result<PidsResponse> {
        self.get(id).await?.pids().await
    }

    pub async fn pause(&self, id: &str) -> Result<()> {
        self.get(id).await?.pause().await
    }

    pub async fn resume(&self, id: &str) -> Result<()> {
        self.get(id).await?.resume().await
    }

    pub async fn kill(&self, id: &str, exec_id: &str, signal: u32, all: bool) -> Result<()> {
        self.get(id).await?.kill(exec_id, signal, all).await
    }

    pub async fn exec(&self, req: ExecProcessRequest) -> Result<()> {
        self.get(&req.id).await?.add_exec(&req).await
    }

    pub async fn resize_pty(&self, id: &str, exec_id: &str, width: u32, height: u32) -> Result<()> {
        self.get(id).await?.resize_pty(exec_id, width, height).await
    }

    pub async fn close_io(&self, id: &str, exec_id: &str, stdin: bool) -> Result<()> {
        log::debug!("close_io {id} exec {exec_id:?} stdin={stdin}");
        if stdin {
            self.get(id).await?.close_stdin(exec_id).await?;
        }
        Ok(())
    }

    pub async fn update(&self, req: UpdateTaskRequest) -> Result<()> {
        self.get(&req.id).await?.update(&req).await
    }

    pub async fn wait(&self, id: &str, exec_id: &str) -> Result<WaitResponse> {
        let c = self.get(id).await?;
        let exit = c.wait(exec_id).await?;
        let mut resp = WaitResponse::new();
        resp.exit_status = exit.status;
        resp.exited_at = Some(crate::events::timestamp(exit.at)).into();
        Ok(resp)
    }

    pub async fn stats(&self, id: &str) -> Result<StatsResponse> {
        self.get(id).await?.stats().await
    }

    pub async fn connect(&self, id: &str) -> Result<ConnectResponse> {
        let mut resp = ConnectResponse::new();
        resp.shim_pid = std::process::id();
        resp.version = env!("CARGO_PKG_VERSION").to_string();
        if let Ok(c) = self.get(id).await {
            resp.task_pid = c.init_pid();
        }
        Ok(resp)
    }

    /// containerd sends Shutdown after every Delete; a pod's shim stays while it serves anyone.
    pub async fn shutdown(&self, _id: &str, now: bool) {
        if now || self.containers.lock().await.is_empty() {
            self.exit.cancel();
        }
    }

    /// SIGTERM: an unsupervised sandbox would outlive its policy (no lifetime limit, no audit of
    /// its exit), so every sandbox this shim serves is torn down before it exits.
    pub async fn terminate_all(&self) {
        let all: Vec<_> = self
            .containers
            .lock()
            .await
            .drain()
            .map(|(_, c)| c)
            .collect();
        for c in all {
            c.teardown().await;
        }
    }
}
