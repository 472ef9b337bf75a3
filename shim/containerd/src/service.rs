//! The shim's state: the containers it serves, and the per-call entry points the task service
//! dispatches to. Each method finds the container and delegates; the work is in `container/`.
//!
//! Concurrency: the container map is locked only to look up, reserve or remove an id, never
//! across a runsc call. A Create reserves its id first, so a second Create of the same id is
//! refused while the first is still running; every other call on that id answers "not found"
//! until the Create has finished.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use containerd_shim_protos::api::{
    ConnectResponse, CreateTaskRequest, CreateTaskResponse, DeleteResponse, ExecProcessRequest,
    PidsResponse, StartResponse, StateResponse, StatsResponse, UpdateTaskRequest, WaitResponse,
};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::container::{Container, CreateParams};
use crate::env::ShimEnv;
use crate::error::{Result, ShimError};

// A Create parses, rewrites and serialises the whole spec and leaves the heap full of freed
// chunks that malloc keeps resident: handed back once per Create.
use gvisor_hardened_proc::heap::release_freed_memory;

#[derive(Default)]
struct Containers {
    ready: HashMap<String, Arc<Container>>,
    /// Ids whose Create is under way.
    creating: HashSet<String>,
}

impl Containers {
    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.creating.is_empty()
    }
}

pub struct Shim {
    pub env: Arc<ShimEnv>,
    containers: Mutex<Containers>,
    /// Cancelled when the shim should exit (Shutdown with nothing left, or SIGTERM).
    pub exit: CancellationToken,
}

impl Shim {
    pub fn new(env: ShimEnv) -> Self {
        Shim {
            env: Arc::new(env),
            containers: Mutex::new(Containers::default()),
            exit: CancellationToken::new(),
        }
    }

    async fn get(&self, id: &str) -> Result<Arc<Container>> {
        self.containers
            .lock()
            .await
            .ready
            .get(id)
            .cloned()
            .ok_or_else(|| ShimError::NotFound(id.to_string()))
    }

    pub async fn create(&self, req: CreateTaskRequest) -> Result<CreateTaskResponse> {
        if !req.checkpoint.is_empty() || !req.parent_checkpoint.is_empty() {
            return Err(ShimError::Unsupported("restoring from a checkpoint"));
        }
        let params = CreateParams::from_request(&req)?;
        let id = params.id.clone();
        let pod = {
            let mut containers = self.containers.lock().await;
            if containers.ready.contains_key(&id) || !containers.creating.insert(id.clone()) {
                return Err(ShimError::AlreadyExists(format!("container {id}")));
            }
            containers.ready.clone()
        };
        let created = Container::create(self.env.clone(), params, &pod).await;
        drop(pod);
        let mut containers = self.containers.lock().await;
        containers.creating.remove(&id);
        let container = created?;
        let pid = container.init_pid();
        containers.ready.insert(id, container);
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
        // Start allocates too (the artifacts manifest, the event, the audit record) and frees it
        // all before it answers: after a Create's trim, that is what a shim serving one
        // `sleep` held on its heap.
        release_freed_memory();
        // And the code Create and Start ran, which the server will not run again while the
        // sandbox runs, once the start's reply and event are out (text_pages.rs).
        gvisor_hardened_proc::text_pages::drop_when_quiet();
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
        self.containers.lock().await.ready.remove(id);
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
        if stdin {
            self.get(id).await?.close_stdin(exec_id).await?;
        }
        Ok(())
    }

    pub async fn update(&self, req: UpdateTaskRequest) -> Result<()> {
        self.get(&req.id).await?.update(&req).await
    }

    pub async fn wait(&self, id: &str, exec_id: &str) -> Result<WaitResponse> {
        let exit = self.get(id).await?.wait(exec_id).await?;
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

    /// containerd sends Shutdown after every Delete; a pod's shim stays while it serves anyone
    /// (a Create under way included).
    pub async fn shutdown(&self, now: bool) {
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
            .ready
            .drain()
            .map(|(_, c)| c)
            .collect();
        // A pod's later containers first: the sandbox's teardown takes them with it otherwise.
        let (members, sandboxes): (Vec<_>, Vec<_>) =
            all.into_iter().partition(|c| c.pod_sandbox().is_some());
        for c in members.into_iter().chain(sandboxes) {
            c.teardown().await;
        }
    }
}
