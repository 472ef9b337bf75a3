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

use std::sync::{Arc, Mutex};

use policy_injector::{Lifetime, Policy};
use serde_json::Value;

use super::Container;
use crate::process::Process;
use gvisor_hardened_core::artifacts::{self, StartRecord, WritableMount};
use gvisor_hardened_core::idle::IdleThreshold;
use gvisor_hardened_core::output_limit::{self, OutputBudget};
use gvisor_hardened_core::sandbox::end::{self, ExitEvidence};

/// A container's evidence settings and the start manifest, from Create to the init's exit.
pub(super) struct Evidence {
    /// The container's output budget, shared by its init and execs; `None`: the shim does not
    /// interpose and the fifos go to runsc.
    pub(super) output: Option<OutputBudget>,
    /// The idle detector's CPU threshold for this container's CPU quota.
    pub(super) idle_threshold: IdleThreshold,
    /// The writable bind mounts of the container's own hardened spec.
    pub(super) binds: Vec<WritableMount>,
    pub(super) start: Mutex<Option<StartRecord>>,
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
            None => OutputBudget::when_needed(max, lifetime.idle_timeout.is_some()),
        };
        Evidence {
            output,
            idle_threshold: IdleThreshold::of_spec(spec),
            binds: artifacts::writable_binds(spec),
            start: Mutex::new(None),
        }
    }
}

impl Container {
    /// Waits for what must be in `process`'s exit record before it is published: its output
    /// copy (bounded by [`output_limit::DRAIN_DEADLINE`]) and, for an init, the exit manifest of the
    /// container's volumes (bounded by `max_walk_time` + [`artifacts::WALK_GRACE`]), side by side.
    /// `note`, why the runtime ended it, goes after the process's last byte of output.
    pub(super) async fn collect_exit_evidence(
        &self,
        process: &Arc<Process>,
        note: Option<String>,
    ) -> ExitEvidence {
        let who = self.name_of(process);
        let output = async {
            // The interposed copy first: it holds the client's ends open until its note is
            // written, and a logging program exits only once they close.
            let report = match process.io.take_output() {
                Some(copy) => Some(
                    output_limit::drain(copy, output_limit::DRAIN_DEADLINE, &who, note.clone())
                        .await,
                ),
                None => None,
            };
            // Terminal output the shim copies without a budget (the note after it, when no
            // copy wrote it), and the logging program.
            let p = process.clone();
            let _ =
                tokio::task::spawn_blocking(move || p.io.wait_output_then_note(note.as_deref()))
                    .await;
            report
        };
        // The manifest records what the sandbox left; then the workspace is concluded (what
        // would run on the host is neutralised) before the exit is announced.
        let volumes = async {
            if !process.is_init() {
                return (None, None);
            }
            let start = self
                .evidence
                .start
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
            end::volumes_at_exit(end::Volumes {
                container_id: self.id.clone(),
                start,
                policy: self.policy.policy.audit.artifacts.clone(),
                audit_log: self.audit.log().path().to_path_buf(),
                bundle: self.bundle.clone(),
            })
            .await
        };
        let (output, (artifacts, workspace)) = tokio::join!(output, volumes);
        ExitEvidence {
            output,
            artifacts,
            workspace,
        }
    }
}
