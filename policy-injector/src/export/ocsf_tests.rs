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

fn egress_event(event: &str, extra: Value) -> Value {
    let mut r = json!({
        "seq": 11, "prev": "00", "time": "2026-12-03T08:22:44.000Z", "event": event,
        "namespace": "k8s.io", "sandbox_id": "c1", "container_id": "c1",
        "policy": "gvisor-hardened-agent",
    });
    r.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    r
}

#[test]
fn a_genesis_is_event_log_activity_and_names_the_node() {
    let mut x = Exporter::new(Format::Ocsf, "exporting-host");
    let genesis = |reason: &str| {
        json!({"seq": 0, "prev": "00", "time": "2026-12-03T08:22:42.000Z",
            "event": "genesis", "node": "node-a", "policy_sha256": "", "reason": reason})
    };
    let mut line = |v: Value| -> Value {
        serde_json::from_str(&x.line(v.to_string().as_bytes()).unwrap()).unwrap()
    };
    let new = line(genesis("new"));
    assert_eq!(new["class_uid"], 1008);
    assert_eq!(new["type_uid"], 100806);
    assert_eq!(new["activity_name"], "Start");
    assert_eq!(new["device"]["hostname"], "node-a");
    assert_eq!(new["log_name"], "gvisor-hardened audit log");
    assert_eq!(line(genesis("rotated"))["activity_id"], 5);
    let rechained = line(genesis("after-cut-line"));
    assert_eq!(rechained["activity_id"], 99);
    assert_eq!(rechained["status_detail"], "genesis: after-cut-line");
    let e = line(lifecycle("delete", json!({})));
    assert_eq!(e["device"]["hostname"], "node-a");
    assert_eq!(x.line(b"{\"cut"), None);
    let unknown = json!({"event": "from-a-newer-writer"});
    assert_eq!(x.line(unknown.to_string().as_bytes()), None);
    assert_eq!((x.skipped, x.unparsed, x.exported), (1, 1, 4));
}

#[test]
fn a_lookup_is_dns_activity_with_its_question_and_answers() {
    let out = export(&[
        egress_event(
            "egress-lookup",
            json!({"host": "api.example.test", "source": "dns",
                "answers": ["192.0.2.1", "2001:db8::1"]}), // net-scan: data
        ),
        egress_event(
            "egress-lookup",
            json!({"host": "gone.example.test", "source": "dns", "answers": [],
                "error": "no addresses"}),
        ),
        egress_event(
            "egress-lookup",
            json!({"host": "pinned.test", "source": "static", "answers": ["192.0.2.9"]}), // net-scan: data
        ),
    ]);
    let ok = &out[0];
    assert_eq!(ok["class_uid"], 4003);
    assert_eq!(ok["type_uid"], 400302);
    assert_eq!(ok["category_uid"], 4);
    assert_eq!(ok["query"]["hostname"], "api.example.test");
    assert_eq!(
        ok["answers"][0],
        json!({"rdata": "192.0.2.1", "type": "A", "class": "IN"})
    ); // net-scan: data
    assert_eq!(ok["answers"][1]["type"], "AAAA");
    assert_eq!(ok["rcode_id"], 0);
    assert_eq!(ok["status_id"], 1);
    assert_eq!(ok["src_endpoint"]["uid"], "c1");
    assert_eq!(ok["src_endpoint"]["container"]["uid"], "c1");
    assert_eq!(ok["metadata"]["correlation_uid"], "c1");
    assert_eq!(ok["policy"]["name"], "gvisor-hardened-agent");
    let failed = &out[1];
    assert_eq!(failed["status_id"], 2);
    assert_eq!(failed["status_detail"], "no addresses");
    assert!(failed.get("answers").is_none() && failed.get("rcode_id").is_none());
    assert_eq!(
        failed["message"],
        "lookup gone.example.test (dns): no addresses"
    );
    // A static answer had no DNS response: no response code is claimed.
    assert!(out[2].get("rcode_id").is_none());
    assert_eq!(out[2]["answers"][0]["rdata"], "192.0.2.9"); // net-scan: data
}

#[test]
fn forwarder_and_proxy_events_are_application_lifecycle() {
    let out = export(&[
        egress_event(
            "egress-forwarder-ready",
            json!({"listen": "127.0.0.1:3128", "attempt": 1}), // net-scan: data
        ),
        egress_event(
            "egress-forwarder-died",
            json!({"reason": "exited: signal 9", "attempt": 1}),
        ),
        egress_event(
            "egress-forwarder-ready",
            json!({"listen": "127.0.0.1:3128", "attempt": 2}), // net-scan: data
        ),
        egress_event("egress-proxy-stopped", json!({})),
    ]);
    let activities: Vec<_> = out.iter().map(|e| e["activity_name"].clone()).collect();
    assert_eq!(
        activities,
        [
            json!("Start"),
            json!("Stop"),
            json!("Restart"),
            json!("Stop")
        ]
    );
    for e in &out {
        assert_eq!(e["class_uid"], 6002);
        assert_eq!(e["category_uid"], 6);
        assert_eq!(e["metadata"]["correlation_uid"], "c1");
    }
    assert_eq!(out[0]["app"]["name"], "gvisor-hardened egress forwarder");
    assert_eq!(out[0]["severity_id"], 1);
    let died = &out[1];
    assert_eq!(
        (died["status_id"].clone(), died["severity_id"].clone()),
        (json!(2), json!(4))
    );
    assert_eq!(died["status_detail"], "exited: signal 9");
    assert_eq!(out[2]["type_uid"], 600205);
    assert_eq!(out[3]["app"]["name"], "gvisor-hardened egress proxy");
    assert_eq!(out[3]["status_id"], 1);
}

#[test]
fn crossing_the_byte_cap_is_a_finding_against_egress_max_bytes() {
    let e = &export(&[egress_event(
        "egress-byte-cap-crossed",
        json!({"max_bytes": 1048576, "used": 1049000}),
    )])[0];
    assert_eq!(e["class_uid"], 2004);
    assert_eq!(e["severity_id"], 2);
    assert_eq!(e["finding_info"]["analytic"]["name"], "egress.max_bytes");
    assert_eq!(
        e["finding_info"]["title"],
        "egress byte cap crossed by sandbox c1: 1049000 of 1048576 bytes"
    );
    assert_eq!(e["evidences"][0]["data"]["used"], 1049000);
    assert_eq!(e["evidences"][0]["src_endpoint"]["uid"], "c1");
    assert_eq!(e["resources"][0]["uid"], "c1");
    assert_eq!(e["disposition_id"], 2);
}

#[test]
fn an_injected_credential_is_http_activity_naming_the_header_never_a_value() {
    let out = export(&[
        egress_event(
            "egress-credential-injected",
            json!({"host": "api.example.test", "port": 443, "header": "x-api-key",
                "rule": "POST api.example.test/v1/messages", "method": "POST",
                "replaced_workload_header": true}),
        ),
        egress_event(
            "egress-credential-injected",
            json!({"host": "git.example.test", "port": 443, "header": "authorization",
                "method": "PROPFIND", "replaced_workload_header": false}),
        ),
    ]);
    let post = &out[0];
    assert_eq!(post["class_uid"], 4002);
    assert_eq!(post["type_uid"], 400206);
    assert_eq!(post["activity_name"], "Post");
    assert_eq!(post["http_request"]["http_method"], "POST");
    assert_eq!(post["http_request"]["url"]["hostname"], "api.example.test");
    assert_eq!(post["http_request"]["url"]["port"], 443);
    assert_eq!(
        post["http_request"]["url"]["url_string"],
        "https://api.example.test"
    );
    assert_eq!(post["unmapped"]["header"], "x-api-key");
    assert!(post["http_request"].get("http_headers").is_none());
    assert_eq!(post["dst_endpoint"]["hostname"], "api.example.test");
    assert_eq!(post["src_endpoint"]["uid"], "c1");
    assert_eq!(
        post["firewall_rule"]["name"],
        "POST api.example.test/v1/messages"
    );
    assert_eq!(post["metadata"]["correlation_uid"], "c1");
    assert!(post["message"]
        .as_str()
        .unwrap()
        .contains("workload's own header of that name was dropped"));
    let other = &out[1];
    assert_eq!(other["type_uid"], 400299);
    assert_eq!(other["type_name"], "HTTP Activity: Other");
    // Outside OCSF's method list: the method only in `unmapped`.
    assert!(other["http_request"].get("http_method").is_none());
    assert_eq!(other["unmapped"]["method"], "PROPFIND");
    assert!(other.get("firewall_rule").is_none());
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
