//! Audit records in the formats log pipelines take: OCSF events (`ocsf`) and OpenTelemetry logs
//! in OTLP JSON (`otel`). Pure: `audit export` reads the log's files and feeds their lines to an
//! [`Exporter`], in order, and writes what it returns, one JSON document per line.
//!
//! Every line is redacted (`crate::redact`) before it is mapped, so a log written before the
//! writer redacted leaks no environment value through an export either. The mappings read the
//! record as JSON rather than the writers' types: the log is the contract (its schema is
//! shim/audit-record.schema.json), and an export must take records of older writers.

pub mod ocsf;
mod ocsf_base;
mod ocsf_egress;
#[cfg(test)]
mod ocsf_tests;
pub mod otel;
#[cfg(test)]
mod otel_tests;

use serde_json::Value;

use crate::audit_chain::hash_line;
use crate::metrics::millis;

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Ocsf,
    Otel,
}

/// How serious a record is, decided once for both formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The lifecycle going as it should; an allowed connection.
    Info,
    /// A limit of the policy ended a process (OOM, process limit, timeout, idle timeout), or a
    /// connection was cut or failed.
    Low,
    /// The policy refused something: a create, an exec, a connection.
    Medium,
    /// The runtime failed (a create that could not be carried out, a forwarder that died).
    High,
}

/// One record and what the mappings need besides it.
#[derive(Debug)]
pub struct Record<'a> {
    /// The record, redacted.
    pub value: Value,
    /// The line as exported (`raw_data`): the original bytes, or the redacted record when
    /// redaction changed it.
    pub raw: String,
    /// sha256 of the original line: what the chain's next `prev` names.
    pub line_sha256: String,
    /// The node that wrote the log (its last genesis record), or the exporting host's name.
    pub node: &'a str,
    pub event: String,
    /// Milliseconds since the epoch; 0 when the record's time does not parse.
    pub time_ms: i64,
}

impl Record<'_> {
    pub fn str(&self, key: &str) -> Option<&str> {
        self.value.get(key).and_then(Value::as_str)
    }

    pub fn u64(&self, key: &str) -> Option<u64> {
        self.value.get(key).and_then(Value::as_u64)
    }

    /// The lifecycle record's `policy` member (`{path, sha256, mode}`), or the egress record's
    /// policy name as the path.
    pub fn policy(&self) -> (Option<&str>, Option<&str>, Option<&str>) {
        match self.value.get("policy") {
            Some(Value::String(name)) => (Some(name), None, None),
            Some(p) => (
                p.get("path").and_then(Value::as_str),
                p.get("sha256")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty()),
                p.get("mode").and_then(Value::as_str),
            ),
            None => (None, None, None),
        }
    }

    pub fn severity(&self) -> Severity {
        severity(&self.event, self.str("exit_cause"), self.str("verdict"))
    }
}

/// The severity of an event; `exit_cause` and `verdict` from the record when present.
pub fn severity(event: &str, exit_cause: Option<&str>, verdict: Option<&str>) -> Severity {
    match (event, exit_cause, verdict) {
        ("create-rejected" | "exec-rejected" | "update-rejected", _, _) => Severity::Medium,
        ("egress-connection", _, Some("denied")) => Severity::Medium,
        ("egress-connection", _, Some("cut" | "failed")) => Severity::Low,
        ("create-failed" | "egress-forwarder-died", _, _) => Severity::High,
        ("oom" | "timeout" | "idle-timeout" | "egress-byte-cap-crossed", _, _) => Severity::Low,
        ("exit" | "exec-exit", Some("oom" | "process-limit" | "timeout" | "idle-timeout"), _) => {
            Severity::Low
        }
        _ => Severity::Info,
    }
}

/// Turns a log's lines into export lines, in order. Keeps the node name of the last genesis
/// record (records do not repeat it) and counts what it could not map.
#[derive(Debug)]
pub struct Exporter {
    format: Format,
    node: String,
    /// Lines that were not a JSON object (a cut or damaged line): not exported.
    pub unparsed: u64,
    /// Records the format has no class for (OCSF: an event this version does not know).
    pub skipped: u64,
    pub exported: u64,
}

impl Exporter {
    /// `node`: the name to use until a genesis record names the log's node.
    pub fn new(format: Format, node: &str) -> Exporter {
        Exporter {
            format,
            node: node.to_string(),
            unparsed: 0,
            skipped: 0,
            exported: 0,
        }
    }

    /// One line of the log, without its newline: the export line (no newline), if any.
    pub fn line(&mut self, bytes: &[u8]) -> Option<String> {
        let Ok(mut value) = serde_json::from_slice::<Value>(bytes) else {
            self.unparsed += 1;
            return None;
        };
        if !value.is_object() {
            self.unparsed += 1;
            return None;
        }
        let event = value
            .get("event")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if event == crate::audit_chain::GENESIS_EVENT {
            if let Some(node) = value.get("node").and_then(Value::as_str) {
                self.node = node.to_string();
            }
        }
        let raw = if crate::redact::record(&mut value) {
            value.to_string()
        } else {
            String::from_utf8_lossy(bytes).into_owned()
        };
        let rec = Record {
            time_ms: value
                .get("time")
                .and_then(Value::as_str)
                .and_then(millis)
                .unwrap_or(0),
            value,
            raw,
            line_sha256: hash_line(bytes).to_string(),
            node: &self.node,
            event,
        };
        let out = match self.format {
            Format::Ocsf => ocsf::event(&rec),
            Format::Otel => Some(otel::logs_data(&rec)),
        };
        match out {
            Some(v) => {
                self.exported += 1;
                Some(v.to_string())
            }
            None => {
                self.skipped += 1;
                None
            }
        }
    }
}
