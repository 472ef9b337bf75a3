//! Audit records as OpenTelemetry logs in OTLP JSON: one `LogsData` per record, one per line,
//! so a line is never held back waiting for a batch (`--follow`) and any line can be posted to
//! an OTLP/HTTP logs endpoint alone.
//!
//! The resource is the node (`host.name`, `service.name`); the record is the body (an AnyValue
//! kvlist of the redacted record, so nothing is lost); attributes use the semantic conventions
//! where one exists (`container.id`, `container.image.name`, `k8s.*`, `process.pid`,
//! `process.exit.code`, `server.address`/`server.port`, `client.address`/`client.port`, and for
//! name lookups `dns.question.name`/`dns.answers`, for injected credentials
//! `http.request.method`) and `gvisor_hardened.*` for the rest;
//! `gvisor_hardened.ocsf.class_uid` names the class the OCSF export gives the same record.
//! int64 fields are decimal strings, as OTLP JSON has them.

use serde_json::{json, Value};

use super::{Record, Severity};

pub const SCOPE: &str = "gvisor-hardened.audit";

/// OTel's severity number and text.
fn severity(s: Severity) -> (u64, &'static str) {
    match s {
        Severity::Info => (9, "INFO"),
        Severity::Low => (13, "WARN"),
        Severity::Medium => (13, "WARN"),
        Severity::High => (17, "ERROR"),
    }
}

/// A JSON value as an OTLP AnyValue.
pub fn any_value(v: &Value) -> Value {
    match v {
        Value::Null => json!({}),
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => json!({"intValue": i.to_string()}),
            // Beyond i64: OTLP has no unsigned 64-bit integer.
            (None, Some(u)) => json!({"stringValue": u.to_string()}),
            _ => json!({"doubleValue": n.as_f64().unwrap_or(0.0)}),
        },
        Value::String(s) => json!({"stringValue": s}),
        Value::Array(items) => {
            json!({"arrayValue": {"values": items.iter().map(any_value).collect::<Vec<_>>()}})
        }
        Value::Object(map) => json!({"kvlistValue": {"values": map
            .iter()
            .map(|(k, v)| json!({"key": k, "value": any_value(v)}))
            .collect::<Vec<_>>()}}),
    }
}

fn attr(key: &str, value: Value) -> Value {
    json!({"key": key, "value": value})
}

fn string(s: &str) -> Value {
    json!({"stringValue": s})
}

fn int(i: u64) -> Value {
    json!({"intValue": i.to_string()})
}

/// The record's attributes, by semantic convention where there is one.
fn attributes(rec: &Record<'_>) -> Vec<Value> {
    let mut a = vec![attr(
        "gvisor_hardened.audit.line_sha256",
        string(&rec.line_sha256),
    )];
    if let Some(seq) = rec.u64("seq") {
        a.push(attr("gvisor_hardened.audit.seq", int(seq)));
    }
    // The class the OCSF export gives the same record, so the two exports can be joined.
    if let Some(class) = super::ocsf::class_of(&rec.event, rec.str("verdict")) {
        a.push(attr("gvisor_hardened.ocsf.class_uid", int(class)));
    }
    let lookup = rec.event == "egress-lookup";
    let genesis = rec.event == crate::audit_chain::GENESIS_EVENT;
    let strings = [
        ("container_id", "container.id"),
        ("image", "container.image.name"),
        ("namespace", "gvisor_hardened.containerd.namespace"),
        ("exec_id", "gvisor_hardened.exec.id"),
        ("exit_cause", "gvisor_hardened.exit.cause"),
        ("error", "gvisor_hardened.error"),
        ("sandbox_id", "gvisor_hardened.sandbox.id"),
        ("verdict", "gvisor_hardened.egress.verdict"),
        ("rule", "gvisor_hardened.egress.rule"),
        (
            "reason",
            if genesis {
                "gvisor_hardened.audit.genesis_reason"
            } else {
                "gvisor_hardened.egress.reason"
            },
        ),
        // A lookup's host is the question asked, not a server dialled.
        (
            "host",
            if lookup {
                "dns.question.name"
            } else {
                "server.address"
            },
        ),
        ("source", "gvisor_hardened.egress.lookup.source"),
        ("listen", "gvisor_hardened.egress.forwarder.listen"),
        // An injected credential: the request's method and the header's name (never a value).
        ("method", "http.request.method"),
        ("header", "gvisor_hardened.egress.credential.header"),
    ];
    for (field, key) in strings {
        if let Some(v) = rec.str(field) {
            a.push(attr(key, string(v)));
        }
    }
    if let Some(answers) = rec.value.get("answers").and_then(Value::as_array) {
        let ips: Vec<Value> = answers
            .iter()
            .filter_map(Value::as_str)
            .map(string)
            .collect();
        a.push(attr("dns.answers", json!({"arrayValue": {"values": ips}})));
    }
    let ints = [
        ("pid", "process.pid"),
        ("exit_status", "process.exit.code"),
        ("port", "server.port"),
        ("bytes_up", "gvisor_hardened.egress.bytes_up"),
        ("bytes_down", "gvisor_hardened.egress.bytes_down"),
        ("duration_ms", "gvisor_hardened.egress.duration_ms"),
        ("max_bytes", "gvisor_hardened.egress.max_bytes"),
        ("used", "gvisor_hardened.egress.used_bytes"),
        ("attempt", "gvisor_hardened.egress.forwarder.attempt"),
    ];
    for (field, key) in ints {
        if let Some(v) = rec.u64(field) {
            a.push(attr(key, int(v)));
        }
    }
    if let Some(peer) = rec
        .str("peer")
        .and_then(|p| p.parse::<std::net::SocketAddr>().ok())
    {
        a.push(attr("client.address", string(&peer.ip().to_string())));
        a.push(attr("client.port", int(u64::from(peer.port()))));
    }
    if let Some(pod) = rec.value.get("pod") {
        for (field, key) in [
            ("name", "k8s.pod.name"),
            ("namespace", "k8s.namespace.name"),
            ("uid", "k8s.pod.uid"),
            ("container_name", "k8s.container.name"),
            ("sandbox_id", "gvisor_hardened.pod.sandbox_id"),
        ] {
            if let Some(v) = pod.get(field).and_then(Value::as_str) {
                a.push(attr(key, string(v)));
            }
        }
    }
    let (name, sha256, mode) = rec.policy();
    for (key, v) in [
        ("gvisor_hardened.policy.path", name),
        ("gvisor_hardened.policy.sha256", sha256),
        ("gvisor_hardened.policy.mode", mode),
    ] {
        if let Some(v) = v {
            a.push(attr(key, string(v)));
        }
    }
    a
}

/// One record as one `LogsData`.
pub fn logs_data(rec: &Record<'_>) -> Value {
    let (number, text) = severity(rec.severity());
    let nanos = (rec.time_ms.max(0) as u64) * 1_000_000;
    let record = json!({
        "timeUnixNano": nanos.to_string(),
        "observedTimeUnixNano": nanos.to_string(),
        "severityNumber": number,
        "severityText": text,
        "eventName": format!("gvisor_hardened.{}", rec.event),
        "body": any_value(&rec.value),
        "attributes": attributes(rec),
    });
    json!({"resourceLogs": [{
        "resource": {"attributes": [
            attr("service.name", string("gvisor-hardened")),
            attr("host.name", string(rec.node)),
        ]},
        "scopeLogs": [{
            "scope": {"name": SCOPE, "version": env!("CARGO_PKG_VERSION")},
            "logRecords": [record],
        }],
    }]})
}
