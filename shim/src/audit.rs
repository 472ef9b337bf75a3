//! The audit log: one JSON line per lifecycle event, appended atomically.
//!
//! The audit is part of the runtime's contract: a Create whose record cannot be written fails
//! (a full disk or an unwritable log must not let an unaudited sandbox start). Each record is
//! serialised in memory and handed to a single `write(2)` on an `O_APPEND` descriptor, so
//! concurrent shims never interleave half lines; a short write is reported as an error.
//! Environment values never reach this module: decisions carry variable names only.

use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use policy_injector::Decision;

use crate::process::exit::{Exit, ExitCause};
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
    Oom,
    Timeout,
    Exit,
    Delete,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
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

#[derive(Debug, Clone)]
pub struct AuditLog {
    path: PathBuf,
}

impl AuditLog {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        AuditLog { path: path.into() }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as one line, or fails. The records that decide or conclude a sandbox
    /// (create, its rejection or failure, the exit) are also flushed to disk before this returns;
    /// the others (start, exec, delete...) reach it with the page cache, within seconds.
    pub fn append(&self, record: &AuditRecord<'_>) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(record).expect("audit records always serialise");
        line.push(b'\n');
        let durable = matches!(
            record.event,
            AuditEvent::Create
                | AuditEvent::CreateRejected
                | AuditEvent::CreateFailed
                | AuditEvent::Exit
        );
        self.append_line(&line, durable)
    }

    fn append_line(&self, line: &[u8], durable: bool) -> Result<(), AuditError> {
        let io = |source| AuditError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io)?;
        }
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(&self.path)
            .map_err(io)?;
        // Shims append concurrently; the lock makes "remember the length, write, cut back on
        // failure" one step, so a disk that fills up mid-line leaves no torn line behind.
        // SAFETY: flock on a descriptor we own; released when `file` is closed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        let before = file.metadata().map_err(io)?.len();
        let result = match file.write(line) {
            Ok(n) if n == line.len() && durable => file.sync_data().map_err(io),
            Ok(n) if n == line.len() => Ok(()),
            Ok(written) => Err(AuditError::ShortWrite {
                path: self.path.clone(),
                written,
                len: line.len(),
            }),
            Err(e) => Err(io(e)),
        };
        if result.is_err() {
            let _ = file.set_len(before);
        }
        result
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
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "create");
        assert_eq!(lines[0]["container_id"], "c1");
        assert_eq!(lines[0]["policy"]["mode"], "enforce");
        assert_eq!(lines[1]["event"], "exit");
        assert_eq!(lines[1]["exit_status"], 137);
        assert_eq!(lines[1]["oom"], true);
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
