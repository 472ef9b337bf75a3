//! The OCSF mapping, record by record. The events are checked against OCSF's own schema in
//! tests/cli_export.rs; here, that each record lands in its class with the fields that say what
//! happened.

use serde_json::{json, Value};

use super::{Exporter, Format};

fn export(records: &[Value]) -> Vec<Value> {
    let mut x = Exporter::new(Format::Ocsf, "exporting-host");
    records
        .iter()
        .filter_map(|r| x.line(r.to_string().as_bytes()))
        .map(|l| serde_json::from_str(&l).unwrap())
        .collect()
}

fn lifecycle(event: &str, extra: Value) -> Value {
    let mut r = json!({
        "seq": 7, "prev": "00", "time": "2026-12-03T08:22:42.620Z", "event": event,
        "namespace": "k8s.io", "container_id": "c1",
        "image": "docker.io/library/busybox:latest",
        "pod": {"name": "agent", "namespace": "default",
                "uid": "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "sandbox_id": "c1"},
        "policy": {"path": "/etc/gvisor-hardened/policy.toml", "sha256": "ab", "mode": "enforce"},
        "oom": false, "timed_out": false, "process_limit_exceeded": false,
    });
    r.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    r
}

fn egress(verdict: &str) -> Value {
    json!({
        "seq": 9, "prev": "00", "time": "2026-12-03T08:22:43.000Z", "event": "egress-connection",
        "namespace": "k8s.io", "sandbox_id": "c1", "container_id": "c1",
        "policy": "gvisor-hardened-agent", "peer": "10.88.0.2:40000", "method": "CONNECT",
        "host": "api.example.test", "port": 443, "resolved": "192.0.2.1:443",
        "verdict": verdict, "rule": "api.example.test:443", "bytes_up": 300,
        "bytes_down": 4000, "duration_ms": 20,
    })
}

#[test]
fn lifecycle_records_are_process_activity_with_the_container_and_the_policy() {
    let e = &export(&[lifecycle("start", json!({"pid": 4242}))])[0];
    assert_eq!(e["class_uid"], 1007);
    assert_eq!(e["activity_id"], 1);
    assert_eq!(e["type_uid"], 100701);
    assert_eq!(e["time"], 1796286162620_i64);
    assert_eq!(e["severity_id"], 1);
    assert_eq!(e["process"]["pid"], 4242);
    assert_eq!(e["process"]["uid"], "c1");
    assert_eq!(e["process"]["container"]["uid"], "c1");
    assert_eq!(
        e["process"]["container"]["pod_uuid"],
        "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
    );
    assert_eq!(e["policy"]["name"], "/etc/gvisor-hardened/policy.toml");
    assert_eq!(e["policy"]["is_applied"], true);
    assert_eq!(e["device"]["hostname"], "exporting-host");
    assert_eq!(e["unmapped"]["event"], "start");
    assert_eq!(e["metadata"]["sequence"], 7);
}

#[test]
fn an_exit_by_a_limit_is_a_terminate_with_its_code_and_a_higher_severity() {
    let e = &export(&[lifecycle(
        "exit",
        json!({"pid": 1, "exit_status": 137, "exit_cause": "oom", "oom": true}),
    )])[0];
    assert_eq!(e["activity_id"], 2);
    assert_eq!(e["exit_code"], 137);
    assert_eq!(e["severity_id"], 2);
    assert_eq!(e["message"], "exit c1: oom");
}

#[test]
fn a_hardened_create_is_modified_and_an_audit_mode_create_observed() {
    let decisions = json!({"decisions": [{"rule": "root", "field": "root.readonly",
        "action": "set", "before": null, "after": true, "reason": "r"}]});
    let e = &export(&[lifecycle("create", decisions.clone())])[0];
    assert_eq!(
        (e["activity_id"].clone(), e["action_id"].clone()),
        (json!(99), json!(4))
    );
    let mut audit = lifecycle("create", decisions);
    audit["policy"]["mode"] = json!("audit");
    let e = &export(&[audit])[0];
    assert_eq!(e["action_id"], 3);
    assert_eq!(e["policy"]["is_applied"], false);
}

#[test]
fn a_rejected_create_is_a_detection_finding_naming_the_rule() {
    let e = &export(&[lifecycle(
        "create-rejected",
        json!({"error": "rejected by policy: mounts: mounts[/host]: bind of denied host path"}),
    )])[0];
    assert_eq!(e["class_uid"], 2004);
    assert_eq!(e["type_uid"], 200401);
    assert_eq!(e["severity_id"], 3);
    assert_eq!(e["action_id"], 2);
    assert_eq!(e["finding_info"]["analytic"]["name"], "mounts");
    assert_eq!(e["evidences"][0]["process"]["uid"], "c1");
    assert_eq!(e["finding_info"]["uid"], e["metadata"]["uid"]);
}

#[test]
fn egress_connections_are_network_activity_and_denied_ones_findings() {
    let out = export(&[egress("allowed"), egress("cut"), egress("denied")]);
    assert_eq!(out[0]["class_uid"], 4001);
    assert_eq!(out[0]["activity_id"], 2);
    assert_eq!(out[0]["dst_endpoint"]["hostname"], "api.example.test");
    assert_eq!(out[0]["dst_endpoint"]["ip"], "192.0.2.1");
    assert_eq!(out[0]["src_endpoint"]["port"], 40000);
    assert_eq!(out[0]["traffic"]["bytes_out"], 300);
    assert_eq!(out[0]["firewall_rule"]["name"], "api.example.test:443");
    assert_eq!(out[0]["policy"]["name"], "gvisor-hardened-agent");
    assert_eq!(out[1]["activity_id"], 3);
    assert_eq!(out[1]["disposition_id"], 6);
    assert_eq!(out[2]["class_uid"], 2004);
    assert_eq!(out[2]["evidences"][0]["dst_endpoint"]["port"], 443);
}

#[test]
fn genesis_and_lookups_are_not_exported_but_name_the_node() {
    let mut x = Exporter::new(Format::Ocsf, "exporting-host");
    let genesis = json!({"seq": 0, "prev": "00", "time": "2026-12-03T08:22:42.000Z",
        "event": "genesis", "node": "node-a", "policy_sha256": "", "reason": "new"});
    assert_eq!(x.line(genesis.to_string().as_bytes()), None);
    let lookup = json!({"event": "egress-lookup", "host": "a", "source": "dns", "answers": []});
    assert_eq!(x.line(lookup.to_string().as_bytes()), None);
    assert_eq!(x.line(b"{\"cut"), None);
    let e: Value = serde_json::from_str(
        &x.line(lifecycle("delete", json!({})).to_string().as_bytes())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(e["device"]["hostname"], "node-a");
    assert_eq!((x.skipped, x.unparsed, x.exported), (2, 1, 1));
}

#[test]
fn raw_data_is_the_line_and_metadata_uid_its_chain_hash() {
    let line = lifecycle("start", json!({})).to_string();
    let mut x = Exporter::new(Format::Ocsf, "h");
    let e: Value = serde_json::from_str(&x.line(line.as_bytes()).unwrap()).unwrap();
    assert_eq!(e["raw_data"], line);
    assert_eq!(
        e["metadata"]["uid"],
        crate::audit_chain::hash_line(line.as_bytes()).to_string()
    );
}

#[test]
fn env_values_in_an_old_record_are_redacted_in_the_export() {
    let rec = lifecycle(
        "create",
        json!({"decisions": [{"rule": "environment", "field": "process.env[HOME]",
            "action": "set", "before": "HOME=/", "after": "HOME=/planted-secret", "reason": "r"}]}),
    );
    let e = &export(&[rec])[0];
    let text = e.to_string();
    assert!(!text.contains("planted-secret"), "{text}");
    assert!(text.contains("HOME=<redacted>"));
}
