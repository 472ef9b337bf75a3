//! Task events published to containerd (TaskCreate, TaskStart, TaskExit, TaskOOM, ...).
//!
//! Events go through one queue, in order, to containerd's TTRPC `Events.Forward`. A failed
//! forward of any kind (containerd restarting, the connection closed under us) drops the
//! connection and retries on a fresh one with a growing pause: a restarted containerd must still
//! hear every exit. An event is given up only after [`GIVE_UP_AFTER`] of failures, which is
//! logged loudly; containerd also learns exits through the blocking Wait call and State.
//!
//! Before the shim exits, [`ContainerdSink::flush`] waits until every queued event has been
//! answered. containerd sends Shutdown right after Delete, while TaskDelete may still be queued
//! or its Forward unanswered: exiting then loses the event, or leaves containerd writing the
//! answer to a closed connection (`failed sending message on channel ... broken pipe` in its log,
//! measured under containerd 2.4.2 with `ctr run --rm`).

use std::time::{Duration, SystemTime};

use containerd_shim_protos::events::task::{
    TaskCreate, TaskDelete, TaskExecAdded, TaskExecStarted, TaskExit, TaskIO, TaskOOM, TaskPaused,
    TaskResumed, TaskStart,
};
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp;
use containerd_shim_protos::shim::event::Envelope;
use containerd_shim_protos::shim::events::ForwardRequest;
use containerd_shim_protos::shim_async::{Client, EventsClient};
use containerd_shim_protos::topics;
use containerd_shim_protos::ttrpc::context::Context;
use tokio::sync::{mpsc, oneshot};

use crate::packed::Named;

/// How long one event is retried before it is given up (a containerd restart takes seconds).
const GIVE_UP_AFTER: Duration = Duration::from_secs(120);
const FIRST_PAUSE: Duration = Duration::from_millis(50);
const MAX_PAUSE: Duration = Duration::from_secs(2);
const QUEUE: usize = 1024;

/// Where events go: the shim uses containerd's TTRPC endpoint; events arrive packed (see
/// `crate::packed`).
#[async_trait::async_trait]
pub trait EventSink: Send + Sync {
    async fn publish(&self, topic: &'static str, event: Any);
}

pub struct ContainerdSink {
    queue: mpsc::Sender<Item>,
    namespace: String,
}

/// What the forwarder takes from the queue, in order.
enum Item {
    Event(Envelope),
    /// Answered once every event queued before it was forwarded (or given up).
    Flush(oneshot::Sender<()>),
}

async fn connect(address: &str) -> Result<EventsClient, String> {
    let address = if address.contains("://") {
        address.to_string()
    } else {
        format!("unix://{address}")
    };
    Client::connect(&address)
        .await
        .map(EventsClient::new)
        .map_err(|e| e.to_string())
}

impl ContainerdSink {
    /// Connects once (so a wrong address fails the shim's start), then forwards in the
    /// background.
    pub async fn connect(address: &str, namespace: String) -> Result<Self, String> {
        let first = connect(address).await?;
        let (queue, mut rx) = mpsc::channel::<Item>(QUEUE);
        let address = address.to_string();
        tokio::spawn(async move {
            let mut client = Some(first);
            while let Some(item) = rx.recv().await {
                let envelope = match item {
                    Item::Event(envelope) => envelope,
                    Item::Flush(done) => {
                        let _ = done.send(());
                        continue;
                    }
                };
                let mut req = ForwardRequest::new();
                req.envelope = Some(envelope).into();
                let started = tokio::time::Instant::now();
                let mut pause = FIRST_PAUSE;
                loop {
                    if client.is_none() {
                        client = connect(&address).await.ok();
                    }
                    let err = match &client {
                        Some(c) => match c.forward(Context::default(), &req).await {
                            Ok(_) => break,
                            Err(e) => e.to_string(),
                        },
                        None => "not connected".to_string(),
                    };
                    // Whatever went wrong, the next try uses a new connection.
                    client = None;
                    if started.elapsed() > GIVE_UP_AFTER {
                        log::error!(
                            "event {} lost: containerd unreachable for {GIVE_UP_AFTER:?}: {err}",
                            req.envelope.topic
                        );
                        break;
                    }
                    log::debug!("forwarding {} failed ({err}); retrying", req.envelope.topic);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
            }
        });
        Ok(ContainerdSink { queue, namespace })
    }

    /// Waits, at most `within`, until every event published so far has been answered by
    /// containerd (or given up). False if that took longer.
    pub async fn flush(&self, within: Duration) -> bool {
        let (done, answered) = oneshot::channel();
        let flushed =
            async { self.queue.send(Item::Flush(done)).await.is_ok() && answered.await.is_ok() };
        tokio::time::timeout(within, flushed).await.unwrap_or(false)
    }
}

#[async_trait::async_trait]
impl EventSink for ContainerdSink {
    async fn publish(&self, topic: &'static str, any: Any) {
        let mut envelope = Envelope::new();
        envelope.timestamp = Some(timestamp(SystemTime::now())).into();
        envelope.namespace = self.namespace.clone();
        envelope.topic = topic.to_string();
        envelope.event = Some(any).into();
        if self.queue.send(Item::Event(envelope)).await.is_err() {
            log::error!("event queue closed; {topic} not sent");
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
    async fn send<M: Named>(&self, topic: &'static str, event: &M) {
        match crate::packed::pack(event) {
            Ok(any) => self.0.publish(topic, any).await,
            Err(e) => log::error!("encoding {topic}: {e}"),
        }
    }

    pub async fn create(&self, id: &str, bundle: &str, io: TaskIO, pid: u32) {
        let mut e = TaskCreate::new();
        e.container_id = id.to_string();
        e.bundle = bundle.to_string();
        e.io = Some(io).into();
        e.pid = pid;
        self.send(topics::TASK_CREATE_EVENT_TOPIC, &e).await;
    }

    pub async fn start(&self, id: &str, pid: u32) {
        let mut e = TaskStart::new();
        e.container_id = id.to_string();
        e.pid = pid;
        self.send(topics::TASK_START_EVENT_TOPIC, &e).await;
    }

    pub async fn exit(&self, id: &str, exec_id: &str, pid: u32, status: u32, at: SystemTime) {
        let mut e = TaskExit::new();
        e.container_id = id.to_string();
        // containerd expects the init process's id to be the container id.
        e.id = if exec_id.is_empty() { id } else { exec_id }.to_string();
        e.pid = pid;
        e.exit_status = status;
        e.exited_at = Some(timestamp(at)).into();
        self.send(topics::TASK_EXIT_EVENT_TOPIC, &e).await;
    }

    pub async fn oom(&self, id: &str) {
        let mut e = TaskOOM::new();
        e.container_id = id.to_string();
        self.send(topics::TASK_OOM_EVENT_TOPIC, &e).await;
    }

    pub async fn delete(&self, id: &str, pid: u32, status: u32, at: SystemTime) {
        let mut e = TaskDelete::new();
        e.container_id = id.to_string();
        e.id = id.to_string();
        e.pid = pid;
        e.exit_status = status;
        e.exited_at = Some(timestamp(at)).into();
        self.send(topics::TASK_DELETE_EVENT_TOPIC, &e).await;
    }

    pub async fn exec_added(&self, id: &str, exec_id: &str) {
        let mut e = TaskExecAdded::new();
        e.container_id = id.to_string();
        e.exec_id = exec_id.to_string();
        self.send(topics::TASK_EXEC_ADDED_EVENT_TOPIC, &e).await;
    }

    pub async fn exec_started(&self, id: &str, exec_id: &str, pid: u32) {
        let mut e = TaskExecStarted::new();
        e.container_id = id.to_string();
        e.exec_id = exec_id.to_string();
        e.pid = pid;
        self.send(topics::TASK_EXEC_STARTED_EVENT_TOPIC, &e).await;
    }

    pub async fn paused(&self, id: &str) {
        let mut e = TaskPaused::new();
        e.container_id = id.to_string();
        self.send(topics::TASK_PAUSED_EVENT_TOPIC, &e).await;
    }

    pub async fn resumed(&self, id: &str) {
        let mut e = TaskResumed::new();
        e.container_id = id.to_string();
        self.send(topics::TASK_RESUMED_EVENT_TOPIC, &e).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::protobuf::well_known_types::empty::Empty;
    use containerd_shim_protos::shim_async::{create_events, Events as EventsService};
    use containerd_shim_protos::ttrpc::r#async::{Server, TtrpcContext};
    use std::sync::{Arc, Mutex};

    /// containerd's events endpoint, answering each Forward after `delay`.
    struct Containerd {
        delay: Duration,
        answered: Arc<Mutex<Vec<String>>>,
    }

    #[async_trait::async_trait]
    impl EventsService for Containerd {
        async fn forward(
            &self,
            _: &TtrpcContext,
            req: ForwardRequest,
        ) -> containerd_shim_protos::ttrpc::Result<Empty> {
            tokio::time::sleep(self.delay).await;
            self.answered
                .lock()
                .unwrap()
                .push(req.envelope.topic.clone());
            Ok(Empty::new())
        }
    }

    async fn containerd(
        dir: &std::path::Path,
        delay: Duration,
    ) -> (Server, String, Arc<Mutex<Vec<String>>>) {
        let answered = Arc::new(Mutex::new(Vec::new()));
        let address = format!("unix://{}", dir.join("containerd.sock.ttrpc").display());
        let service = Arc::new(Containerd {
            delay,
            answered: answered.clone(),
        });
        let mut server = Server::new()
            .bind(&address)
            .unwrap()
            .register_service(create_events(service));
        server.start().await.unwrap();
        (server, address, answered)
    }

    #[tokio::test]
    async fn flush_returns_once_containerd_answered_every_queued_event() {
        let dir = tempfile::tempdir().unwrap();
        let (_server, address, answered) = containerd(dir.path(), Duration::from_millis(100)).await;
        let sink = ContainerdSink::connect(&address, "ns".into())
            .await
            .unwrap();
        let events = Events(&sink);
        events.exit("c1", "", 7, 0, SystemTime::now()).await;
        events.delete("c1", 7, 0, SystemTime::now()).await;
        // Publishing only queues: nothing is answered yet.
        assert!(answered.lock().unwrap().is_empty());
        assert!(sink.flush(Duration::from_secs(10)).await);
        assert_eq!(
            *answered.lock().unwrap(),
            [
                topics::TASK_EXIT_EVENT_TOPIC,
                topics::TASK_DELETE_EVENT_TOPIC
            ]
        );
    }

    #[tokio::test]
    async fn flush_gives_up_at_its_deadline_when_containerd_does_not_answer() {
        let dir = tempfile::tempdir().unwrap();
        let (_server, address, answered) = containerd(dir.path(), Duration::from_secs(30)).await;
        let sink = ContainerdSink::connect(&address, "ns".into())
            .await
            .unwrap();
        Events(&sink).oom("c1").await;
        assert!(!sink.flush(Duration::from_millis(200)).await);
        assert!(answered.lock().unwrap().is_empty());
    }
}
