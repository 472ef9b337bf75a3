//! The containerd front end's side of the fake world (`gvisor_hardened_core::fake`): a sink that
//! keeps every event the shim publishes, and a shim environment on the fake.

use std::sync::Mutex;

use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskOOM, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::topics;

use crate::events::EventSink;

/// The events the shim published, in order, as short lines: `create c1`, `start c1`,
/// `exit c1 c1 3` (container, process id, status), `exec-added c1 e1`, `oom c1`,
/// `delete c1 137`...
#[derive(Default)]
pub struct RecordingSink {
    lines: Mutex<Vec<String>>,
    published: tokio::sync::Notify,
}

impl RecordingSink {
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Lines starting with `prefix`.
    pub fn matching(&self, prefix: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    /// Resolves once a line starting with `prefix` was published.
    pub async fn published(&self, prefix: &str) {
        loop {
            let notified = self.published.notified();
            if !self.matching(prefix).is_empty() {
                return;
            }
            notified.await;
        }
    }
}

fn decode<M: Message>(any: &Any) -> M {
    M::parse_from_bytes(&any.value).expect("the shim packs well-formed events")
}

#[async_trait::async_trait]
impl EventSink for RecordingSink {
    async fn publish(&self, topic: &'static str, any: Any) {
        let line = match topic {
            topics::TASK_CREATE_EVENT_TOPIC => {
                let e: TaskCreate = decode(&any);
                format!("create {}", e.container_id)
            }
            topics::TASK_START_EVENT_TOPIC => {
                let e: TaskStart = decode(&any);
                format!("start {}", e.container_id)
            }
            topics::TASK_EXIT_EVENT_TOPIC => {
                let e: TaskExit = decode(&any);
                format!("exit {} {} {}", e.container_id, e.id, e.exit_status)
            }
            topics::TASK_OOM_EVENT_TOPIC => {
                let e: TaskOOM = decode(&any);
                format!("oom {}", e.container_id)
            }
            topics::TASK_DELETE_EVENT_TOPIC => {
                let e: TaskDelete = decode(&any);
                format!("delete {} {}", e.container_id, e.exit_status)
            }
            topics::TASK_EXEC_ADDED_EVENT_TOPIC => {
                let e: TaskExecAdded = decode(&any);
                format!("exec-added {} {}", e.container_id, e.exec_id)
            }
            topics::TASK_EXEC_STARTED_EVENT_TOPIC => {
                let e: TaskExecStarted = decode(&any);
                format!("exec-started {} {}", e.container_id, e.exec_id)
            }
            other => other.rsplit('/').next().unwrap_or(other).to_string(),
        };
        self.lines.lock().unwrap().push(line);
        self.published.notify_waiters();
    }
}

/// A shim environment on `fake`, with events recorded and files under `dir`.
pub fn env(
    fake: &gvisor_hardened_core::fake::Fake,
    dir: &std::path::Path,
    node_policy: std::path::PathBuf,
    events: std::sync::Arc<RecordingSink>,
    records: std::sync::Arc<RecordingRecords>,
) -> crate::env::ShimEnv {
    crate::env::ShimEnv {
        namespace: "test".into(),
        events,
        runtimes: std::sync::Arc::new(fake.clone()),
        host: std::sync::Arc::new(fake.clone()),
        node_policy,
        console_dir: dir.join("console"),
        records,
    }
}

/// containerd's container records as the shim wrote them: (id, summary, original spec).
#[derive(Default)]
pub struct RecordingRecords {
    pub notes: std::sync::Mutex<Vec<(String, String, serde_json::Value)>>,
    pub written: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl crate::record::ContainerRecords for RecordingRecords {
    async fn note_decisions(
        &self,
        id: &str,
        summary: &str,
        original_spec: &[u8],
    ) -> Result<(), crate::record::RecordError> {
        let spec =
            serde_json::from_slice(original_spec).map_err(crate::record::RecordError::Spec)?;
        self.notes
            .lock()
            .unwrap()
            .push((id.to_string(), summary.to_string(), spec));
        self.written.notify_waiters();
        Ok(())
    }
}
