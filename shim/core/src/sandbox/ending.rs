//! The one exit sequence: every process that ends (a sandbox's init, a pod's later container,
//! an exec) goes through [`conclude`], under both front ends. The order is the core's; what a
//! front end does at a step (containerd's TaskExit and TaskOOM events and the kubelet's
//! termination message; runsc-hardened's exit record in its state directory) sits behind
//! [`ExitSteps`].
//!
//! In order: classify (an enforced limit, the cgroup's counters, or the status); for an init,
//! end what ends with the sandbox (its egress, whose records come before the exit record) and
//! let a start still announcing itself finish; collect the evidence (the output drained with
//! the enforcement line after its last byte; an init's volumes and workspace); keep the exit
//! where the engine reads it; an OOM kill's own report; the termination message; the exit
//! event; the exit record; the log line; and last what wakes the waiters. A client that sees
//! the exit therefore finds the event sent and the record written.

use std::time::SystemTime;

use async_trait::async_trait;
use policy_injector::Lifetime;

use super::end::ExitEvidence;
use super::{exit, termination_message};
use crate::audit::{AuditEvent, AuditRecord, Subject};
use crate::exit::{Exit, ExitCause};
use crate::host::SandboxCgroups;
use crate::reaper::ExitStatus;

/// The process that ended.
pub struct Ended<'a> {
    /// `None` for the sandbox's init; an exec's id otherwise.
    pub exec_id: Option<&'a str>,
    pub pid: Option<u32>,
    pub status: ExitStatus,
}

impl Ended<'_> {
    fn is_init(&self) -> bool {
        self.exec_id.is_none()
    }
}

/// What a front end does at each step of [`conclude`]. The defaults are "nothing": the OCI
/// engines wait on a pid and read its status, they take no events.
#[async_trait]
pub trait ExitSteps: Send + Sync {
    /// How the log names the process ("container c1", "exec e1 of container c1").
    fn who(&self) -> String;
    /// Whom the records are about.
    fn subject(&self) -> &Subject;
    /// The sandbox's time limits, for the line that says which one ended it.
    fn lifetime(&self) -> Lifetime;
    /// Set when one of the runtime's own limits stopped the sandbox: the status only echoes
    /// its SIGTERM or SIGKILL.
    fn stopped_for(&self) -> Option<ExitCause>;
    /// The sandbox's cgroups, which tell an OOM kill and the process ceiling from a plain
    /// kill; `None` when they could not be found.
    fn cgroups(&self) -> Option<&dyn SandboxCgroups>;
    /// The init ended: what ends with the sandbox ends now (its egress proxy and forwarder,
    /// whose records come before the exit record; the sandbox's CA).
    async fn sandbox_ended(&self);
    /// A start still recording the start and announcing it goes first: the workload may end
    /// at once.
    async fn after_start(&self) {}
    /// What the end leaves: the output, drained with `note` after its last byte, and for an
    /// init the exit manifest of the volumes and the workspace's conclusion.
    async fn evidence(&self, note: Option<String>) -> ExitEvidence;
    /// Keeps the exit where the engine reads it. `false`: it was kept already, by another
    /// path, and nothing more is done.
    async fn keep(&self, exit: &Exit) -> bool;
    /// The memory limit killed the sandbox.
    async fn out_of_memory(&self) {}
    /// Lines for the file Kubernetes reads into the container's status.
    fn termination_message(&self, _lines: &[String]) {}
    /// The exit, to an engine that takes events.
    async fn publish(&self, _exit: &Exit) {}
    /// Writes a record; a failure is the front end's to log.
    async fn append(&self, record: &AuditRecord<'_>);
    /// Everything about the exit is said: stop the timers, wake whoever waits on it.
    async fn done(&self, _exit: Exit) {}
}

/// Runs the exit sequence for `ended`. Returns the exit and why, or `None` when the exit had
/// been kept already.
pub async fn conclude(steps: &dyn ExitSteps, ended: Ended<'_>) -> Option<Exit> {
    let who = steps.who();
    let init = ended.is_init();
    // An exec's end is its own; an init's is the sandbox's, which enforcement may have caused.
    let cause = if init {
        exit::classify(&who, ended.status, steps.stopped_for(), steps.cgroups())
    } else {
        ExitCause::of_status(ended.status)
    };
    let why = if init {
        steps.sandbox_ended().await;
        steps.after_start().await;
        let lifetime = steps.lifetime();
        termination_message::message(cause, lifetime.max_runtime, lifetime.idle_timeout)
    } else {
        None
    };
    let evidence = steps.evidence(why.clone()).await;
    let exit = Exit::new(ended.status, cause, SystemTime::now());
    if !steps.keep(&exit).await {
        return None;
    }
    if cause == ExitCause::Oom {
        steps.out_of_memory().await;
    }
    if init {
        let lines: Vec<String> = why
            .into_iter()
            .chain(evidence.workspace_summary())
            .collect();
        if !lines.is_empty() {
            steps.termination_message(&lines);
        }
    }
    steps.publish(&exit).await;
    let event = if init {
        AuditEvent::Exit
    } else {
        AuditEvent::ExecExit
    };
    let mut rec = AuditRecord::new(event, steps.subject());
    rec.exec_id = ended.exec_id;
    rec.pid = ended.pid;
    rec.set_exit(&exit);
    evidence.annotate(&mut rec);
    steps.append(&rec).await;
    exit::log_exit(&who, cause, ended.status);
    steps.done(exit).await;
    Some(exit)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::audit::test_support::subject;
    use crate::fake::host::CgroupsSaying;
    use crate::workspace::WorkspaceReport;

    /// Front-end steps that write down what was asked of them, in order.
    struct Steps {
        subject: Subject,
        cgroups: Option<CgroupsSaying>,
        stopped_for: Option<ExitCause>,
        kept_already: bool,
        workspace: Option<WorkspaceReport>,
        seen: Mutex<Vec<String>>,
    }

    impl Steps {
        fn new() -> Steps {
            Steps {
                subject: subject("c1"),
                cgroups: None,
                stopped_for: None,
                kept_already: false,
                workspace: None,
                seen: Mutex::new(Vec::new()),
            }
        }

        fn saw(&self, what: impl Into<String>) {
            self.seen.lock().unwrap().push(what.into());
        }

        fn seen(&self) -> Vec<String> {
            self.seen.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl ExitSteps for Steps {
        fn who(&self) -> String {
            "container c1".into()
        }
        fn subject(&self) -> &Subject {
            &self.subject
        }
        fn lifetime(&self) -> Lifetime {
            Lifetime {
                max_runtime: Duration::from_secs(60),
                grace_period: Duration::from_secs(5),
                idle_timeout: Some(Duration::from_secs(30)),
            }
        }
        fn stopped_for(&self) -> Option<ExitCause> {
            self.stopped_for
        }
        fn cgroups(&self) -> Option<&dyn SandboxCgroups> {
            self.cgroups.as_ref().map(|c| c as &dyn SandboxCgroups)
        }
        async fn sandbox_ended(&self) {
            self.saw("sandbox ended");
        }
        async fn after_start(&self) {
            self.saw("after start");
        }
        async fn evidence(&self, note: Option<String>) -> ExitEvidence {
            self.saw(format!("evidence, note {note:?}"));
            ExitEvidence {
                workspace: self.workspace.clone(),
                ..Default::default()
            }
        }
        async fn keep(&self, exit: &Exit) -> bool {
            self.saw(format!("keep {:?} {}", exit.cause, exit.status));
            !self.kept_already
        }
        async fn out_of_memory(&self) {
            self.saw("out of memory");
        }
        fn termination_message(&self, lines: &[String]) {
            self.saw(format!("termination message {lines:?}"));
        }
        async fn publish(&self, exit: &Exit) {
            self.saw(format!("publish {}", exit.status));
        }
        async fn append(&self, record: &AuditRecord<'_>) {
            let line = serde_json::to_value(record).unwrap();
            self.saw(format!(
                "record {} exec {} pid {}",
                line["event"], line["exec_id"], line["pid"]
            ));
        }
        async fn done(&self, exit: Exit) {
            self.saw(format!("done {}", exit.status));
        }
    }

    fn run(steps: &Steps, ended: Ended<'_>) -> Option<Exit> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(conclude(steps, ended))
    }

    fn init(status: ExitStatus) -> Ended<'static> {
        Ended {
            exec_id: None,
            pid: Some(42),
            status,
        }
    }

    #[test]
    fn an_inits_end_stops_the_sandboxs_egress_before_anything_is_recorded_and_wakes_waiters_last() {
        let steps = Steps::new();
        let exit = run(&steps, init(ExitStatus::Exited(3))).unwrap();
        assert_eq!(exit.status, 3);
        assert_eq!(
            steps.seen(),
            [
                "sandbox ended",
                "after start",
                "evidence, note None",
                "keep Exited 3",
                "publish 3",
                "record \"exit\" exec null pid 42",
                "done 3",
            ]
        );
    }

    #[test]
    fn an_execs_end_leaves_the_sandbox_alone_and_is_an_exec_exit_record() {
        let steps = Steps::new();
        let ended = Ended {
            exec_id: Some("e1"),
            pid: Some(7),
            status: ExitStatus::killed(),
        };
        run(&steps, ended).unwrap();
        assert_eq!(
            steps.seen(),
            [
                "evidence, note None",
                "keep Signaled 137",
                "publish 137",
                "record \"exec-exit\" exec \"e1\" pid 7",
                "done 137",
            ]
        );
    }

    #[test]
    fn an_exit_kept_already_is_not_published_or_recorded_twice() {
        let mut steps = Steps::new();
        steps.kept_already = true;
        assert!(run(&steps, init(ExitStatus::Exited(0))).is_none());
        assert_eq!(
            steps.seen().last().map(String::as_str),
            Some("keep Exited 0")
        );
    }

    #[test]
    fn an_oom_kill_is_reported_before_the_exit_is_published() {
        let mut steps = Steps::new();
        steps.cgroups = Some(CgroupsSaying(Ok(ExitCause::Oom)));
        run(&steps, init(ExitStatus::killed())).unwrap();
        let seen = steps.seen();
        let oom = seen.iter().position(|s| s == "out of memory").unwrap();
        let publish = seen.iter().position(|s| s == "publish 137").unwrap();
        assert!(oom < publish, "{seen:?}");
        assert!(seen.iter().any(|s| s.starts_with("termination message")));
    }

    #[test]
    fn a_time_limits_end_says_so_after_the_output_and_in_the_termination_message() {
        let mut steps = Steps::new();
        steps.stopped_for = Some(ExitCause::IdleTimeout);
        let exit = run(&steps, init(ExitStatus::killed())).unwrap();
        assert_eq!(exit.cause, ExitCause::IdleTimeout);
        let seen = steps.seen();
        let note = seen.iter().find(|s| s.starts_with("evidence")).unwrap();
        assert!(note.contains("idle"), "{note}");
        let message = seen
            .iter()
            .find(|s| s.starts_with("termination message"))
            .unwrap();
        assert!(message.contains("idle"), "{message}");
    }

    #[test]
    fn an_exec_never_gets_the_sandboxs_enforcement_line() {
        let mut steps = Steps::new();
        // The sandbox's limit fired, but an exec's end is its own.
        steps.stopped_for = Some(ExitCause::Timeout);
        let ended = Ended {
            exec_id: Some("e1"),
            pid: None,
            status: ExitStatus::killed(),
        };
        assert_eq!(run(&steps, ended).unwrap().cause, ExitCause::Signaled);
        assert!(!steps
            .seen()
            .iter()
            .any(|s| s.starts_with("termination message")));
    }
}
