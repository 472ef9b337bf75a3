//! The OTLP JSON mapping. Each line is parsed with the OTLP protobuf classes in
//! tests/cli_export.rs; here, what lands where.

use serde_json::{json, Value};

use super::otel::any_value;
use super::{Exporter, Format};

fn export(record: Value) -> Value {
    let mut x = Exporter::new(Format::Otel, "node-a");
    serde_json::from_str(&x.line(record.to_string().as_bytes()).unwrap()).unwrap()
}

fn attribute<'a>(log: &'a Value, key: &str) -> Option<&'a Value> {
    log["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[test]
fn one_record_is_one_logs_data_with_the_node_as_resource() {
    let out = export(
        json!({"seq": 3, "time": "2026-12-03T08:22:42.620Z", "event": "exit",
        "container_id": "c1", "pid": 9, "exit_status": 137, "exit_cause": "oom",
        "pod": {"name": "agent", "namespace": "default"},
        "policy": {"path": "/p.toml", "sha256": "", "mode": "enforce"}}),
    );
    let rl = &out["resourceLogs"][0];
    assert_eq!(
        rl["resource"]["attributes"][1],
        json!({"key": "host.name", "value": {"stringValue": "node-a"}})
    );
    let log = &rl["scopeLogs"][0]["logRecords"][0];
    assert_eq!(log["timeUnixNano"], "1796286162620000000");
    assert_eq!(log["severityNumber"], 13);
    assert_eq!(log["eventName"], "gvisor_hardened.exit");
    assert_eq!(
        attribute(log, "container.id"),
        Some(&json!({"stringValue": "c1"}))
    );
    assert_eq!(
        attribute(log, "process.exit.code"),
        Some(&json!({"intValue": "137"}))
    );
    assert_eq!(
        attribute(log, "k8s.pod.name"),
        Some(&json!({"stringValue": "agent"}))
    );
    // An empty digest (no policy file) is no attribute.
    assert_eq!(attribute(log, "gvisor_hardened.policy.sha256"), None);
}

#[test]
fn the_body_is_the_whole_record_as_an_any_value() {
    assert_eq!(
        any_value(&json!({"a": [1, true, null, "x", 1.5]})),
        json!({"kvlistValue": {"values": [{"key": "a", "value": {"arrayValue": {"values": [
            {"intValue": "1"}, {"boolValue": true}, {}, {"stringValue": "x"}, {"doubleValue": 1.5}
        ]}}}]}})
    );
}

#[test]
fn every_record_is_exported_genesis_included() {
    let out = export(
        json!({"seq": 0, "time": "2026-12-03T08:22:42.000Z", "event": "genesis",
        "node": "node-b", "policy_sha256": "", "reason": "new"}),
    );
    let rl = &out["resourceLogs"][0];
    assert_eq!(
        rl["resource"]["attributes"][1]["value"]["stringValue"],
        "node-b"
    );
    assert_eq!(rl["scopeLogs"][0]["logRecords"][0]["severityText"], "INFO");
}

#[test]
fn a_denied_connection_is_a_warning_with_server_and_client_addresses() {
    let out = export(
        json!({"time": "2026-12-03T08:22:43.000Z", "event": "egress-connection",
        "sandbox_id": "s", "container_id": "s", "policy": "agent", "peer": "10.88.0.2:40000",
        "host": "evil.test", "port": 443, "verdict": "denied", "rule": "not-listed",
        "bytes_up": 0, "bytes_down": 0, "duration_ms": 1}),
    );
    let log = &out["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(log["severityText"], "WARN");
    assert_eq!(
        attribute(log, "server.address"),
        Some(&json!({"stringValue": "evil.test"}))
    );
    assert_eq!(
        attribute(log, "client.port"),
        Some(&json!({"intValue": "40000"}))
    );
    assert_eq!(
        attribute(log, "gvisor_hardened.policy.path"),
        Some(&json!({"stringValue": "agent"}))
    );
}

#[test]
fn a_lookup_names_its_question_and_answers_and_every_record_its_ocsf_class() {
    let out = export(
        json!({"time": "2026-12-03T08:22:43.000Z", "event": "egress-lookup",
        "sandbox_id": "s", "container_id": "s", "policy": "agent", "host": "api.example.test",
        "source": "dns", "answers": ["192.0.2.1"]}), // net-scan: data
    );
    let log = &out["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(
        attribute(log, "dns.question.name"),
        Some(&json!({"stringValue": "api.example.test"}))
    );
    assert_eq!(attribute(log, "server.address"), None);
    assert_eq!(
        attribute(log, "dns.answers"),
        Some(&json!({"arrayValue": {"values": [{"stringValue": "192.0.2.1"}]}})) // net-scan: data
    );
    assert_eq!(
        attribute(log, "gvisor_hardened.ocsf.class_uid"),
        Some(&json!({"intValue": "4003"}))
    );
    let died = export(
        json!({"time": "2026-12-03T08:22:43.000Z", "event": "egress-forwarder-died",
        "sandbox_id": "s", "container_id": "s", "policy": "agent",
        "reason": "exited before HELLO", "attempt": 2}),
    );
    let log = &died["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(log["severityText"], "ERROR");
    assert_eq!(
        attribute(log, "gvisor_hardened.egress.forwarder.attempt"),
        Some(&json!({"intValue": "2"}))
    );
    assert_eq!(
        attribute(log, "gvisor_hardened.ocsf.class_uid"),
        Some(&json!({"intValue": "6002"}))
    );
    let cap = export(
        json!({"time": "2026-12-03T08:22:43.000Z", "event": "egress-byte-cap-crossed",
        "sandbox_id": "s", "container_id": "s", "policy": "agent",
        "max_bytes": 10, "used": 12}),
    );
    let log = &cap["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    assert_eq!(
        attribute(log, "gvisor_hardened.egress.used_bytes"),
        Some(&json!({"intValue": "12"}))
    );
    assert_eq!(
        attribute(log, "gvisor_hardened.ocsf.class_uid"),
        Some(&json!({"intValue": "2004"}))
    );
    let injected = export(
        json!({"time": "2026-12-03T08:22:43.000Z", "event": "egress-credential-injected",
        "sandbox_id": "s", "container_id": "s", "policy": "agent", "host": "api.example.test",
        "port": 443, "header": "x-api-key", "method": "POST", "replaced_workload_header": false}),
    );
    let log = &injected["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
    for (key, value) in [
        ("http.request.method", json!({"stringValue": "POST"})),
        (
            "gvisor_hardened.egress.credential.header",
            json!({"stringValue": "x-api-key"}),
        ),
        ("server.address", json!({"stringValue": "api.example.test"})),
        (
            "gvisor_hardened.ocsf.class_uid",
            json!({"intValue": "4002"}),
        ),
    ] {
        assert_eq!(attribute(log, key), Some(&value), "{key}");
    }
}
