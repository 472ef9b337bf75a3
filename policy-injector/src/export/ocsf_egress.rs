//! The egress records that are neither a connection nor a refusal, as OCSF events: name
//! lookups (DNS Activity), credentials injected (HTTP Activity), the forwarder's and the proxy's starts and stops (Application
//! Lifecycle) and the byte cap taking effect (Detection Finding). Why these classes: the table
//! in `ocsf`'s module comment.

use serde_json::{json, Value};

use super::ocsf_base::{
    base, container, endpoints, sandbox_endpoint, APPLICATION_LIFECYCLE, DETECTION_FINDING,
    DNS_ACTIVITY, HTTP_ACTIVITY,
};
use super::Record;

/// `egress-lookup`: the proxy resolved an allowlisted host (from DNS or the policy's hosts
/// table). Activity Response: the record is the outcome, answers or error, not the question
/// alone.
pub fn dns_activity(rec: &Record<'_>) -> Value {
    let host = rec.str("host").unwrap_or("");
    let source = rec.str("source").unwrap_or("");
    let mut e = base(
        rec,
        (DNS_ACTIVITY, "DNS Activity"),
        (4, "Network Activity"),
        (2, "Response"),
    );
    e.insert("src_endpoint".into(), sandbox_endpoint(rec));
    e.insert("query".into(), json!({"hostname": host, "class": "IN"}));
    let answers: Vec<Value> = rec
        .value
        .get("answers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|ip| {
            // The record keeps addresses only; their family says which record type held them.
            let rtype = if ip.contains(':') { "AAAA" } else { "A" };
            json!({"rdata": ip, "type": rtype, "class": "IN"})
        })
        .collect();
    let error = rec.str("error");
    if !answers.is_empty() {
        e.insert("answers".into(), json!(answers));
    }
    // Lookups happen only for hosts the allowlist admitted; a failed one ends the connection
    // (its egress-connection record says `failed`).
    e.insert("action_id".into(), json!(1));
    e.insert("action".into(), json!("Allowed"));
    e.insert("disposition_id".into(), json!(1));
    e.insert("disposition".into(), json!("Allowed"));
    match error {
        None => {
            e.insert("status_id".into(), json!(1));
            e.insert("status".into(), json!("Success"));
            if source == "dns" {
                // The resolver answered with addresses: the DNS response code was NOERROR. A
                // static answer had no DNS response, so no code is claimed for it.
                e.insert("rcode_id".into(), json!(0));
                e.insert("rcode".into(), json!("NoError"));
            }
        }
        Some(err) => {
            e.insert("status_id".into(), json!(2));
            e.insert("status".into(), json!("Failure"));
            e.insert("status_detail".into(), json!(err));
        }
    }
    let outcome = match error {
        Some(err) => err.to_string(),
        None => answers
            .iter()
            .filter_map(|a| a["rdata"].as_str())
            .collect::<Vec<_>>()
            .join(", "),
    };
    e.insert(
        "message".into(),
        json!(format!("lookup {host} ({source}): {outcome}")),
    );
    Value::Object(e)
}

/// `egress-forwarder-ready`, `egress-forwarder-died`, `egress-proxy-stopped`: a start (a
/// restart after the first attempt), a death, the proxy's stop.
pub fn application_lifecycle(rec: &Record<'_>) -> Value {
    let attempt = rec.u64("attempt").unwrap_or(1);
    let (app, activity, failed) = match rec.event.as_str() {
        "egress-forwarder-ready" if attempt > 1 => ("egress forwarder", (5, "Restart"), false),
        "egress-forwarder-ready" => ("egress forwarder", (3, "Start"), false),
        "egress-forwarder-died" => ("egress forwarder", (4, "Stop"), true),
        _ => ("egress proxy", (4, "Stop"), false),
    };
    let mut e = base(
        rec,
        (APPLICATION_LIFECYCLE, "Application Lifecycle"),
        (6, "Application Activity"),
        activity,
    );
    e.insert(
        "app".into(),
        json!({
            "name": format!("gvisor-hardened {app}"),
            "vendor_name": "gvisor-hardened",
            "version": env!("CARGO_PKG_VERSION"),
        }),
    );
    // The shim supervises both; the sandbox they serve is `metadata.correlation_uid`.
    e.insert("actor".into(), json!({"app_name": "gvisor-hardened"}));
    e.insert("status_id".into(), json!(if failed { 2 } else { 1 }));
    e.insert(
        "status".into(),
        json!(if failed { "Failure" } else { "Success" }),
    );
    if let Some(reason) = rec.str("reason") {
        e.insert("status_detail".into(), json!(reason));
    }
    let sandbox = rec.str("sandbox_id").unwrap_or("");
    let what = match rec.event.as_str() {
        "egress-forwarder-ready" => format!(
            "ready on {} (attempt {attempt})",
            rec.str("listen").unwrap_or("")
        ),
        "egress-forwarder-died" => format!(
            "died (attempt {attempt}): {}",
            rec.str("reason").unwrap_or("")
        ),
        _ => "stopped".to_string(),
    };
    e.insert(
        "message".into(),
        json!(format!("{app} of sandbox {sandbox} {what}")),
    );
    Value::Object(e)
}

/// `egress-byte-cap-crossed`: the sandbox's traffic passed the policy's `egress.max_bytes`, and
/// every stream of the sandbox was cut.
pub fn byte_cap_finding(rec: &Record<'_>) -> Value {
    let (max, used) = (
        rec.u64("max_bytes").unwrap_or(0),
        rec.u64("used").unwrap_or(0),
    );
    let sandbox = rec.str("sandbox_id").unwrap_or("");
    let mut e = base(
        rec,
        (DETECTION_FINDING, "Detection Finding"),
        (2, "Findings"),
        (1, "Create"),
    );
    let title = format!("egress byte cap crossed by sandbox {sandbox}: {used} of {max} bytes");
    e.insert(
        "finding_info".into(),
        json!({
            "uid": rec.line_sha256,
            "title": title,
            "desc": "the sandbox's egress traffic passed the policy's byte cap; \
                     its connections were cut",
            "types": ["policy limit"],
            "created_time": rec.time_ms,
            "analytic": {"name": "egress.max_bytes", "type_id": 1, "type": "Rule"},
        }),
    );
    e.insert(
        "evidences".into(),
        json!([{"src_endpoint": sandbox_endpoint(rec),
                "data": {"max_bytes": max, "used": used}}]),
    );
    if let Some(c) = container(rec) {
        let mut r = json!({"uid": c["uid"], "type": "Container"});
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

/// `egress-credential-injected`: the proxy added a credential header to one request for an
/// allowlisted host. The activity is the request's method (OCSF's HTTP methods, Other for the
/// rest). The header's name stays in `unmapped.header` only: OCSF's `http_header` requires a
/// value, and the record holds none to give.
pub fn credential_injected(rec: &Record<'_>) -> Value {
    let method = rec.str("method").unwrap_or("");
    let activity = match method {
        "CONNECT" => (1, "Connect"),
        "DELETE" => (2, "Delete"),
        "GET" => (3, "Get"),
        "HEAD" => (4, "Head"),
        "OPTIONS" => (5, "Options"),
        "POST" => (6, "Post"),
        "PUT" => (7, "Put"),
        "TRACE" => (8, "Trace"),
        "PATCH" => (9, "Patch"),
        _ => (99, "Other"),
    };
    let mut e = base(
        rec,
        (HTTP_ACTIVITY, "HTTP Activity"),
        (4, "Network Activity"),
        activity,
    );
    let (src, dst, conn) = endpoints(rec);
    let host = rec.str("host").unwrap_or("");
    let header = rec.str("header").unwrap_or("");
    // The record has the host and port, not the path (the rule names the allowed prefix): the
    // URL is the origin, which OCSF accepts as `url_string`.
    let mut url = json!({"hostname": host, "scheme": "https"});
    url["url_string"] = match rec.u64("port") {
        Some(port) => {
            url["port"] = json!(port);
            json!(if port == 443 {
                format!("https://{host}")
            } else {
                format!("https://{host}:{port}")
            })
        }
        None => json!(format!("https://{host}")),
    };
    let mut request = json!({ "url": url });
    // OCSF lists nine methods; another (WebDAV's, say) is the activity Other, and its name
    // stays in `unmapped.method`.
    if activity.0 != 99 {
        request["http_method"] = json!(method);
    }
    e.insert("http_request".into(), request);
    e.insert("src_endpoint".into(), src);
    e.insert("dst_endpoint".into(), dst);
    e.insert("connection_info".into(), conn);
    e.insert("action_id".into(), json!(1));
    e.insert("action".into(), json!("Allowed"));
    e.insert("disposition_id".into(), json!(1));
    e.insert("disposition".into(), json!("Allowed"));
    e.insert("status_id".into(), json!(1));
    e.insert("status".into(), json!("Success"));
    if let Some(rule) = rec.str("rule") {
        e.insert("firewall_rule".into(), json!({"name": rule}));
    }
    let replaced = rec
        .value
        .get("replaced_workload_header")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    e.insert(
        "message".into(),
        json!(format!(
            "credential injected: {header} for {method} {host}{}",
            if replaced {
                " (the workload's own header of that name was dropped)"
            } else {
                ""
            }
        )),
    );
    Value::Object(e)
}
