//! Task events published to containerd (TaskCreate, TaskStart, TaskExit, TaskOOM, ...).
//!
//! Publishing goes through containerd-shim's queueing publisher, which reconnects and retries
//! when containerd restarts; a failure to enqueue is logged, never fatal: containerd also learns
//! exits through the blocking Wait call, so a lost event cannot leave a task hanging.

use std::time::SystemTime;

use containerd_shim::publisher::RemotePublisher;
use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskIO, TaskOOM, TaskPaused,
    TaskResumed, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::protobuf::MessageDyn;
use containerd_shim_protos::topics;
use containerd_shim_protos::ttrpc::context::Context;

/// Where events go. Tests use a recording sink; the shim uses containerd's TTRPC endpoint.
#[async_trait::async_trait]
pub trait EventSink: Send + Sync {
    async fn publish(&self, topic: &'static str, event: Box<dyn MessageDyn>);
}

pub struct ContainerdSink {
    publisher: RemotePublisher,
    namespace: String,
}

impl ContainerdSink {
    pub fn new(publisher: RemotePublisher, namespace: String) -> Self {
        ContainerdSink {
            publisher,
            namespace,
        }
    }
}

#[async_trait::async_trait]
impl EventSink for ContainerdSink {
    async fn publish(&self, topic: &'static str, event: Box<dyn MessageDyn>) {
        if let Err(e) = self
            .publisher
            .publish(Context::default(), topic, &self.namespace, event)
            .await
        {
            log::warn!("publishing {topic} failed: {e}");
        }
    }
}

pub fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let mut ts = Timestamp::new();
    ts.seconds = d.as_secs() as i64;
    ts.nanos = d.subsec_nanos() as i32;
    ts
}

/// Typed constructors, so call sites cannot pair a message with the wrong topic.
pub struct Events<'a>(pub &'a dyn EventSink);

impl Events<'_> {
    pub async fn create(&self, id: &str, bundle: &str, io: TaskIO, pid: u32) {
        let mut e = TaskCreate::new();
        e.container_id = id.to_string();
        e.bundle = bundle.to_string();
        e.io = Some(io).into();
        e.pid = pid;
        self.0
            .publish(topics::TASK_CREATE_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn start(&self, id: &str, pid: u32) {
        let mut e = TaskStart::new();
        e.container_id = id.to_string();
        e.pid = pid;
        self.0
            .publish(topics::TASK_START_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn exit(&self, id: &str, exec_id: &str, pid: u32, status: u32, at: SystemTime) {
        let mut e = TaskExit::new();
        e.container_id = id.to_string();
        // containerd expects the init process's id to be the container id.
        e.id = if exec_id.is_empty() { id } else { exec_id }.to_string();
        e.pid = pid;
        e.exit_status = status;
        e.exited_at = Some(timestamp(at)).into();
        self.0
            .publish(topics::TASK_EXIT_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn oom(&self, id: &str) {
        let mut e = TaskOOM::new();
        e.container_id = id.to_string();
        self.0
            .publish(topics::TASK_OOM_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn delete(&self, id: &str, pid: u32, status: u32, at: SystemTime) {
        let mut e = TaskDelete::new();
        e.container_id = id.to_string();
        e.id = id.to_string();
        e.pid = pid;
        e.exit_status = status;
        e.exited_at = Some(timestamp(at)).into();
        self.0
            .publish(topics::TASK_DELETE_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn exec_added(&self, id: &str, exec_id: &str) {
        let mut e = TaskExecAdded::new();
        e.container_id = id.to_string();
        e.exec_id = exec_id.to_string();
        self.0
            .publish(topics::TASK_EXEC_ADDED_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn exec_started(&self, id: &str, exec_id: &str, pid: u32) {
        let mut e = TaskExecStarted::new();
        e.container_id = id.to_string();
        e.exec_id = exec_id.to_string();
        e.pid = pid;
        self.0
            .publish(topics::TASK_EXEC_STARTED_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn paused(&self, id: &str) {
        let mut e = TaskPaused::new();
        e.container_id = id.to_string();
        self.0
            .publish(topics::TASK_PAUSED_EVENT_TOPIC, Box::new(e))
            .await;
    }

    pub async fn resumed(&self, id: &str) {
        let mut e = TaskResumed::new();
        e.container_id = id.to_string();
        self.0
            .publish(topics::TASK_RESUMED_EVENT_TOPIC, Box::new(e))
            .await;
    }
}
