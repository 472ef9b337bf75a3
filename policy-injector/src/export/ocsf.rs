//! Audit records as OCSF events (Open Cybersecurity Schema Framework 1.8.0, profiles `host`,
//! `container` and `security_control`), one class per kind of record:
//!
//! | records | OCSF class |
//! | --- | --- |
//! | create, create-failed, start, exec, exec-start, exec-exit, exit, update, oom, timeout, idle-timeout, delete | Process Activity (1007) |
//! | egress-connection allowed, cut, failed | Network Activity (4001) |
//! | create-rejected, exec-rejected, update-rejected, egress-connection denied, egress-byte-cap-crossed | Detection Finding (2004) |
//! | egress-lookup | DNS Activity (4003) |
//! | egress-credential-injected | HTTP Activity (4002) |
//! | egress-forwarder-ready, egress-forwarder-died, egress-proxy-stopped | Application Lifecycle (6002) |
//! | genesis | Event Log Activity (1008) |
//!
//! Why these classes for the records that are not a process or a connection (`ocsf_egress`):
//! - A name lookup is the proxy resolving an allowlisted host before it dials: a question and
//!   its answers (or its error), which is what DNS Activity carries (`query`, `answers`,
//!   `rcode`). A lookup answered from the policy's static hosts table is the same question
//!   answered without the network; `unmapped.source` says which.
//! - A credential injected is one HTTP request the proxy let through after terminating its
//!   TLS and adding a header: HTTP Activity, its activity the request's method, the
//!   method/path rule that allowed it as the firewall rule. The header's name is in
//!   `unmapped.header` and the message, not in `http_request.http_headers`, whose entries
//!   need a value (the record never holds one).
//! - The forwarder (the process in the sandbox that carries its traffic out) and the proxy (the
//!   shim's end) are services of the runtime that start, restart and stop: Application Lifecycle
//!   (Start, Restart, Stop). Process Activity would need a pid and a process the record does not
//!   name, and the proxy is no process of its own. A death is a Stop with status Failure.
//! - Crossing the egress byte cap is the policy's limit taking effect (every stream of the
//!   sandbox is cut): a finding against the rule `egress.max_bytes`, like a refusal, not a
//!   connection (no endpoint of its own).
//! - A genesis record is the log itself beginning a file (a new log, a rotation, a new chain
//!   after a damaged line): Event Log Activity (Start, Rotate, Other).
//!
//! Every event keeps the redacted record whole under `unmapped` and its line under `raw_data`;
//! `metadata.uid` is the sha256 of the original line (what the chain's next `prev` names).
//! Egress events carry the sandbox id as `metadata.correlation_uid`, so a sandbox's lookups,
//! connections and forwarder events group together.

use serde_json::{json, Value};

use super::ocsf_base::{base, container, endpoints};
pub use super::ocsf_base::{
    APPLICATION_LIFECYCLE, DETECTION_FINDING, DNS_ACTIVITY, EVENT_LOG_ACTIVITY, HTTP_ACTIVITY,
    NETWORK_ACTIVITY, PROCESS_ACTIVITY, PROFILES, VERSION,
};
use super::ocsf_egress;
use super::Record;

/// The OCSF class of an event (`verdict`: the egress connection's), or `None` for an event this
/// version does not know (a newer writer's): such records are counted as skipped, not guessed.
/// The OTel export names the same class (`gvisor_hardened.ocsf.class_uid`).
pub fn class_of(event: &str, verdict: Option<&str>) -> Option<u64> {
    Some(match event {
        "create" | "create-failed" | "start" | "exec" | "exec-start" | "exec-exit" | "exit"
        | "update" | "oom" | "timeout" | "idle-timeout" | "delete" => PROCESS_ACTIVITY,
        "create-rejected" | "exec-rejected" | "update-rejected" | "egress-byte-cap-crossed" => {
            DETECTION_FINDING
        }
        "egress-connection" if verdict == Some("denied") => DETECTION_FINDING,
        "egress-connection" => NETWORK_ACTIVITY,
        "egress-lookup" => DNS_ACTIVITY,
        "egress-credential-injected" => HTTP_ACTIVITY,
        "egress-forwarder-ready" | "egress-forwarder-died" | "egress-proxy-stopped" => {
            APPLICATION_LIFECYCLE
        }
        crate::audit_chain::GENESIS_EVENT => EVENT_LOG_ACTIVITY,
        _ => return None,
    })
}

/// The event for one record, or `None` when no class fits it.
pub fn event(rec: &Record<'_>) -> Option<Value> {
    Some(match class_of(&rec.event, rec.str("verdict"))? {
        PROCESS_ACTIVITY => process_activity(rec),
        DETECTION_FINDING if rec.event == "egress-byte-cap-crossed" => {
            ocsf_egress::byte_cap_finding(rec)
        }
        DETECTION_FINDING => refusal(rec),
        NETWORK_ACTIVITY => network_activity(rec),
        DNS_ACTIVITY => ocsf_egress::dns_activity(rec),
        HTTP_ACTIVITY => ocsf_egress::credential_injected(rec),
        APPLICATION_LIFECYCLE => ocsf_egress::application_lifecycle(rec),
        _ => event_log_activity(rec),
    })
}

/// The process a lifecycle record is about: the container's init, or one exec.
fn process(rec: &Record<'_>) -> Value {
    let id = rec.str("container_id").unwrap_or("");
    let uid = match rec.str("exec_id") {
        Some(exec) => format!("{id}/{exec}"),
        None => id.to_string(),
    };
    let mut p = json!({"uid": uid});
    if let Some(pid) = rec.u64("pid") {
        p["pid"] = json!(pid);
    }
    if let Some(c) = container(rec) {
        p["container"] = c;
    }
    p
}

fn process_activity(rec: &Record<'_>) -> Value {
    let activity = match rec.event.as_str() {
        "start" | "exec-start" => (1, "Launch"),
        "exit" | "exec-exit" => (2, "Terminate"),
        "create" | "create-failed" => (99, "Create"),
        "exec" => (99, "Exec"),
        "update" => (99, "Update"),
        "oom" => (99, "OOM"),
        "timeout" => (99, "Timeout"),
        "idle-timeout" => (99, "Idle Timeout"),
        _ => (99, "Delete"),
    };
    let mut e = base(
        rec,
        (PROCESS_ACTIVITY, "Process Activity"),
        (1, "System Activity"),
        activity,
    );
    e.insert("actor".into(), json!({"app_name": "gvisor-hardened"}));
    e.insert("process".into(), process(rec));
    let failed = rec.event == "create-failed";
    e.insert("status_id".into(), json!(if failed { 2 } else { 1 }));
    e.insert(
        "status".into(),
        json!(if failed { "Failure" } else { "Success" }),
    );
    if let Some(err) = rec.str("error") {
        e.insert("status_detail".into(), json!(err));
    }
    if let Some(code) = rec.u64("exit_status") {
        e.insert("exit_code".into(), json!(code));
    }
    if matches!(rec.event.as_str(), "create" | "exec") {
        // The policy's verdict on what it admitted: modified (hardened), or only observed in
        // audit mode, or allowed as it was.
        let changed = rec
            .value
            .get("decisions")
            .and_then(Value::as_array)
            .is_some_and(|ds| {
                ds.iter()
                    .any(|d| d.get("action").and_then(Value::as_str) != Some("reported"))
            });
        let (id, name) = match (rec.policy().2, changed) {
            (Some("audit"), _) => (3, "Observed"),
            (_, true) => (4, "Modified"),
            _ => (1, "Allowed"),
        };
        e.insert("action_id".into(), json!(id));
        e.insert("action".into(), json!(name));
    }
    let mut message = format!("{} {}", rec.event, process_uid(rec));
    if let Some(cause) = rec.str("exit_cause") {
        message.push_str(&format!(": {cause}"));
    }
    e.insert("message".into(), json!(message));
    Value::Object(e)
}

fn process_uid(rec: &Record<'_>) -> String {
    process(rec)["uid"].as_str().unwrap_or("").to_string()
}

fn network_activity(rec: &Record<'_>) -> Value {
    let verdict = rec.str("verdict").unwrap_or("");
    let (activity, action, disposition, status) = match verdict {
        "cut" => ((3, "Reset"), (2, "Denied"), (6, "Dropped"), (1, "Success")),
        "failed" => ((4, "Fail"), (1, "Allowed"), (1, "Allowed"), (2, "Failure")),
        _ => ((2, "Close"), (1, "Allowed"), (1, "Allowed"), (1, "Success")),
    };
    let mut e = base(
        rec,
        (NETWORK_ACTIVITY, "Network Activity"),
        (4, "Network Activity"),
        activity,
    );
    let (src, dst, conn) = endpoints(rec);
    e.insert("src_endpoint".into(), src);
    e.insert("dst_endpoint".into(), dst);
    e.insert("connection_info".into(), conn);
    let (up, down) = (
        rec.u64("bytes_up").unwrap_or(0),
        rec.u64("bytes_down").unwrap_or(0),
    );
    e.insert(
        "traffic".into(),
        json!({"bytes_out": up, "bytes_in": down, "bytes": up + down}),
    );
    if let Some(ms) = rec.u64("duration_ms") {
        e.insert("duration".into(), json!(ms));
    }
    e.insert("action_id".into(), json!(action.0));
    e.insert("action".into(), json!(action.1));
    e.insert("disposition_id".into(), json!(disposition.0));
    e.insert("disposition".into(), json!(disposition.1));
    e.insert("status_id".into(), json!(status.0));
    e.insert("status".into(), json!(status.1));
    if let Some(reason) = rec.str("reason") {
        e.insert("status_detail".into(), json!(reason));
    }
    if let Some(rule) = rec.str("rule") {
        e.insert("firewall_rule".into(), json!({"name": rule}));
    }
    e.insert(
        "message".into(),
        json!(format!(
            "egress {verdict}: {}:{}",
            rec.str("host").unwrap_or(""),
            rec.u64("port").unwrap_or(0)
        )),
    );
    Value::Object(e)
}

/// A genesis record: the log began a file. Its `node` is the device (the exporter took it from
/// this record already).
fn event_log_activity(rec: &Record<'_>) -> Value {
    let reason = rec.str("reason").unwrap_or("");
    let activity = match reason {
        "new" => (6, "Start"),
        "rotated" => (5, "Rotate"),
        // A new chain after a line the writer could not extend (cut, or from before chaining):
        // no OCSF activity says that; `activity_name` and `status_detail` do.
        _ => (99, "Rechain"),
    };
    let mut e = base(
        rec,
        (EVENT_LOG_ACTIVITY, "Event Log Activity"),
        (1, "System Activity"),
        activity,
    );
    e.insert("log_name".into(), json!("gvisor-hardened audit log"));
    e.insert("log_provider".into(), json!("gvisor-hardened"));
    e.insert("status_id".into(), json!(1));
    e.insert("status".into(), json!("Success"));
    e.insert("status_detail".into(), json!(format!("genesis: {reason}")));
    e.insert(
        "message".into(),
        json!(format!("audit log file begun on {} ({reason})", rec.node)),
    );
    Value::Object(e)
}

/// A refusal: a create or exec the policy rejected, or an egress connection it denied.
fn refusal(rec: &Record<'_>) -> Value {
    let egress = rec.event == "egress-connection";
    let mut e = base(
        rec,
        (DETECTION_FINDING, "Detection Finding"),
        (2, "Findings"),
        (1, "Create"),
    );
    let (title, desc, rule) = if egress {
        (
            format!(
                "egress connection to {}:{} refused by policy",
                rec.str("host").unwrap_or(""),
                rec.u64("port").unwrap_or(0)
            ),
            rec.str("reason").unwrap_or("denied").to_string(),
            rec.str("rule").unwrap_or("egress").to_string(),
        )
    } else {
        let what = match rec.event.as_str() {
            "exec-rejected" => "exec",
            "update-rejected" => "resource update",
            _ => "container create",
        };
        let rule = crate::metrics::rejected_rule(rec.str("error"));
        (
            format!("{what} refused by policy rule {rule}"),
            rec.str("error").unwrap_or("rejected by policy").to_string(),
            rule.to_string(),
        )
    };
    e.insert(
        "finding_info".into(),
        json!({
            "uid": rec.line_sha256,
            "title": title,
            "desc": desc,
            "types": ["policy refusal"],
            "created_time": rec.time_ms,
            "analytic": {"name": rule, "type_id": 1, "type": "Rule"},
        }),
    );
    let evidence = if egress {
        let (src, dst, conn) = endpoints(rec);
        json!({"src_endpoint": src, "dst_endpoint": dst, "connection_info": conn})
    } else {
        json!({"process": process(rec)})
    };
    e.insert("evidences".into(), json!([evidence]));
    if let Some(id) = rec.str("container_id") {
        let mut r = json!({"uid": id, "type": "Container"});
        if let Some(ns) = rec.str("namespace") {
            r["namespace"] = json!(ns);
        }
        e.insert("resources".into(), json!([r]));
    }
    e.insert("action_id".into(), json!(2));
    e.insert("action".into(), json!("Denied"));
    e.insert("disposition_id".into(), json!(2));
    e.insert("disposition".into(), json!("Blocked"));
    e.insert("status_id".into(), json!(1));
    e.insert("status".into(), json!("New"));
    e.insert("is_alert".into(), json!(true));
    e.insert("message".into(), json!(title));
    Value::Object(e)
}
