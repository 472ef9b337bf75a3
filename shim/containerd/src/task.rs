//! The ttrpc Task service: decode the request, call the shim, encode the answer.
//!
//! No logic lives here (style rule 4): every handler finds the container through [`Shim`],
//! delegates one call, and maps the error. The same handler object is registered under both
//! service names containerd uses: `containerd.task.v2.Task` (containerd 1.6/1.7, and 2.x when
//! the shim answers `start` with a bare address) and `containerd.task.v3.Task` (containerd 2.x).

use std::collections::HashMap;
use std::sync::Arc;

use containerd_shim_protos::api::{
    CheckpointTaskRequest, CloseIORequest, ConnectRequest, ConnectResponse, CreateTaskRequest,
    CreateTaskResponse, DeleteRequest, DeleteResponse, ExecProcessRequest, KillRequest,
    PauseRequest, PidsRequest, PidsResponse, ResizePtyRequest, ResumeRequest, ShutdownRequest,
    StartRequest, StartResponse, StateRequest, StateResponse, StatsRequest, StatsResponse,
    UpdateTaskRequest, WaitRequest, WaitResponse,
};
use containerd_shim_protos::protobuf::well_known_types::empty::Empty;
use containerd_shim_protos::shim_async::{create_task, Task};
use containerd_shim_protos::ttrpc::r#async::{Service, TtrpcContext};
use containerd_shim_protos::ttrpc::Result as TtrpcResult;

use crate::service::Shim;

pub const TASK_V2: &str = "containerd.task.v2.Task";
pub const TASK_V3: &str = "containerd.task.v3.Task";

pub struct TaskService {
    shim: Arc<Shim>,
}

/// The services to register on the ttrpc server, under both task API names.
pub fn services(shim: Arc<Shim>) -> HashMap<String, Service> {
    let task: Arc<dyn Task + Send + Sync> = Arc::new(TaskService { shim });
    let mut out = create_task(task.clone());
    let mut v2 = create_task(task);
    let v3 = v2
        .remove(TASK_V3)
        .expect("containerd-shim-protos registers the v3 task service");
    out.insert(TASK_V2.to_string(), v3);
    out
}

#[async_trait::async_trait]
impl Task for TaskService {
    async fn state(&self, _: &TtrpcContext, req: StateRequest) -> TtrpcResult<StateResponse> {
        Ok(self.shim.state(&req.id, &req.exec_id).await?)
    }

    async fn create(
        &self,
        _: &TtrpcContext,
        req: CreateTaskRequest,
    ) -> TtrpcResult<CreateTaskResponse> {
        Ok(self.shim.create(req).await?)
    }

    async fn start(&self, _: &TtrpcContext, req: StartRequest) -> TtrpcResult<StartResponse> {
        Ok(self.shim.start(&req.id, &req.exec_id).await?)
    }

    async fn delete(&self, _: &TtrpcContext, req: DeleteRequest) -> TtrpcResult<DeleteResponse> {
        Ok(self.shim.delete(&req.id, &req.exec_id).await?)
    }

    async fn pids(&self, _: &TtrpcContext, req: PidsRequest) -> TtrpcResult<PidsResponse> {
        Ok(self.shim.pids(&req.id).await?)
    }

    async fn pause(&self, _: &TtrpcContext, req: PauseRequest) -> TtrpcResult<Empty> {
        self.shim.pause(&req.id).await?;
        Ok(Empty::new())
    }

    async fn resume(&self, _: &TtrpcContext, req: ResumeRequest) -> TtrpcResult<Empty> {
        self.shim.resume(&req.id).await?;
        Ok(Empty::new())
    }

    async fn checkpoint(&self, _: &TtrpcContext, _: CheckpointTaskRequest) -> TtrpcResult<Empty> {
        Err(crate::error::ShimError::Unsupported("checkpoint").into())
    }

    async fn kill(&self, _: &TtrpcContext, req: KillRequest) -> TtrpcResult<Empty> {
        self.shim
            .kill(&req.id, &req.exec_id, req.signal, req.all)
            .await?;
        Ok(Empty::new())
    }

    async fn exec(&self, _: &TtrpcContext, req: ExecProcessRequest) -> TtrpcResult<Empty> {
        self.shim.exec(req).await?;
        Ok(Empty::new())
    }

    async fn resize_pty(&self, _: &TtrpcContext, req: ResizePtyRequest) -> TtrpcResult<Empty> {
        self.shim
            .resize_pty(&req.id, &req.exec_id, req.width, req.height)
            .await?;
        Ok(Empty::new())
    }

    async fn close_io(&self, _: &TtrpcContext, req: CloseIORequest) -> TtrpcResult<Empty> {
        self.shim.close_io(&req.id, &req.exec_id, req.stdin).await?;
        Ok(Empty::new())
    }

    async fn update(&self, _: &TtrpcContext, req: UpdateTaskRequest) -> TtrpcResult<Empty> {
        self.shim.update(req).await?;
        Ok(Empty::new())
    }

    async fn wait(&self, _: &TtrpcContext, req: WaitRequest) -> TtrpcResult<WaitResponse> {
        Ok(self.shim.wait(&req.id, &req.exec_id).await?)
    }

    async fn stats(&self, _: &TtrpcContext, req: StatsRequest) -> TtrpcResult<StatsResponse> {
        Ok(self.shim.stats(&req.id).await?)
    }

    async fn connect(&self, _: &TtrpcContext, req: ConnectRequest) -> TtrpcResult<ConnectResponse> {
        Ok(self.shim.connect(&req.id).await?)
    }

    async fn shutdown(&self, _: &TtrpcContext, req: ShutdownRequest) -> TtrpcResult<Empty> {
        self.shim.shutdown(req.now).await;
        Ok(Empty::new())
    }
}
