//! What every OCSF event of the export is built from (`ocsf` for processes, connections and
//! the log, `ocsf_egress` for the other egress records): the class ids, the common fields
//! (`base`), the container and the endpoints of a record.

use serde_json::{json, Map, Value};

use super::{Record, Severity};

pub const VERSION: &str = "1.8.0";
pub const PROFILES: [&str; 3] = ["host", "container", "security_control"];

pub const PROCESS_ACTIVITY: u64 = 1007;
pub const EVENT_LOG_ACTIVITY: u64 = 1008;
pub const DETECTION_FINDING: u64 = 2004;
pub const NETWORK_ACTIVITY: u64 = 4001;
pub const HTTP_ACTIVITY: u64 = 4002;
pub const DNS_ACTIVITY: u64 = 4003;
pub const APPLICATION_LIFECYCLE: u64 = 6002;

fn severity(s: Severity) -> (u64, &'static str) {
    match s {
        Severity::Info => (1, "Informational"),
        Severity::Low => (2, "Low"),
        Severity::Medium => (3, "Medium"),
        Severity::High => (4, "High"),
    }
}

/// What every class has: classification, time, severity, metadata, device, policy, the record.
pub(super) fn base(
    rec: &Record<'_>,
    class: (u64, &str),
    category: (u64, &str),
    activity: (u64, &str),
) -> Map<String, Value> {
    let (sev_id, sev) = severity(rec.severity());
    let mut metadata = json!({
        "version": VERSION,
        "product": {
            "name": "gvisor-hardened",
            "vendor_name": "gvisor-hardened",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "profiles": PROFILES,
        "uid": rec.line_sha256,
        "event_code": rec.event,
        "log_name": "gvisor-hardened audit log",
    });
    if let Some(t) = rec.str("time") {
        metadata["original_time"] = json!(t);
    }
    if let Some(seq) = rec.u64("seq") {
        metadata["sequence"] = json!(seq);
    }
    if rec.event.starts_with("egress-") {
        if let Some(sandbox) = rec.str("sandbox_id") {
            metadata["correlation_uid"] = json!(sandbox);
        }
    }
    let mut e = Map::new();
    e.insert("class_uid".into(), json!(class.0));
    e.insert("class_name".into(), json!(class.1));
    e.insert("category_uid".into(), json!(category.0));
    e.insert("category_name".into(), json!(category.1));
    e.insert("activity_id".into(), json!(activity.0));
    e.insert("activity_name".into(), json!(activity.1));
    e.insert("type_uid".into(), json!(class.0 * 100 + activity.0));
    e.insert(
        "type_name".into(),
        json!(format!(
            "{}: {}",
            class.1,
            if activity.0 == 99 {
                "Other"
            } else {
                activity.1
            }
        )),
    );
    e.insert("time".into(), json!(rec.time_ms));
    e.insert("severity_id".into(), json!(sev_id));
    e.insert("severity".into(), json!(sev));
    e.insert("metadata".into(), metadata);
    e.insert(
        "device".into(),
        json!({"type_id": 1, "type": "Server", "hostname": rec.node}),
    );
    if let Some(p) = policy(rec) {
        e.insert("policy".into(), p);
    }
    e.insert("raw_data".into(), json!(rec.raw));
    e.insert("unmapped".into(), rec.value.clone());
    e
}

/// The policy in force: its file's path (or name, on egress records) and the digest of its
/// bytes; `is_applied` is false in audit mode (the spec ran unchanged).
fn policy(rec: &Record<'_>) -> Option<Value> {
    let (name, sha256, mode) = rec.policy();
    let mut p = json!({"name": name?, "type": "gvisor-hardened policy"});
    if let Some(sha) = sha256 {
        p["uid"] = json!(sha);
    }
    if let Some(mode) = mode {
        p["is_applied"] = json!(mode == "enforce");
        p["data"] = json!({"mode": mode});
    }
    Some(p)
}

/// A pod uid is a UUID; OCSF's `pod_uuid` takes nothing else.
fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The container a record is about.
pub(super) fn container(rec: &Record<'_>) -> Option<Value> {
    let id = rec.str("container_id")?;
    let pod = rec.value.get("pod");
    let pod_str = |k: &str| pod.and_then(|p| p.get(k)).and_then(Value::as_str);
    let mut c = json!({
        "uid": id,
        "name": pod_str("container_name").unwrap_or(id),
        "runtime": "runsc",
    });
    if let Some(image) = rec.str("image") {
        // The record names the image by reference only: the reference is its id here.
        c["image"] = json!({"uid": image, "name": image});
    }
    if pod.is_some() {
        c["orchestrator"] = json!("Kubernetes");
    }
    if let Some(uid) = pod_str("uid").filter(|u| is_uuid(u)) {
        c["pod_uuid"] = json!(uid);
    }
    Some(c)
}

/// The sandbox an egress record is about, as an endpoint: its id and the container the
/// forwarder runs in.
pub(super) fn sandbox_endpoint(rec: &Record<'_>) -> Value {
    let mut src = json!({"uid": rec.str("sandbox_id").unwrap_or("")});
    if let Some(c) = container(rec) {
        src["container"] = c;
    }
    src
}

/// The endpoints and direction of an egress record: the workload inside the sandbox, the host
/// it asked for (and the address dialled, when it was).
pub(super) fn endpoints(rec: &Record<'_>) -> (Value, Value, Value) {
    let src = match rec
        .str("peer")
        .and_then(|p| p.parse::<std::net::SocketAddr>().ok())
    {
        Some(addr) => {
            let mut src = json!({"ip": addr.ip().to_string(), "port": addr.port()});
            if let Some(c) = container(rec) {
                src["container"] = c;
            }
            src
        }
        None => sandbox_endpoint(rec),
    };
    let mut dst = json!({"hostname": rec.str("host").unwrap_or("")});
    if let Some(port) = rec.u64("port") {
        dst["port"] = json!(port);
    }
    if let Some(ip) = rec
        .str("resolved")
        .and_then(|r| r.parse::<std::net::SocketAddr>().ok())
    {
        dst["ip"] = json!(ip.ip().to_string());
    }
    let conn = json!({"direction_id": 2, "direction": "Outbound", "protocol_name": "tcp"});
    (src, dst, conn)
}
