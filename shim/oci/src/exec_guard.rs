//! A detached exec's guard: the process the engine waits on for `exec --detach`, forked at the
//! start of the call (`fork.rs`) and told to go with the hardened process file. It starts the
//! exec through the sandbox core's runtime (`SandboxRuntime::exec`, as the shim's exec does),
//! as a subreaper, so runsc's process that lives as long as the exec becomes its child and its
//! exit is seen here; it passes on the signals the engine sends to the exec's process inside
//! the sandbox, writes `exec-start` and `exec-exit`, and exits with the exec's status (the
//! process's, 128 + the signal for a kill).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use async_trait::async_trait;
use policy_injector::Lifetime;
use serde_json::Value;

use super::cli::{Command, Invocation};
use super::error::{OciError, Result};
use super::fork::{report, FAILED, READY};
use super::guard::{show_as, stdio, EngineStdio, Forwarded, HostStdio, Signals};
use crate::opened::{not_running, Opened};
use gvisor_hardened_core::audit::{AuditEvent, AuditRecord, Subject};
use gvisor_hardened_core::bundle::MAX_PROCESS_BYTES;
use gvisor_hardened_core::exit::{Exit, ExitCause};
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runtime::{ExecCall, ExecStarted, ExitWatch, KillTarget};
use gvisor_hardened_core::sandbox::end::ExitEvidence;
use gvisor_hardened_core::sandbox::ending::{self, Ended, ExitSteps};

/// The guard's side of a detached exec's fork, once told to go with the hardened process
/// file. Returns the exit code the engine sees.
pub fn guard_child(inv: &Invocation, process_file: &str, ready: File) -> u8 {
    let Command::Exec {
        id,
        pid_file,
        console_socket,
        ..
    } = &inv.command
    else {
        return 1;
    };
    let exec_id = exec_id_of(pid_file.as_deref());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report(
                ready,
                &format!("{FAILED} cannot start the exec guard's runtime: {e}"),
            );
            return 1;
        }
    };
    rt.block_on(async {
        let launched = async {
            // A subreaper: runsc's process for the exec outlives `runsc exec --detach` and
            // becomes ours.
            let reaper = Reaper::install()?;
            let c = Opened::open_with(&inv.global, id, reaper).await?;
            show_as(&[
                b"exec-guard",
                c.state.path().as_os_str().as_encoded_bytes(),
                exec_id.as_bytes(),
            ]);
            let process = read_process(Path::new(process_file))?;
            let console = console_socket.as_deref();
            ExecGuard::launch(c, &exec_id, &process, console, &HostStdio).await
        }
        .await;
        match launched {
            Ok(guard) => {
                report(ready, &format!("{READY} {}", guard.started.pid));
                guard.watch(Forwarded::new()).await
            }
            Err(e) => {
                report(ready, &format!("{FAILED} {e}"));
                1
            }
        }
    })
}

/// The hardened process file (`exec` writes it, bounded as every process file is).
pub(super) fn read_process(path: &Path) -> Result<Value> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PROCESS_BYTES + 1).read_to_end(&mut bytes))
        .map_err(OciError::io("reading the process file", path))?;
    if bytes.len() as u64 > MAX_PROCESS_BYTES {
        return Err(OciError::Invalid {
            what: "exec",
            reason: format!(
                "{} is larger than {} MiB",
                path.display(),
                MAX_PROCESS_BYTES >> 20
            ),
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| OciError::Invalid {
        what: "exec",
        reason: format!("{} is not valid JSON: {e}", path.display()),
    })
}

/// The engine names the exec only through its pid file (`<exec id>.pid` for Docker).
pub(super) fn exec_id_of(pid_file: Option<&Path>) -> String {
    pid_file
        .and_then(Path::file_stem)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "exec".to_string())
}

/// An exec at its end, for the one exit sequence (`gvisor_hardened_core::sandbox::ending`):
/// its output copy's report goes in its `exec-exit` record; the engine reads the exit code.
struct ExecEnd<'a> {
    c: &'a Opened,
    exec_id: &'a str,
    streams: tokio::sync::Mutex<&'a mut stdio::Guarded>,
}

#[async_trait]
impl ExitSteps for ExecEnd<'_> {
    fn who(&self) -> String {
        format!("container {}, exec {}", self.c.record.id, self.exec_id)
    }

    fn subject(&self) -> &Subject {
        &self.c.record.subject
    }

    fn lifetime(&self) -> Lifetime {
        self.c.record.lifetime
    }

    fn stopped_for(&self) -> Option<ExitCause> {
        None
    }

    fn cgroups(&self) -> Option<&dyn SandboxCgroups> {
        None
    }

    /// Never asked: an exec's end is not its sandbox's.
    async fn sandbox_ended(&self) {}

    async fn evidence(&self, _note: Option<String>) -> ExitEvidence {
        let output = self.streams.lock().await.report(&self.who(), None).await;
        ExitEvidence {
            output,
            ..Default::default()
        }
    }

    async fn keep(&self, _exit: &Exit) -> bool {
        true
    }

    async fn append(&self, record: &AuditRecord<'_>) {
        self.c.audit_best_effort(record);
    }
}

pub(super) struct ExecGuard {
    c: Opened,
    exec_id: String,
    pub(super) started: ExecStarted,
    exit: ExitWatch,
    /// The exec's output under the container's budget, when the policy has one.
    streams: stdio::Guarded,
}

impl ExecGuard {
    /// Starts the exec (its streams are the engine's, which this process holds) and audits
    /// `exec-start`. Under an output bound or an idle timeout its output goes through the
    /// sandbox core's copy against the container's budget (the budget file the init's guard
    /// made): an exec's output counts against the bound and as the container's activity.
    pub(super) async fn launch(
        c: Opened,
        exec_id: &str,
        process: &Value,
        console_socket: Option<&Path>,
        stdio: &dyn EngineStdio,
    ) -> Result<ExecGuard> {
        let id = c.record.id.clone();
        // runsc's files for this exec (process, pids) go in the private state directory, named
        // apart from any other exec of the same id running at the same time.
        let files = format!("{exec_id}-{}", std::process::id());
        let budget = stdio::budget(
            &c.state,
            c.policy.output.max_bytes.map(|b| b.0),
            c.record.lifetime.idle_timeout.is_some(),
            false,
        )?;
        // An exec's terminal under a budget is relayed as the container's is.
        let (mut streams, io, runsc_console) = stdio::Guarded::open(stdio, budget, console_socket)?;
        let ran = c
            .runtime
            .exec(ExecCall {
                id: &id,
                exec_id: &files,
                bundle: c.state.path(),
                process,
                console_socket: runsc_console.as_deref(),
                stdio: io,
            })
            .await;
        // The exec's streams belong to its process now.
        stdio.let_go_of_stdio();
        let started = ran.map_err(|e| not_running(e, &id))?;
        if let Err(e) = streams.attach(console_socket) {
            let _ = c
                .runtime
                .kill(
                    &id,
                    libc::SIGKILL as u32,
                    KillTarget::Guest(started.guest_pid),
                )
                .await;
            return Err(e);
        }
        let exit = c.runtime.watch(started.pid)?;
        let mut rec = AuditRecord::new(AuditEvent::ExecStart, &c.record.subject);
        rec.exec_id = Some(exec_id);
        rec.pid = Some(started.pid);
        c.audit_best_effort(&rec);
        Ok(ExecGuard {
            c,
            exec_id: exec_id.to_string(),
            started,
            exit,
            streams,
        })
    }

    /// Until the exec's process ends: the signals sent to the guard go to it; then its
    /// `exec-exit`. Returns the code the engine sees.
    pub(super) async fn watch(mut self, mut signals: impl Signals) -> u8 {
        let id = self.c.record.id.clone();
        let status = loop {
            tokio::select! {
                status = &mut self.exit => break status,
                sig = signals.next() => {
                    let target = KillTarget::Guest(self.started.guest_pid);
                    if let Err(e) = self.c.runtime.kill(&id, sig as u32, target).await {
                        if !e.is_gone() {
                            log::warn!("container {id}: forwarding signal {sig} to exec {}: {e}", self.exec_id);
                        }
                    }
                }
            }
        };
        let steps = ExecEnd {
            c: &self.c,
            exec_id: &self.exec_id,
            streams: tokio::sync::Mutex::new(&mut self.streams),
        };
        let ended = Ended {
            exec_id: Some(&self.exec_id),
            pid: Some(self.started.pid),
            status,
        };
        ending::conclude(&steps, ended).await;
        status.containerd_code().min(255) as u8
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use tokio::sync::mpsc;

    use super::*;
    use crate::tests::{audit_records, created, opened_as};
    use gvisor_hardened_core::fake::{Fake, Step};
    use gvisor_hardened_core::reaper::ExitStatus;
    use gvisor_hardened_core::runsc::client::ProcessIo;

    struct NoStdio;

    impl EngineStdio for NoStdio {
        fn stdio(&self) -> Result<ProcessIo> {
            Ok(ProcessIo::default())
        }

        fn let_go_of_stdio(&self) {}
    }

    fn process() -> Value {
        json!({"args": ["sh", "-c", "exit 4"], "cwd": "/", "user": {"uid": 65534, "gid": 65534}})
    }

    /// The exec's name on the fake (its runsc files' name).
    fn on_the_fake(exec_id: &str) -> String {
        format!("{exec_id}-{}", std::process::id())
    }

    fn events(dir: &Path) -> Vec<String> {
        audit_records(&dir.join("audit.jsonl"))
            .iter()
            .filter_map(|r| r["event"].as_str().map(str::to_string))
            .collect()
    }

    #[tokio::test]
    async fn a_detached_exec_is_started_through_the_runtime_audited_and_its_status_is_the_guards() {
        let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
        let c = created(&fake, dir.path()).await;
        let guard = ExecGuard::launch(c, "e1", &process(), None, &NoStdio)
            .await
            .unwrap();
        assert_eq!(
            fake.calls_of("exec"),
            [format!("exec c1 {}", on_the_fake("e1"))]
        );
        fake.exit_exec("c1", &on_the_fake("e1"), ExitStatus::Exited(4));
        let (_tx, rx) = mpsc::unbounded_channel();
        assert_eq!(guard.watch(rx).await, 4);
        assert_eq!(events(dir.path()), ["exec-start", "exec-exit"]);
        let exit = audit_records(&dir.path().join("audit.jsonl"))
            .pop()
            .unwrap();
        assert_eq!(exit["exec_id"], "e1");
        assert_eq!(exit["exit_status"], 4);
    }

    #[tokio::test]
    async fn signals_sent_to_the_exec_guard_go_to_the_execs_process_in_the_sandbox() {
        let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
        let c = created(&fake, dir.path()).await;
        let guard = ExecGuard::launch(c, "e1", &process(), None, &NoStdio)
            .await
            .unwrap();
        let guest = guard.started.guest_pid;
        let (tx, rx) = mpsc::unbounded_channel();
        tx.send(libc::SIGTERM).unwrap();
        assert_eq!(guard.watch(rx).await, 128 + 15);
        assert_eq!(fake.calls_of("kill"), [format!("kill c1 15 pid {guest}")]);
        assert_eq!(events(dir.path()), ["exec-start", "exec-exit"]);
    }

    #[tokio::test]
    async fn an_exec_runsc_refuses_is_the_error_and_has_no_start_record() {
        let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
        let c = created(&fake, dir.path()).await;
        fake.fail_next(Step::Exec);
        let Err(e) = ExecGuard::launch(c, "e1", &process(), None, &NoStdio).await else {
            panic!("the exec started");
        };
        assert!(matches!(e, OciError::Runsc(_)), "{e}");
        assert_eq!(events(dir.path()), Vec::<String>::new());
    }

    /// The engine's stdout for an exec, whose reading end the test keeps.
    struct Stdout(std::sync::Mutex<Option<File>>);

    impl Stdout {
        fn pipe() -> (Stdout, File) {
            let (engine_reads, stdout) =
                gvisor_hardened_core::output_limit::sandbox_pipe().unwrap();
            (Stdout(std::sync::Mutex::new(Some(stdout))), engine_reads)
        }
    }

    impl EngineStdio for Stdout {
        fn stdio(&self) -> Result<ProcessIo> {
            Ok(ProcessIo {
                stdout: self.0.lock().unwrap().take().map(Into::into),
                ..ProcessIo::default()
            })
        }

        fn let_go_of_stdio(&self) {}
    }

    /// Container c1 created under a policy bounding output to `max` bytes, with the budget
    /// file its guard makes.
    async fn bounded(fake: &Fake, dir: &Path, max: u64) -> Opened {
        let mut c = created(fake, dir).await;
        c.policy.output.max_bytes = Some(policy_injector::quantity::ByteSize(max));
        gvisor_hardened_core::output_limit::OutputBudget::in_file(
            &c.state.output_budget_file(),
            Some(max),
            true,
        )
        .unwrap();
        c
    }

    #[tokio::test]
    async fn execs_draw_from_the_containers_one_output_budget_and_their_exit_records_count_it() {
        let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
        let first = bounded(&fake, dir.path(), 10).await;
        let (state, record, policy) = (
            first.state.clone(),
            first.record.clone(),
            first.policy.clone(),
        );
        // Each exec is its own `runsc-hardened exec` call: its own process, its own Opened.
        let mut calls = vec![first, opened_as(&fake, state, record, policy)].into_iter();
        let mut delivered = Vec::new();
        for (exec_id, truncated) in [("e1", false), ("e2", true)] {
            let c = calls.next().unwrap();
            let (stdout, mut engine_reads) = Stdout::pipe();
            let guard = ExecGuard::launch(c, exec_id, &process(), None, &stdout)
                .await
                .unwrap();
            fake.write_stdout("c1", &on_the_fake(exec_id), b"eight b\n");
            fake.exit_exec("c1", &on_the_fake(exec_id), ExitStatus::Exited(0));
            let (_tx, rx) = mpsc::unbounded_channel();
            assert_eq!(guard.watch(rx).await, 0);
            let mut got = String::new();
            std::io::Read::read_to_string(&mut engine_reads, &mut got).unwrap();
            delivered.push(got);
            let exit = audit_records(&dir.path().join("audit.jsonl"))
                .pop()
                .unwrap();
            assert_eq!(exit["event"], "exec-exit");
            assert_eq!(exit["exec_id"], exec_id);
            assert_eq!(exit["output_truncated"], truncated, "{exit}");
        }
        // 10 bytes for both: the first exec's 8, then 2 of the second's and the marker.
        assert_eq!(delivered[0], "eight b\n");
        assert!(
            delivered[1].starts_with("ei\n[gvisor-hardened: output limit of 10 bytes"),
            "{:?}",
            delivered[1]
        );
    }

    #[tokio::test]
    async fn an_execs_terminal_under_an_output_bound_is_relayed_to_the_engines_console_socket() {
        let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
        let c = bounded(&fake, dir.path(), 10).await;
        let engine = gvisor_hardened_core::console::ConsoleSocket::new(dir.path()).unwrap();
        let engine_path = engine.path().to_path_buf();
        let received = std::thread::spawn(move || engine.receive(Duration::from_secs(10)));
        let guard = ExecGuard::launch(c, "e1", &process(), Some(&engine_path), &NoStdio)
            .await
            .unwrap();
        // The engine got a terminal, the relay's: runsc was given another socket.
        received.join().unwrap().unwrap();
        assert!(guard.streams.copies(), "the terminal's output is copied");
        fake.exit_exec("c1", &on_the_fake("e1"), ExitStatus::Exited(0));
        let (_tx, rx) = mpsc::unbounded_channel();
        assert_eq!(guard.watch(rx).await, 0);
        let exit = audit_records(&dir.path().join("audit.jsonl"))
            .pop()
            .unwrap();
        assert_eq!(exit["output_bytes"], 0, "{exit}");
    }

    #[tokio::test]
    async fn an_exec_under_a_bound_whose_budget_file_is_missing_is_refused() {
        let (fake, dir) = (Fake::default(), tempfile::tempdir().unwrap());
        let mut c = created(&fake, dir.path()).await;
        c.policy.output.max_bytes = Some(policy_injector::quantity::ByteSize(10));
        let Err(e) = ExecGuard::launch(c, "e1", &process(), None, &NoStdio).await else {
            panic!("the exec ran unbounded");
        };
        assert!(e.to_string().contains("output budget"), "{e}");
        assert_eq!(fake.calls_of("exec"), Vec::<String>::new());
    }
}
