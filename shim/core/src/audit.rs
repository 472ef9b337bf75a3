//! The audit log: one JSON line per lifecycle event, appended atomically and hash-chained.
//!
//! The audit is part of the runtime's contract: a Create whose record cannot be written fails
//! (a full disk or an unwritable log must not let an unaudited sandbox start). Each record is
//! serialised in memory and handed to a single `write(2)` on an `O_APPEND` descriptor under an
//! exclusive `flock`, so concurrent shims never interleave half lines; a short write is cut back
//! and reported as an error. Under the same lock the writer reads the last line, links the new
//! record to it (`seq`, `prev`: `policy_injector::audit_chain`) and rotates the file when it is
//! full (`file.rs`); a sandbox's records can be signed (`trail.rs`).
//! Environment values never reach the file: the environment rule names secret variables
//! without their values, and what values decisions still carry (`environment.defaults`' own
//! entries, a removed hook's `env`) are redacted here, before a record is serialised
//! (`policy_injector::redact`).

#[cfg(test)]
mod attest_tests;
mod file;
pub use file::open_locked;
#[cfg(test)]
mod metrics_tests;
#[cfg(test)]
mod redaction_tests;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
mod trail;
mod writer;

pub use policy_injector::audit_chain::Digest;
pub use trail::{Signer, Trail};

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use policy_injector::policy::AuditPolicy;
use policy_injector::quantity::ByteSize;
use policy_injector::Decision;

use crate::artifacts::{ExitRecord, StartRecord};
use crate::exit::{Exit, ExitCause};
use crate::output_limit::OutputReport;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("audit log {path}: short write ({written} of {len} bytes; disk full?)")]
    ShortWrite {
        path: PathBuf,
        written: usize,
        len: usize,
    },
    /// The path kept naming another file between open and lock (rotation or replacement by
    /// other writers, many times over).
    #[error("audit log {path}: replaced {attempts} times while waiting for its lock")]
    Unstable { path: PathBuf, attempts: u32 },
    #[error("audit signing key {path}: {reason}")]
    SigningKey { path: PathBuf, reason: String },
    /// The audit writer thread died (a panic in an append) before writing this record.
    #[error("audit log {path}: the audit writer thread stopped before writing the record")]
    WriterStopped { path: PathBuf },
}

/// Lifecycle events that produce an audit line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditEvent {
    Create,
    CreateRejected,
    CreateFailed,
    Start,
    Exec,
    ExecRejected,
    ExecStart,
    ExecExit,
    Update,
    /// An update the policy refused (a change of the memory limit, a malformed value).
    UpdateRejected,
    Oom,
    Timeout,
    /// The idle timeout fired: the sandbox is being stopped (SIGTERM, grace, SIGKILL).
    IdleTimeout,
    Exit,
    Delete,
    /// A warm sandbox was booted into the pool (`crate::pool`), before any pod asked for it.
    PoolSandboxBooted,
    /// A pod's sandbox container took a warm sandbox instead of booting one.
    PoolSandboxClaimed,
}

/// The `pool` member of pool records: which warm sandbox, of which pool, and (on a claim) the
/// hash of the record of its boot, so a pod's trail reaches back to the boot of its sandbox.
#[derive(Debug, Clone, Serialize)]
pub struct PoolAudit<'a> {
    pub key: &'a str,
    pub sandbox: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_record: Option<&'a str>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PodRef {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_name: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PolicyRef {
    pub path: String,
    pub sha256: String,
    pub mode: String,
}

/// Where a container came from, fixed at Create and repeated on every line so each line stands
/// alone for whoever greps the log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Subject {
    pub namespace: String,
    pub container_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodRef>,
    pub policy: PolicyRef,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditRecord<'a> {
    pub time: String,
    pub event: AuditEvent,
    #[serde(flatten)]
    pub subject: &'a Subject,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decisions: Option<&'a [Decision]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runsc_args: Option<&'a [String]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<u32>,
    /// Why the process ended (exit records).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_cause: Option<ExitCause>,
    pub oom: bool,
    pub timed_out: bool,
    pub process_limit_exceeded: bool,
    /// Exit and exec-exit records of a process whose output the shim copied (`[output]
    /// max_bytes` or `[lifetime] idle_timeout` set): bytes delivered to the client, stdout and
    /// stderr together.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// The output bound cut this process's output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_truncated: Option<bool>,
    /// The rest of the copy's report: per stream the bytes delivered and discarded and the
    /// sha256 of what was delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<&'a OutputReport>,
    /// The artifact manifest of the sandbox's writable volumes: start records name the start
    /// manifest, exit records the exit manifest and the diff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<ArtifactsAudit<'a>>,
    /// What the exit did about the writable binds' git directories and protected paths
    /// (`[mounts.workspace]`): carried back, neutralised, quarantined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<&'a crate::workspace::WorkspaceReport>,
    /// Pool records: the warm sandbox and its pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolAudit<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The `artifacts` member of a record.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ArtifactsAudit<'a> {
    Start(&'a StartRecord),
    Exit(&'a ExitRecord),
    /// The exit manifest could not be made (or not within its bound); why.
    Failed {
        error: &'a str,
    },
}

impl<'a> ArtifactsAudit<'a> {
    /// An exit record's member: the exit manifest, or why there is none.
    pub fn of_exit(exit: &'a Result<ExitRecord, String>) -> ArtifactsAudit<'a> {
        match exit {
            Ok(exit) => ArtifactsAudit::Exit(exit),
            Err(error) => ArtifactsAudit::Failed { error },
        }
    }
}

impl<'a> AuditRecord<'a> {
    pub fn new(event: AuditEvent, subject: &'a Subject) -> Self {
        AuditRecord {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            event,
            subject,
            exec_id: None,
            decisions: None,
            config_sha256: None,
            runsc_args: None,
            pid: None,
            exit_status: None,
            exit_cause: None,
            oom: false,
            timed_out: false,
            process_limit_exceeded: false,
            output_bytes: None,
            output_truncated: None,
            output: None,
            artifacts: None,
            workspace: None,
            pool: None,
            error: None,
        }
    }
}

impl AuditRecord<'_> {
    /// The exit's status and cause, with the flags a grep for enforcement looks for.
    pub fn set_exit(&mut self, exit: &Exit) {
        self.exit_status = Some(exit.status);
        self.exit_cause = Some(exit.cause);
        self.oom = exit.cause == ExitCause::Oom;
        self.timed_out = exit.cause == ExitCause::Timeout;
        self.process_limit_exceeded = exit.cause == ExitCause::ProcessLimit;
        if exit.cause == ExitCause::ProcessLimit {
            self.error = Some("process limit exceeded".to_string());
        }
    }
}

impl<'a> AuditRecord<'a> {
    /// What the output copy delivered (exit records).
    pub fn set_output(&mut self, report: &'a OutputReport) {
        self.output_bytes = Some(report.output_bytes);
        self.output_truncated = Some(report.output_truncated);
        self.output = Some(report);
    }
}

/// When the live file is rotated, and how many rotated files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    pub max_size: u64,
    pub keep: u32,
}

impl Default for Rotation {
    /// The policy's defaults: what a log without a policy (containerd's cleanup after a dead
    /// shim) rotates by.
    fn default() -> Self {
        let d = AuditPolicy::default();
        Rotation {
            max_size: d.max_size.0,
            keep: d.keep,
        }
    }
}

#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
    rotation: Rotation,
    /// Written into the genesis records this writer starts.
    policy_sha256: String,
}

impl AuditLog {
    /// A log at `path` with the default rotation.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AuditLog {
            path: path.into(),
            rotation: Rotation::default(),
            policy_sha256: String::new(),
        }
    }

    /// The log a policy's `[audit]` section names; `policy_sha256` is the policy file's digest.
    pub fn for_policy(audit: &AuditPolicy, policy_sha256: &str) -> Self {
        let ByteSize(max_size) = audit.max_size;
        AuditLog {
            path: PathBuf::from(&audit.path),
            rotation: Rotation {
                max_size,
                keep: audit.keep,
            },
            policy_sha256: policy_sha256.to_string(),
        }
    }

    /// Names the policy (by digest) in the genesis records this writer starts.
    pub fn with_policy_sha256(mut self, sha256: &str) -> Self {
        self.policy_sha256 = sha256.to_string();
        self
    }

    pub fn with_rotation(mut self, rotation: Rotation) -> Self {
        self.rotation = rotation;
        self
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one line, chained to the line before it, and returns the line's
    /// hash, or fails. The records that decide or conclude a sandbox (create, its rejection or
    /// failure, the exit) are also flushed to disk before this returns; the others (start,
    /// exec, delete...) reach it with the page cache, within seconds.
    pub fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
        self.append_sealed(record, None)
    }

    /// Appends a record that is not a lifecycle record (an egress connection, a name lookup) as
    /// one chained line. `record` must serialise to a JSON object; it is never flushed to disk on
    /// its own (the lifecycle records that follow are).
    pub fn append_value(&self, record: &impl Serialize) -> Result<Digest, AuditError> {
        let line = serde_json::to_vec(record).expect("audit records always serialise");
        file::append(self, &line, false, None)
    }

    /// [`append`](Self::append) on the audit writer thread (`writer.rs`): queued now, in order,
    /// and awaited without holding the caller's thread while another writer holds the lock.
    pub fn append_queued(
        &self,
        record: &AuditRecord<'_>,
    ) -> impl std::future::Future<Output = Result<Digest, AuditError>> + Send + 'static {
        let line = Line::of(record);
        let log = self.clone();
        writer::queue(&self.path, move || log.write_line(&line, None))
    }

    pub fn append_sealed(
        &self,
        record: &AuditRecord<'_>,
        seal: Option<&policy_injector::audit_chain::SealInput<'_>>,
    ) -> Result<Digest, AuditError> {
        self.write_line(&Line::of(record), seal)
    }

    /// Writes a line made by [`Line::of`] (the part of an append that waits on the lock and
    /// the disk).
    pub(crate) fn write_line(
        &self,
        line: &Line,
        seal: Option<&policy_injector::audit_chain::SealInput<'_>>,
    ) -> Result<Digest, AuditError> {
        file::append(self, &line.bytes, line.durable, seal)
    }
}

/// A lifecycle record serialised and redacted, ready to be chained and written: what crosses to
/// the audit writer thread.
#[derive(Debug)]
pub(crate) struct Line {
    bytes: Vec<u8>,
    durable: bool,
    event: AuditEvent,
}

impl Line {
    pub(crate) fn of(record: &AuditRecord<'_>) -> Line {
        // Redacted here, at the one place every front end's lifecycle records pass, so no
        // caller can forget it; the line hashed and signed is the redacted one.
        let redacted = record
            .decisions
            .and_then(policy_injector::redact::decisions);
        let redacted_record;
        let record = match &redacted {
            Some(decisions) => {
                redacted_record = AuditRecord {
                    decisions: Some(decisions),
                    ..record.clone()
                };
                &redacted_record
            }
            None => record,
        };
        let bytes = serde_json::to_vec(record).expect("audit records always serialise");
        let durable = matches!(
            record.event,
            AuditEvent::Create
                | AuditEvent::CreateRejected
                | AuditEvent::CreateFailed
                | AuditEvent::Exit
        );
        Line {
            bytes,
            durable,
            event: record.event,
        }
    }

    pub(crate) fn event(&self) -> AuditEvent {
        self.event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject() -> Subject {
        Subject {
            namespace: "default".into(),
            container_id: "c1".into(),
            image: Some("docker.io/library/busybox:latest".into()),
            pod: None,
            policy: PolicyRef {
                path: "<embedded default>".into(),
                sha256: "ab".into(),
                mode: "enforce".into(),
            },
        }
    }

    #[test]
    fn records_are_appended_as_single_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = AuditLog::new(dir.path().join("sub/audit.jsonl"));
        let s = subject();
        log.append(&AuditRecord::new(AuditEvent::Create, &s))
            .unwrap();
        let mut exit = AuditRecord::new(AuditEvent::Exit, &s);
        exit.exit_status = Some(137);
        exit.oom = true;
        log.append(&exit).unwrap();
        let text = std::fs::read_to_string(log.path()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["event"], "genesis");
        assert_eq!(lines[1]["event"], "create");
        assert_eq!(lines[1]["container_id"], "c1");
        assert_eq!(lines[1]["policy"]["mode"], "enforce");
        assert_eq!(lines[2]["event"], "exit");
        assert_eq!(lines[2]["exit_status"], 137);
        assert_eq!(lines[2]["oom"], true);
    }

    #[test]
    fn unwritable_log_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the log file should be: open(2) fails with EISDIR.
        let path = dir.path().join("audit.jsonl");
        std::fs::create_dir(&path).unwrap();
        let s = subject();
        let err = AuditLog::new(&path)
            .append(&AuditRecord::new(AuditEvent::Create, &s))
            .unwrap_err();
        assert!(err.to_string().contains("audit.jsonl"), "{err}");
    }

    #[test]
    fn full_disk_fails_the_append() {
        // /dev/full returns ENOSPC on every write: the same error a full filesystem gives.
        let s = subject();
        let err = AuditLog::new("/dev/full")
            .append(&AuditRecord::new(AuditEvent::Create, &s))
            .unwrap_err();
        match err {
            AuditError::Io { source, .. } => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC))
            }
            other => panic!("unexpected {other}"),
        }
    }
}

#[cfg(test)]
mod schema_tests {
    use super::AuditEvent;
    use serde_json::Value;

    const SCHEMA: &str = include_str!("../../audit-record.schema.json");

    fn enum_at(pointer: &str) -> Vec<String> {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        schema
            .pointer(pointer)
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("no enum at {pointer}"))
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    }

    /// A new rule or event that the schema does not know makes every record carrying it
    /// invalid: keep them in step.
    #[test]
    fn the_schema_knows_every_rule_and_every_lifecycle_event() {
        let rules = enum_at("/$defs/decision/properties/rule/enum");
        for rule in policy_injector::Rule::ALL {
            let name = serde_json::to_value(rule).unwrap();
            assert!(
                rules.contains(&name.as_str().unwrap().to_string()),
                "{name} missing"
            );
        }
        let events = enum_at("/$defs/lifecycle/properties/event/enum");
        for event in [
            AuditEvent::Create,
            AuditEvent::CreateRejected,
            AuditEvent::CreateFailed,
            AuditEvent::Start,
            AuditEvent::Exec,
            AuditEvent::ExecRejected,
            AuditEvent::ExecStart,
            AuditEvent::ExecExit,
            AuditEvent::Update,
            AuditEvent::UpdateRejected,
            AuditEvent::Oom,
            AuditEvent::Timeout,
            AuditEvent::Exit,
            AuditEvent::Delete,
        ] {
            let name = serde_json::to_value(event).unwrap();
            assert!(
                events.contains(&name.as_str().unwrap().to_string()),
                "{name} missing"
            );
        }
    }
}
