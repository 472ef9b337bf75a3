//! Node metrics folded from the audit log, rendered in Prometheus text format. Pure: the CLI's
//! `audit metrics` follows the log's files and feeds their lines here, one at a time, in order;
//! a scrape renders the state.
//!
//! Every front end (the shim, runsc-hardened, CRI pods) writes the same log, so counting the log
//! counts them all. Labels are bounded: the policy (its file's path on lifecycle records, its
//! name on egress records), a rule, an exit cause, an egress verdict and rule, and an egress host
//! only where an allowlist entry names it. Never a container id: the per-container state kept
//! for the running gauge and the start latency is internal.

mod family;
mod line;

pub use family::{escape_label, Family, Histogram, Kind, MAX_SERIES, OVERFLOW};
pub use line::{millis, rejected_rule};

use std::collections::HashMap;

use crate::audit_chain::Verifier;
use line::Line;

/// Start latency buckets, in seconds: a gVisor sandbox starts in a fraction of a second on an
/// idle node and in seconds on a loaded one.
const LATENCY_BOUNDS: &[f64] = &[0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The events the records counter names; anything else counts as "other".
const KNOWN_EVENTS: &[&str] = &[
    "genesis",
    "create",
    "create-rejected",
    "create-failed",
    "start",
    "exec",
    "exec-rejected",
    "exec-start",
    "exec-exit",
    "update",
    "update-rejected",
    "oom",
    "timeout",
    "idle-timeout",
    "exit",
    "delete",
    "egress-connection",
    "egress-lookup",
    "egress-byte-cap-crossed",
    "egress-forwarder-ready",
    "egress-forwarder-died",
    "egress-proxy-stopped",
];

/// The exit causes the shim writes (`ExitCause`); anything else counts as "other".
const KNOWN_CAUSES: &[&str] = &[
    "exited",
    "signaled",
    "oom",
    "process-limit",
    "timeout",
    "idle-timeout",
];

const KNOWN_VERDICTS: &[&str] = &["allowed", "denied", "cut", "failed"];

/// A container between its create record and its end.
struct Live {
    policy: String,
    sandbox: bool,
    /// The create record's time, until the start record takes it.
    created_ms: Option<i64>,
}

pub struct Metrics {
    verifier: Verifier,
    /// Containers created and not yet ended, by (namespace, container id).
    live: HashMap<(String, String), Live>,
    pub containers_created: Family,
    pub sandboxes_created: Family,
    pub sandboxes_running: Family,
    pub create_failures: Family,
    pub refusals: Family,
    pub exits: Family,
    pub exec_exits: Family,
    pub limit_events: Family,
    pub start_latency: Histogram,
    pub output_truncations: Family,
    pub egress_connections: Family,
    pub egress_bytes: Family,
    pub egress_byte_cap_crossings: Family,
    pub forwarder_deaths: Family,
    pub forwarder_restarts: Family,
    pub records: Family,
    pub unparsed_lines: Family,
    pub chain_intact: Family,
    pub read_bytes: Family,
    pub read_lines: Family,
    pub skipped_lines: Family,
    pub files_opened: Family,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        use Kind::{Counter, Gauge};
        const P: &[&str] = &["policy"];
        let mut m = Metrics {
            verifier: Verifier::new(None, false),
            live: HashMap::new(),
            containers_created: Family::new(
                "gvh_containers_created_total",
                Counter,
                P,
                "Containers created (create records), pod sandboxes and the containers that join them.",
            ),
            sandboxes_created: Family::new(
                "gvh_sandboxes_created_total",
                Counter,
                P,
                "Sandboxes created: create records of containers that do not join a pod's sandbox.",
            ),
            sandboxes_running: Family::new(
                "gvh_sandboxes_running",
                Gauge,
                P,
                "Sandboxes created and not yet ended (no exit, delete or create-failed record).",
            ),
            create_failures: Family::new(
                "gvh_create_failures_total",
                Counter,
                P,
                "Creates that failed for a reason other than the policy (create-failed records).",
            ),
            refusals: Family::new(
                "gvh_refusals_total",
                Counter,
                &["policy", "rule", "stage"],
                "Specs the policy refused (create-rejected, exec-rejected, update-rejected records), by the first rule that refused.",
            ),
            exits: Family::new(
                "gvh_exits_total",
                Counter,
                &["policy", "cause"],
                "Container exits (exit records) by cause: exited, signaled, oom, process-limit, timeout, idle-timeout.",
            ),
            exec_exits: Family::new(
                "gvh_exec_exits_total",
                Counter,
                &["policy", "cause"],
                "Exec'd process exits (exec-exit records) by cause.",
            ),
            limit_events: Family::new(
                "gvh_limit_events_total",
                Counter,
                &["policy", "event"],
                "Limits that fired (oom, timeout, idle-timeout records), before the exit they cause.",
            ),
            start_latency: Histogram::new(
                "gvh_start_latency_seconds",
                P,
                LATENCY_BOUNDS,
                "Time from a container's create record to its start record.",
            ),
            output_truncations: Family::new(
                "gvh_output_truncations_total",
                Counter,
                P,
                "Processes whose output the output bound cut (output_truncated on exit and exec-exit records).",
            ),
            egress_connections: Family::new(
                "gvh_egress_connections_total",
                Counter,
                &["policy", "verdict", "rule", "host"],
                "Egress connections by verdict and the allowlist entry or refusal rule that decided; host only when an allowlist entry names it exactly.",
            ),
            egress_bytes: Family::new(
                "gvh_egress_bytes_total",
                Counter,
                &["policy", "direction"],
                "Bytes through the egress proxy: up (to the upstream) and down (to the sandbox).",
            ),
            egress_byte_cap_crossings: Family::new(
                "gvh_egress_byte_cap_crossings_total",
                Counter,
                P,
                "Sandboxes that crossed their egress byte cap (egress-byte-cap-crossed records).",
            ),
            forwarder_deaths: Family::new(
                "gvh_egress_forwarder_deaths_total",
                Counter,
                P,
                "Egress forwarder deaths (egress-forwarder-died records).",
            ),
            forwarder_restarts: Family::new(
                "gvh_egress_forwarder_restarts_total",
                Counter,
                P,
                "Egress forwarders ready again after a death (egress-forwarder-ready records with attempt > 1).",
            ),
            records: Family::new(
                "gvh_audit_records_total",
                Counter,
                &["event"],
                "Audit log lines read, by event.",
            ),
            unparsed_lines: Family::new(
                "gvh_audit_unparsed_lines_total",
                Counter,
                &[],
                "Audit log lines that are not JSON objects (counted nowhere else).",
            ),
            chain_intact: Family::new(
                "gvh_audit_chain_intact",
                Gauge,
                &[],
                "1 while every line read extends the audit log's hash chain; 0 from the first break on.",
            ),
            read_bytes: Family::new(
                "gvh_exporter_read_bytes_total",
                Counter,
                &[],
                "Bytes of the audit log read by this exporter, all files together.",
            ),
            read_lines: Family::new(
                "gvh_exporter_read_lines_total",
                Counter,
                &[],
                "Lines of the audit log read by this exporter, all files together.",
            ),
            skipped_lines: Family::new(
                "gvh_exporter_skipped_lines_total",
                Counter,
                &[],
                "Audit log lines longer than the exporter's bound, streamed past unread (each also breaks the chain).",
            ),
            files_opened: Family::new(
                "gvh_exporter_files_opened_total",
                Counter,
                &[],
                "Audit log files this exporter has read (the rotated ones at start, then each new live file).",
            ),
        };
        m.chain_intact.set(&[], 1.0);
        // Present at 0 from the start, so a rule on it has a series before the first skip.
        m.skipped_lines.add(&[], 0.0);
        m
    }

    /// The next file of the log, in rotation order.
    pub fn begin_file(&mut self, name: &str) {
        self.verifier.begin_file(name);
        self.files_opened.inc(&[]);
    }

    /// One line without its newline; `terminated` is false only for bytes a rotated-away file
    /// ended with (a follower never feeds the live file's unfinished last line).
    pub fn line(&mut self, bytes: &[u8], terminated: bool) {
        self.read_lines.inc(&[]);
        self.read_bytes
            .add(&[], (bytes.len() + usize::from(terminated)) as f64);
        self.verifier.line(bytes, terminated);
        let intact = if self.verifier.intact() { 1.0 } else { 0.0 };
        self.chain_intact.set(&[], intact);
        match Line::parse(bytes) {
            Some(line) => self.fold(&line),
            None => self.unparsed_lines.inc(&[]),
        }
    }

    /// A line of `len` bytes the follower streamed past without keeping it (over its bound):
    /// counted, read, and a break in the chain, since what it held cannot be checked.
    pub fn skipped_line(&mut self, len: u64) {
        self.skipped_lines.inc(&[]);
        self.read_lines.inc(&[]);
        self.read_bytes.add(&[], len as f64);
        self.verifier.line(&[], false);
        self.chain_intact.set(&[], 0.0);
    }

    pub fn intact(&self) -> bool {
        self.verifier.intact()
    }

    fn fold(&mut self, l: &Line) {
        let event = l.event.as_deref().unwrap_or("");
        self.records.inc(&[known(KNOWN_EVENTS, event)]);
        let policy = l.policy();
        let key = || {
            (
                l.namespace.clone().unwrap_or_default(),
                l.container_id.clone().unwrap_or_default(),
            )
        };
        match event {
            "create" => {
                self.containers_created.inc(&[policy]);
                if l.is_sandbox() {
                    self.sandboxes_created.inc(&[policy]);
                    self.sandboxes_running.add(&[policy], 1.0);
                }
                let live = Live {
                    policy: policy.to_string(),
                    sandbox: l.is_sandbox(),
                    created_ms: l.time.as_deref().and_then(millis),
                };
                if let Some(old) = self.live.insert(key(), live) {
                    // A create for a container already live: its end was never recorded.
                    self.ended(old);
                }
            }
            "start" => {
                let start = l.time.as_deref().and_then(millis);
                if let Some(live) = self.live.get_mut(&key()) {
                    if let (Some(created), Some(start)) = (live.created_ms.take(), start) {
                        let secs = (start - created).max(0) as f64 / 1000.0;
                        self.start_latency.observe(&[&live.policy], secs);
                    }
                }
            }
            "exit" | "delete" | "create-failed" => {
                if event == "exit" {
                    let cause = known(KNOWN_CAUSES, l.exit_cause.as_deref().unwrap_or(""));
                    self.exits.inc(&[policy, cause]);
                }
                if event == "create-failed" {
                    self.create_failures.inc(&[policy]);
                }
                if let Some(live) = self.live.remove(&key()) {
                    self.ended(live);
                }
            }
            "exec-exit" => {
                let cause = known(KNOWN_CAUSES, l.exit_cause.as_deref().unwrap_or(""));
                self.exec_exits.inc(&[policy, cause]);
            }
            "create-rejected" | "exec-rejected" | "update-rejected" => {
                let stage = event.trim_end_matches("-rejected");
                let rule = rejected_rule(l.error.as_deref());
                self.refusals.inc(&[policy, rule, stage]);
            }
            "oom" | "timeout" | "idle-timeout" => self.limit_events.inc(&[policy, event]),
            "egress-connection" => {
                let verdict = known(KNOWN_VERDICTS, l.verdict.as_deref().unwrap_or(""));
                let rule = l.rule.as_deref().unwrap_or("");
                self.egress_connections
                    .inc(&[policy, verdict, rule, l.listed_host()]);
                let (up, down) = (l.bytes_up.unwrap_or(0), l.bytes_down.unwrap_or(0));
                self.egress_bytes.add(&[policy, "up"], up as f64);
                self.egress_bytes.add(&[policy, "down"], down as f64);
            }
            "egress-byte-cap-crossed" => self.egress_byte_cap_crossings.inc(&[policy]),
            "egress-forwarder-died" => self.forwarder_deaths.inc(&[policy]),
            "egress-forwarder-ready" if l.attempt.unwrap_or(1) > 1 => {
                self.forwarder_restarts.inc(&[policy])
            }
            _ => {}
        }
        if l.output_truncated == Some(true) {
            self.output_truncations.inc(&[policy]);
        }
    }

    fn ended(&mut self, live: Live) {
        if live.sandbox {
            self.sandboxes_running.add(&[&live.policy], -1.0);
        }
    }

    /// The exposition: every family, in a fixed order.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8192);
        for f in [
            &self.containers_created,
            &self.sandboxes_created,
            &self.sandboxes_running,
            &self.create_failures,
            &self.refusals,
            &self.exits,
            &self.exec_exits,
            &self.limit_events,
        ] {
            f.render(&mut out);
        }
        self.start_latency.render(&mut out);
        for f in [
            &self.output_truncations,
            &self.egress_connections,
            &self.egress_bytes,
            &self.egress_byte_cap_crossings,
            &self.forwarder_deaths,
            &self.forwarder_restarts,
            &self.records,
            &self.unparsed_lines,
            &self.chain_intact,
            &self.read_bytes,
            &self.read_lines,
            &self.skipped_lines,
            &self.files_opened,
        ] {
            f.render(&mut out);
        }
        out
    }
}

fn known(list: &[&'static str], v: &str) -> &'static str {
    list.iter().copied().find(|k| *k == v).unwrap_or("other")
}

#[cfg(test)]
mod tests;
