//! What a container leaves behind besides its lifecycle records (issue 13): what its processes
//! wrote to stdout/stderr, bounded by `[output] max_bytes` and counted for the idle timeout
//! (`output_limit`), and what it changed in its writable volumes (`[audit.artifacts]`,
//! `artifacts`).
//!
//! Settled at Create from the policy and the container's own hardened spec ([`Evidence::new`]);
//! the start manifest is taken at Start, before `runsc start` (a failure fails the Start, as
//! an unwritable audit log fails a Create); the exit path waits for the output copy and takes
//! the exit manifest at once, each under its own deadline, so a stuck client, a process that
//! keeps a stream open or a hostile volume delays an exit event by a bounded time, never
//! forever.
//!
//! Execs share their container's budget: `max_bytes` bounds what the container as a whole
//! hands back (a tool call's result), which N execs of a bound each would multiply; and the
//! idle detector must see an exec's output as the container's activity. A pod's containers
//! each have their own bound, but count their output into one activity counter, the pod
//! sandbox container's: the CPU time the detector reads is the whole sandbox's too.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use policy_injector::{Lifetime, Policy};
use serde_json::Value;

use super::Container;
use crate::artifacts::{self, ExitRecord, StartRecord, WritableMount};
use crate::audit::{ArtifactsAudit, AuditRecord};
use crate::error::{Result, ShimError};
use crate::idle::IdleThreshold;
use crate::output_limit::{Interposer, OutputBudget, OutputReport};
use crate::process::Process;
use crate::workspace::{self, WorkspaceReport};

/// How long the exit path waits for a process's output copy to reach the end of its streams.
/// The pipe holds at most a MiB once the process is gone; what keeps a stream open longer is a
/// client that stopped reading or a process left in the sandbox holding it.
pub(super) const OUTPUT_DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// A container's evidence settings and the start manifest, from Create to the init's exit.
pub(super) struct Evidence {
    /// The container's output budget, shared by its init and execs; `None`: the shim does not
    /// interpose and the fifos go to runsc.
    pub(super) output: Option<OutputBudget>,
    /// The idle detector's CPU threshold for this container's CPU quota.
    pub(super) idle_threshold: IdleThreshold,
    /// The writable bind mounts of the container's own hardened spec.
    binds: Vec<WritableMount>,
    start: Mutex<Option<StartRecord>>,
}

impl Evidence {
    /// `sandbox` is the pod sandbox container this one joins, if any.
    pub(super) fn new(
        policy: &Policy,
        lifetime: &Lifetime,
        spec: &Value,
        sandbox: Option<&Arc<Container>>,
    ) -> Evidence {
        let max = policy.output.max_bytes.map(|b| b.0);
        let pod_activity = sandbox.and_then(|s| s.evidence.output.as_ref());
        let output = match pod_activity {
            Some(pod) => Some(OutputBudget::sharing_activity(max, pod)),
            None if max.is_some() || lifetime.idle_timeout.is_some() => {
                Some(OutputBudget::new(max))
            }
            None => None,
        };
        Evidence {
            output,
            idle_threshold: IdleThreshold::for_cpu_limit(cpu_millis(spec)),
            binds: artifacts::writable_binds(spec),
            start: Mutex::new(None),
        }
    }
}

/// The CPU quota of a spec in millicores (`linux.resources.cpu` quota over period).
fn cpu_millis(spec: &Value) -> Option<u64> {
    let cpu = spec.pointer("/linux/resources/cpu")?;
    let quota = cpu.get("quota")?.as_i64().filter(|q| *q > 0)? as u64;
    let period = cpu
        .get("period")
        .and_then(Value::as_u64)
        .filter(|p| *p > 0)
        .unwrap_or(100_000);
    Some(quota.saturating_mul(1000) / period)
}

/// What the exit path found, for the exit record.
#[derive(Default)]
pub(super) struct ExitEvidence {
    output: Option<OutputReport>,
    artifacts: Option<std::result::Result<ExitRecord, String>>,
    workspace: Option<WorkspaceReport>,
}

impl ExitEvidence {
    pub(super) fn annotate<'a>(&'a self, rec: &mut AuditRecord<'a>) {
        if let Some(report) = &self.output {
            rec.set_output(report);
        }
        rec.artifacts = self.artifacts.as_ref().map(ArtifactsAudit::of_exit);
        rec.workspace = self.workspace.as_ref();
    }
}

/// Waits for `copy` to reach the end of its streams, at most `deadline`; past it the report
/// says so and holds the counts so far (the copy goes on by itself until its writers close).
pub(super) async fn drain_output(copy: Interposer, deadline: Duration, who: &str) -> OutputReport {
    let progress = copy.progress();
    let waiting = tokio::task::spawn_blocking(move || copy.wait());
    match tokio::time::timeout(deadline, waiting).await {
        Ok(Ok(report)) => report,
        Ok(Err(e)) => {
            log::error!("{who}: the output copy failed: {e}");
            progress.snapshot()
        }
        Err(_) => {
            log::warn!(
                "{who}: output still open {deadline:?} after the exit (a client that stopped reading, or a process still holding the stream); reporting the exit with what was copied so far"
            );
            progress.snapshot()
        }
    }
}

impl Container {
    /// The start manifest of the container's writable volumes, before `runsc start` runs the
    /// workload. `Ok(None)`: manifests are off or there is no writable volume. An error fails
    /// the Start: the policy asks for evidence the shim could not record.
    pub(super) async fn record_artifacts_start(&self) -> Result<Option<StartRecord>> {
        let policy = self.policy.policy.audit.artifacts.clone();
        if !policy.enabled || self.evidence.binds.is_empty() {
            return Ok(None);
        }
        let binds = self.evidence.binds.clone();
        let log: PathBuf = self.audit.log().path().to_path_buf();
        let id = self.id.clone();
        let walked = tokio::task::spawn_blocking(move || {
            artifacts::record_start_of(binds, &policy, &log, &id)
        })
        .await
        .map_err(|e| ShimError::Internal(format!("the start manifest's walk failed: {e}")))?;
        let start = walked?;
        *self
            .evidence
            .start
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = start.clone();
        Ok(start)
    }

    /// Waits for what must be in `process`'s exit record before it is published: its output
    /// copy (bounded by [`OUTPUT_DRAIN_DEADLINE`]) and, for an init, the exit manifest of the
    /// container's volumes (bounded by `max_walk_time` + [`artifacts::WALK_GRACE`]), side by side.
    pub(super) async fn collect_exit_evidence(&self, process: &Arc<Process>) -> ExitEvidence {
        let who = self.name_of(process);
        let output = async {
            // Terminal output the shim copies without a budget.
            let p = process.clone();
            let _ = tokio::task::spawn_blocking(move || p.io.wait_output()).await;
            match process.io.take_output() {
                Some(copy) => Some(drain_output(copy, OUTPUT_DRAIN_DEADLINE, &who).await),
                None => None,
            }
        };
        // The manifest records what the sandbox left; then the workspace is concluded (what
        // would run on the host is neutralised) before the exit is announced.
        let volumes = async {
            if process.is_init() {
                let artifacts = self.record_artifacts_exit().await;
                (artifacts, self.conclude_workspace().await)
            } else {
                (None, None)
            }
        };
        let (output, (artifacts, workspace)) = tokio::join!(output, volumes);
        ExitEvidence {
            output,
            artifacts,
            workspace,
        }
    }

    /// `[mounts.workspace]` at the exit: see `crate::workspace`.
    async fn conclude_workspace(&self) -> Option<WorkspaceReport> {
        let bundle = self.bundle.clone();
        let report =
            tokio::task::spawn_blocking(move || workspace::finish(&bundle, workspace::Ending::Ran))
                .await
                .unwrap_or_else(|e| {
                    log::error!("container {}: concluding the workspace: {e}", self.id);
                    None
                })?;
        for e in &report.errors {
            log::warn!("container {}: workspace: {e}", self.id);
        }
        Some(report)
    }

    async fn record_artifacts_exit(&self) -> Option<std::result::Result<ExitRecord, String>> {
        let start = self
            .evidence
            .start
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let result = artifacts::record_exit_bounded(
            start,
            self.policy.policy.audit.artifacts.clone(),
            self.audit.log().path().to_path_buf(),
            self.id.clone(),
        )
        .await;
        if let Err(e) = &result {
            log::error!("container {}: {e}", self.id);
        }
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output_limit::{interpose, sandbox_pipe, StreamPair};
    use serde_json::json;
    use std::io::Write;

    #[test]
    fn the_cpu_quota_is_read_in_millicores() {
        let spec = |cpu: Value| json!({"linux": {"resources": {"cpu": cpu}}});
        assert_eq!(
            cpu_millis(&spec(json!({"quota": 50000, "period": 100000}))),
            Some(500)
        );
        assert_eq!(cpu_millis(&spec(json!({"quota": 200000}))), Some(2000));
        assert_eq!(
            cpu_millis(&spec(json!({"quota": -1, "period": 100000}))),
            None
        );
        assert_eq!(cpu_millis(&json!({})), None);
    }

    /// Real time: the deadline is what is tested (under paused time a blocking wait keeps the
    /// clock from moving).
    #[tokio::test]
    async fn an_output_stream_held_open_reports_what_was_copied_by_the_deadline() {
        let budget = OutputBudget::new(Some(1 << 20));
        let (from_sandbox, mut writer) = sandbox_pipe().unwrap();
        let (mut client, to_client) = sandbox_pipe().unwrap();
        let copy = interpose(
            &budget,
            Some(StreamPair {
                from_sandbox,
                to_client,
            }),
            None,
        )
        .unwrap();
        writer.write_all(b"partial\n").unwrap();
        // Read it at the client: then the copy has counted it.
        let mut got = [0u8; 8];
        std::io::Read::read_exact(&mut client, &mut got).unwrap();
        let started = std::time::Instant::now();
        let report = drain_output(copy, Duration::from_millis(300), "test").await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
        assert!(!report.complete);
        assert_eq!(report.output_bytes, 8);
        assert_eq!(report.stdout.as_ref().unwrap().sha256, None);
        drop(writer);
    }
}
