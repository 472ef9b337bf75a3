//! The one path every process exit takes: a sandbox's init, a pod's later container, an exec.
//!
//! In order: classify (OOM, process limit, wall-clock limit, idle timeout, or what the status
//! says), let an init's Start finish announcing it, wait for output in flight to drain and (an
//! init) take the exit manifest of its volumes, both bounded (`evidence.rs`), record the exit,
//! publish it (TaskOOM first when the memory limit killed it), write the audit line, and only
//! then wake every Wait: a client that saw Wait return finds the event sent and the record on
//! disk, and a Delete (which waits too) can never publish TaskDelete ahead of TaskExit.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

use super::Container;
use crate::process::Process;
use gvisor_hardened_core::audit::AuditEvent;
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::reaper::ExitStatus;

impl Container {
    pub(super) async fn on_exit(self: &Arc<Self>, process: &Arc<Process>, status: ExitStatus) {
        let cause = self.classify(process, status);
        if process.is_init() {
            self.init_ended.cancel();
            // The sandbox is gone with its first container: so is its forwarder. Stopped (and
            // its end audited) before the exit record.
            if !self.is_member() {
                self.stop_egress().await;
            }
            // An exit during Start waits until Start has recorded the start and sent TaskStart.
            drop(self.start_lock.lock().await);
        }
        // Output still in flight must reach the client before the exit does, and after it the
        // line that says why the runtime ended the container, where its user reads its log.
        let note = process
            .is_init()
            .then(|| self.why_enforcement_ended_it(cause))
            .flatten();
        let evidence = self.collect_exit_evidence(process, note).await;
        let exit = Exit::new(status, cause, SystemTime::now());
        if !process.record_exit(exit) {
            return;
        }
        if cause == ExitCause::Oom {
            self.report_oom().await;
        }
        if process.is_init() {
            self.tell_the_kubelet_why(cause, evidence.workspace_summary());
        }
        let pid = process.pid();
        self.events()
            .exit(&self.id, &process.exec_id, pid, exit.status, exit.at)
            .await;
        let mut rec = self.record(if process.is_init() {
            AuditEvent::Exit
        } else {
            AuditEvent::ExecExit
        });
        rec.exec_id = (!process.is_init()).then_some(process.exec_id.as_str());
        rec.pid = Some(pid);
        rec.set_exit(&exit);
        evidence.annotate(&mut rec);
        self.audit_best_effort(&rec).await;
        gvisor_hardened_core::sandbox::exit::log_exit(&self.name_of(process), cause, status);
        if process.is_init() {
            self.stop_lifetime();
        }
        process.announce_exit(exit);
    }

    /// Why the process ended. An exec's exit is its own; an init's is the sandbox's, which the
    /// runtime's enforcement may have caused (`gvisor_hardened_core::sandbox::exit`).
    fn classify(&self, process: &Process, status: ExitStatus) -> ExitCause {
        if !process.is_init() {
            return ExitCause::of_status(status);
        }
        // A pod's container ends with its sandbox: when the sandbox's own limit stopped the
        // pod (its timer started first), that is why this container ended too.
        let stopped_for = self
            .stopped_for
            .get()
            .or_else(|| self.pod_sandbox().and_then(|sb| sb.stopped_for.get()))
            .copied();
        gvisor_hardened_core::sandbox::exit::classify(
            &self.id,
            status,
            stopped_for,
            self.cgroups.get().map(|cg| cg.as_ref()),
        )
    }

    /// The line for the container's log and termination message when enforcement ended it.
    fn why_enforcement_ended_it(&self, cause: ExitCause) -> Option<String> {
        gvisor_hardened_core::sandbox::termination_message::message(
            cause,
            self.lifetime.max_runtime,
            self.lifetime.idle_timeout,
        )
    }

    /// Enforcement ended a pod's container, or the workspace's exit changed or found something
    /// in the pod's volumes: a line each in its termination-message file, before the exit is
    /// published, so the kubelet's status shows them beside the exit code. Best effort: the exit
    /// record in the audit log says the same and is what counts.
    fn tell_the_kubelet_why(&self, cause: ExitCause, workspace: Option<String>) {
        use gvisor_hardened_core::sandbox::termination_message::append;
        let Some(path) = &self.termination_message else {
            return;
        };
        let enforcement = self.why_enforcement_ended_it(cause);
        for line in enforcement.iter().chain(workspace.iter()) {
            if let Err(e) = append(path, line) {
                log::warn!(
                    "container {}: writing the termination message {}: {e}",
                    self.id,
                    path.display()
                );
            }
        }
    }

    /// The memory cgroup killed the sandbox: TaskOOM (what CRI turns into `OOMKilled`) and an
    /// audit line, once.
    pub(super) async fn report_oom(&self) {
        if self.oom_reported.swap(true, Ordering::SeqCst) {
            return;
        }
        log::warn!(
            "container {}: out of memory, the sandbox was killed at its memory limit",
            self.id
        );
        self.events().oom(&self.id).await;
        self.audit_best_effort(&self.record(AuditEvent::Oom)).await;
    }
}
