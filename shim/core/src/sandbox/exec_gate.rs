//! The exec gate: every process added to a running sandbox (`ctr task exec`, CRI Exec and
//! ExecSync, `docker exec`) goes through the policy and is recorded, admitted or refused,
//! here, for both front ends. An admitted exec whose record cannot be written is not run; a
//! refused one is refused whether or not its record could be written (the front end logs
//! that failure, the caller gets the rule).

use async_trait::async_trait;
use policy_injector::{harden_process, Context, HardenError, HardenedProcess, Policy};
use serde_json::Value;

use crate::audit::{AuditError, AuditEvent, AuditRecord, Digest, Subject};

/// Where a front end writes a sandbox's lifecycle records: the shim's trail (queued on the
/// audit writer thread) or runsc-hardened's trail in the state directory.
#[async_trait]
pub trait SandboxRecords: Send + Sync {
    async fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError>;
}

#[derive(Debug, thiserror::Error)]
pub enum ExecGateError {
    /// The policy refuses the process (the message names the rule). `unrecorded`: why its
    /// `exec-rejected` record could not be written, if it could not.
    #[error("{error}")]
    Refused {
        error: HardenError,
        unrecorded: Option<AuditError>,
    },
    /// The policy admits it but its `exec` record could not be written: it does not run.
    #[error(transparent)]
    Unrecorded(AuditError),
}

/// What the exec is: its id, the process the engine sent, and the sandbox it joins.
pub struct ExecRequest<'a> {
    pub exec_id: &'a str,
    pub process: &'a Value,
    pub subject: &'a Subject,
    pub namespace: &'a str,
    pub container_id: &'a str,
}

/// Hardens `req.process` under `policy` and records the outcome: `exec` with what the policy
/// changed, or `exec-rejected` with the rule.
pub async fn admit(
    records: &dyn SandboxRecords,
    policy: &Policy,
    req: ExecRequest<'_>,
) -> Result<HardenedProcess, ExecGateError> {
    let ctx = Context {
        container_id: req.container_id.to_string(),
        namespace: req.namespace.to_string(),
        ..Default::default()
    };
    match harden_process(req.process, policy, &ctx) {
        Ok(hardened) => {
            let mut rec = AuditRecord::new(AuditEvent::Exec, req.subject);
            rec.exec_id = Some(req.exec_id);
            rec.decisions = Some(&hardened.decisions);
            records
                .append(&rec)
                .await
                .map_err(ExecGateError::Unrecorded)?;
            Ok(hardened)
        }
        Err(error) => {
            let message = error.to_string();
            let mut rec = AuditRecord::new(AuditEvent::ExecRejected, req.subject);
            rec.exec_id = Some(req.exec_id);
            rec.error = Some(message);
            let unrecorded = records.append(&rec).await.err();
            Err(ExecGateError::Refused { error, unrecorded })
        }
    }
}

/// The shim's trail: queued on the audit writer thread, behind every record before it.
#[async_trait]
impl SandboxRecords for std::sync::Arc<crate::audit::Trail> {
    async fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
        self.append_queued(record).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::test_support::subject;
    use serde_json::json;
    use std::sync::Mutex;

    /// Records kept as their JSON, or every append failing like a full disk.
    #[derive(Default)]
    struct Kept {
        lines: Mutex<Vec<Value>>,
        failing: bool,
    }

    #[async_trait]
    impl SandboxRecords for Kept {
        async fn append(&self, record: &AuditRecord<'_>) -> Result<Digest, AuditError> {
            if self.failing {
                return Err(AuditError::ShortWrite {
                    path: "/var/log/gvisor-hardened/audit.jsonl".into(),
                    written: 0,
                    len: 1,
                });
            }
            self.lines
                .lock()
                .unwrap()
                .push(serde_json::to_value(record).unwrap());
            Ok(Digest([0; 32]))
        }
    }

    fn root_with_caps() -> Value {
        json!({
            "args": ["sh"], "cwd": "/", "env": ["PATH=/bin"],
            "user": {"uid": 0, "gid": 0},
            "capabilities": {"bounding": ["CAP_SYS_ADMIN"], "effective": ["CAP_SYS_ADMIN"]}
        })
    }

    fn duplicate_rlimit() -> Value {
        let mut p = root_with_caps();
        p["rlimits"] = json!([
            {"type": "RLIMIT_NOFILE", "hard": 10, "soft": 10},
            {"type": "RLIMIT_NOFILE", "hard": 99, "soft": 99}
        ]);
        p
    }

    async fn gate(records: &Kept, process: &Value) -> Result<HardenedProcess, ExecGateError> {
        let subject = subject("c1");
        let req = ExecRequest {
            exec_id: "e1",
            process,
            subject: &subject,
            namespace: "default",
            container_id: "c1",
        };
        admit(records, &Policy::default(), req).await
    }

    #[tokio::test]
    async fn an_admitted_exec_is_hardened_and_recorded_with_what_the_policy_changed() {
        let kept = Kept::default();
        let h = gate(&kept, &root_with_caps()).await.unwrap();
        assert_ne!(h.process["user"]["uid"], 0);
        assert_eq!(h.process["capabilities"]["bounding"], json!([]));
        let lines = kept.lines.lock().unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["event"], "exec");
        assert_eq!(lines[0]["exec_id"], "e1");
        assert!(!lines[0]["decisions"].as_array().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_refused_exec_is_recorded_with_the_rule_and_never_admitted() {
        let kept = Kept::default();
        let err = gate(&kept, &duplicate_rlimit()).await.unwrap_err();
        let ExecGateError::Refused { error, unrecorded } = &err else {
            panic!("{err:?}");
        };
        assert!(unrecorded.is_none());
        assert!(
            error.to_string().contains("RLIMIT_NOFILE is set twice"),
            "{error}"
        );
        let lines = kept.lines.lock().unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["event"], "exec-rejected");
        assert_eq!(lines[0]["error"], error.to_string());
    }

    #[tokio::test]
    async fn an_exec_that_cannot_be_recorded_is_not_admitted_and_a_refusal_stays_a_refusal() {
        let failing = Kept {
            failing: true,
            ..Kept::default()
        };
        assert!(matches!(
            gate(&failing, &root_with_caps()).await,
            Err(ExecGateError::Unrecorded(AuditError::ShortWrite { .. }))
        ));
        assert!(matches!(
            gate(&failing, &duplicate_rlimit()).await,
            Err(ExecGateError::Refused {
                unrecorded: Some(AuditError::ShortWrite { .. }),
                ..
            })
        ));
    }
}
