//! The shim's part of the one exit sequence every process takes (a sandbox's init, a pod's
//! later container, an exec): `gvisor_hardened_core::sandbox::ending` owns the order; here are
//! the steps that are containerd's. The sandbox's end stops its egress and lets Start finish
//! announcing it; the evidence waits for the output copy and, for an init, the volumes
//! (`evidence.rs`); the exit is kept on the process, TaskOOM goes first when the memory limit
//! killed it, the kubelet's termination message says why, TaskExit is published, the record
//! written, and only then is every Wait woken: a client that saw Wait return finds the event
//! sent and the record on disk, and a Delete (which waits too) can never publish TaskDelete
//! ahead of TaskExit.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;

use super::Container;
use crate::process::Process;
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord, Subject};
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::sandbox::end::ExitEvidence;
use gvisor_hardened_core::sandbox::ending::{self, Ended, ExitSteps};
use policy_injector::Lifetime;

impl Container {
    pub(super) async fn on_exit(self: &Arc<Self>, process: &Arc<Process>, status: ExitStatus) {
        let ended = Ended {
            exec_id: (!process.is_init()).then_some(process.exec_id.as_str()),
            pid: Some(process.pid()),
            status,
        };
        ending::conclude(&ProcessEnd { c: self, process }, ended).await;
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

/// One process of a container, at its end.
struct ProcessEnd<'a> {
    c: &'a Arc<Container>,
    process: &'a Arc<Process>,
}

#[async_trait]
impl ExitSteps for ProcessEnd<'_> {
    fn who(&self) -> String {
        self.c.name_of(self.process)
    }

    fn subject(&self) -> &Subject {
        &self.c.subject
    }

    fn lifetime(&self) -> Lifetime {
        self.c.lifetime
    }

    /// A pod's container ends with its sandbox: when the sandbox's own limit stopped the pod
    /// (its timer started first), that is why this container ended too.
    fn stopped_for(&self) -> Option<ExitCause> {
        self.c
            .stopped_for
            .get()
            .or_else(|| self.c.pod_sandbox().and_then(|sb| sb.stopped_for.get()))
            .copied()
    }

    fn cgroups(&self) -> Option<&dyn SandboxCgroups> {
        self.c.cgroups.get().map(|cg| cg.as_ref())
    }

    /// The sandbox is gone with its first container: so is its forwarder.
    async fn sandbox_ended(&self) {
        self.c.init_ended.cancel();
        if !self.c.is_member() {
            self.c.stop_egress().await;
        }
    }

    async fn after_start(&self) {
        drop(self.c.start_lock.lock().await);
    }

    async fn evidence(&self, note: Option<String>) -> ExitEvidence {
        self.c.collect_exit_evidence(self.process, note).await
    }

    async fn keep(&self, exit: &Exit) -> bool {
        self.process.record_exit(*exit)
    }

    async fn out_of_memory(&self) {
        self.c.report_oom().await;
    }

    /// Best effort: the exit record in the audit log says the same and is what counts.
    fn termination_message(&self, lines: &[String]) {
        use gvisor_hardened_core::sandbox::termination_message::append;
        let Some(path) = &self.c.termination_message else {
            return;
        };
        for line in lines {
            if let Err(e) = append(path, line) {
                log::warn!(
                    "container {}: writing the termination message {}: {e}",
                    self.c.id,
                    path.display()
                );
            }
        }
    }

    async fn publish(&self, exit: &Exit) {
        let pid = self.process.pid();
        self.c
            .events()
            .exit(&self.c.id, &self.process.exec_id, pid, exit.status, exit.at)
            .await;
    }

    async fn append(&self, record: &AuditRecord<'_>) {
        self.c.audit_best_effort(record).await;
    }

    async fn done(&self, exit: Exit) {
        if self.process.is_init() {
            self.c.stop_lifetime();
        }
        self.process.announce_exit(exit);
    }
}
