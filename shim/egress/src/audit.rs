//! Egress audit records: one per connection, one per name lookup, and the forwarder's and byte
//! cap's events. They go to an [`EgressAuditSink`] the wiring connects to the audit log.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Who the records are about; fixed for a proxy's life.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxRef {
    pub sandbox_id: String,
    /// The container the forwarder runs in (the pod's sandbox container, or the container).
    pub container_id: String,
    /// The policy's name as agents see it in refusals (e.g. the RuntimeClass handler).
    pub policy: String,
}

/// The outcome of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Allowed,
    Denied,
    /// Allowed, then cut (byte cap, SNI check, forwarder death).
    Cut,
    /// Allowed, but the upstream could not be reached.
    Failed,
}

/// One connection through the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionRecord {
    /// The workload's address inside the sandbox, as the forwarder saw it.
    pub peer: String,
    /// `CONNECT` or the plain HTTP method; empty when the head never parsed.
    pub method: String,
    pub host: String,
    pub port: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<SocketAddr>,
    pub verdict: Verdict,
    /// The allowlist entry or `allow_cidrs` range that decided, or the refusal's rule name.
    pub rule: String,
    /// The words the agent got back (for a refusal) or why the connection was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    pub bytes_up: u64,
    pub bytes_down: u64,
    pub duration_ms: u64,
}

/// One connection a client made to a published port of the sandbox (`crate::ingress`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IngressRecord {
    /// The client, as the listener saw it.
    pub peer: String,
    /// The listener's address (in the pod's or container's network namespace).
    pub listen: String,
    /// The port inside the sandbox the connection was carried to.
    pub port: u16,
    /// `allowed` (carried), `denied` (a cap or the sandbox refused it: reset at once), `cut`
    /// (carried, then ended by a cap, a stall or the forwarder's end).
    pub verdict: Verdict,
    /// The rule that decided: the published port, or the cap's or refusal's name.
    pub rule: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Client to sandbox.
    pub bytes_in: u64,
    /// Sandbox to client.
    pub bytes_out: u64,
    pub duration_ms: u64,
}

/// An egress event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
/// The `event` names all start with `egress-`, apart from the lifecycle events in the same log.
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum EgressEvent {
    #[serde(rename = "egress-connection")]
    Connection(ConnectionRecord),
    /// A connection into the sandbox through a published port.
    #[serde(rename = "ingress-connection")]
    IngressConnection(IngressRecord),
    #[serde(rename = "egress-lookup")]
    Lookup {
        host: String,
        source: LookupSource,
        answers: Vec<IpAddr>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    #[serde(rename = "egress-byte-cap-crossed")]
    ByteCapCrossed { max_bytes: u64, used: u64 },
    #[serde(rename = "egress-forwarder-ready")]
    ForwarderReady { listen: String, attempt: u32 },
    #[serde(rename = "egress-forwarder-died")]
    ForwarderDied { reason: String, attempt: u32 },
    #[serde(rename = "egress-proxy-stopped")]
    ProxyStopped,
    /// The proxy added a credential to a request for `host` (its header's name, never its
    /// value); the connection's own record follows at its end.
    #[serde(rename = "egress-credential-injected")]
    CredentialInjected {
        host: String,
        port: u16,
        /// The header's name, lower-case.
        header: String,
        /// The `METHOD /path` rule that allowed the request; `None`: the credential has none.
        #[serde(skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
        method: String,
        /// The workload sent a header of that name itself; it was dropped.
        replaced_workload_header: bool,
    },
}

/// Where a lookup's answers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LookupSource {
    /// The policy's `hosts` table.
    Static,
    Dns,
}

/// One audit line: who, then what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressAudit {
    #[serde(flatten)]
    pub sandbox: SandboxRef,
    #[serde(flatten)]
    pub event: EgressEvent,
}

/// One egress record as an audit log line: the time and the audit namespace (containerd's, or
/// `docker`/`podman`), then the record.
#[derive(Debug, Serialize)]
pub struct AuditLine<'a> {
    pub time: String,
    pub namespace: &'a str,
    #[serde(flatten)]
    pub record: &'a EgressAudit,
}

impl<'a> AuditLine<'a> {
    pub fn now(namespace: &'a str, record: &'a EgressAudit) -> AuditLine<'a> {
        AuditLine {
            time: humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
            namespace,
            record,
        }
    }
}

/// Where egress records go. It must not block for long: it is called on the proxy's tasks
/// (the shim's and runsc-hardened's sinks append to the audit log through [`QueuedSink`]).
pub trait EgressAuditSink: Send + Sync + 'static {
    fn record(&self, rec: EgressAudit);

    /// Resolves once every record given before this call is written; `None`: [`record`]
    /// writes before it returns, so there is nothing to wait for.
    ///
    /// [`record`]: EgressAuditSink::record
    fn flush(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        None
    }
}

enum Queued {
    Record(Box<EgressAudit>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Hands records to a thread of their own that passes them, in order, to `S`. An append to the
/// audit log takes the log's file lock, which every shim on the node shares, and waits for
/// whoever holds it (another shim's fsync included): on the proxy's tasks that would stall the
/// shim's one async thread, and with it every connection of the pod. Records are never
/// dropped: the thread drains the queue until the last sender is gone.
pub struct QueuedSink {
    tx: std::sync::mpsc::Sender<Queued>,
}

impl QueuedSink {
    /// Starts the writer thread. Its stack is small: it serialises a record and appends it.
    pub fn new<S: EgressAuditSink>(sink: S) -> std::io::Result<QueuedSink> {
        let (tx, rx) = std::sync::mpsc::channel::<Queued>();
        std::thread::Builder::new()
            .name("egress-audit".into())
            .stack_size(256 << 10)
            .spawn(move || {
                for queued in rx {
                    match queued {
                        Queued::Record(rec) => sink.record(*rec),
                        Queued::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            })?;
        Ok(QueuedSink { tx })
    }
}

/// `sink` behind a [`QueuedSink`]; `sink` itself, writing on the caller's task, in the rare
/// case its thread cannot be started (logged: nothing is lost, only the isolation from a
/// stuck log).
pub fn queued<S: EgressAuditSink + Clone>(sink: S) -> std::sync::Arc<dyn EgressAuditSink> {
    match QueuedSink::new(sink.clone()) {
        Ok(q) => std::sync::Arc::new(q),
        Err(e) => {
            log::warn!("egress audit: no writer thread ({e}); records are written inline");
            std::sync::Arc::new(sink)
        }
    }
}

impl EgressAuditSink for QueuedSink {
    fn record(&self, rec: EgressAudit) {
        // The thread ends only when every sender is gone, this one included.
        let _ = self.tx.send(Queued::Record(Box::new(rec)));
    }

    fn flush(&self) -> Option<tokio::sync::oneshot::Receiver<()>> {
        let (done, written) = tokio::sync::oneshot::channel();
        let _ = self.tx.send(Queued::Flush(done));
        Some(written)
    }
}

/// A sink that keeps records in memory, for tests and for callers that batch.
#[derive(Debug, Default)]
pub struct MemorySink(pub Mutex<Vec<EgressAudit>>);

impl MemorySink {
    pub fn events(&self) -> Vec<EgressEvent> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|r| r.event.clone())
            .collect()
    }

    pub fn connections(&self) -> Vec<ConnectionRecord> {
        self.events()
            .into_iter()
            .filter_map(|e| match e {
                EgressEvent::Connection(c) => Some(c),
                _ => None,
            })
            .collect()
    }
}

impl EgressAuditSink for MemorySink {
    fn record(&self, rec: EgressAudit) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(rec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink that blocks on every record until the test lets it go.
    struct Gate {
        open: std::sync::Arc<(Mutex<bool>, std::sync::Condvar)>,
        inner: std::sync::Arc<MemorySink>,
    }

    impl EgressAuditSink for Gate {
        fn record(&self, rec: EgressAudit) {
            let (lock, cv) = &*self.open;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            self.inner.record(rec);
        }
    }

    fn stopped() -> EgressAudit {
        EgressAudit {
            sandbox: SandboxRef {
                sandbox_id: "sb".into(),
                container_id: "c".into(),
                policy: "p".into(),
            },
            event: EgressEvent::ProxyStopped,
        }
    }

    #[tokio::test]
    async fn a_blocked_audit_log_never_blocks_the_caller_and_a_flush_waits_for_every_record() {
        let open = std::sync::Arc::new((Mutex::new(false), std::sync::Condvar::new()));
        let inner = std::sync::Arc::new(MemorySink::default());
        let sink = QueuedSink::new(Gate {
            open: open.clone(),
            inner: inner.clone(),
        })
        .unwrap();
        // The log is stuck (another writer's lock): recording returns at once all the same.
        for _ in 0..100 {
            sink.record(stopped());
        }
        let mut flushed = sink.flush().unwrap();
        assert!(
            flushed.try_recv().is_err(),
            "flushed before anything was written"
        );
        *open.0.lock().unwrap() = true;
        open.1.notify_all();
        flushed.await.unwrap();
        assert_eq!(inner.events().len(), 100);
    }

    #[test]
    fn a_connection_record_is_one_flat_json_object() {
        let rec = EgressAudit {
            sandbox: SandboxRef {
                sandbox_id: "sb".into(),
                container_id: "c".into(),
                policy: "gvisor-hardened-agent".into(),
            },
            event: EgressEvent::Connection(ConnectionRecord {
                peer: "127.0.0.1:40000".into(),
                method: "CONNECT".into(),
                host: "api.example.test".into(),
                port: 443,
                resolved: Some("192.0.2.1:443".parse().unwrap()),
                verdict: Verdict::Allowed,
                rule: "api.example.test:443".into(),
                reason: None,
                sni: Some("api.example.test".into()),
                bytes_up: 10,
                bytes_down: 20,
                duration_ms: 5,
            }),
        };
        let v = serde_json::to_value(&rec).unwrap();
        assert_eq!(v["event"], "egress-connection");
        assert_eq!(v["sandbox_id"], "sb");
        assert_eq!(v["verdict"], "allowed");
        assert_eq!(v["resolved"], "192.0.2.1:443");
        assert!(v.get("reason").is_none());
    }

    /// The schema's egress record takes no property it does not list: every field of the
    /// credential record is listed, and its event is in the enum.
    #[test]
    fn the_schema_knows_the_credential_record() {
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../audit-record.schema.json")).unwrap();
        let egress = &schema["$defs"]["egress"]["properties"];
        let rec = EgressAudit {
            sandbox: SandboxRef {
                sandbox_id: "sb".into(),
                container_id: "c".into(),
                policy: "p".into(),
            },
            event: EgressEvent::CredentialInjected {
                host: "api.example.test".into(),
                port: 443,
                header: "x-api-key".into(),
                rule: Some("POST /v1/messages".into()),
                method: "POST".into(),
                replaced_workload_header: false,
            },
        };
        let v = serde_json::to_value(&rec).unwrap();
        assert_eq!(v["event"], "egress-credential-injected");
        assert!(egress["event"]["enum"]
            .as_array()
            .unwrap()
            .contains(&v["event"]));
        for key in v.as_object().unwrap().keys() {
            assert!(egress.get(key).is_some(), "the schema lacks {key}");
        }
    }
}
