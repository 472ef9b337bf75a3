//! The guard's lifecycle on the fake world (`gvisor_hardened_core::fake` as runsc and as the
//! host's cgroups, a recorder as its hands): create and its failures, the wall-clock limit
//! from `start`, signals passed on, egress from start to the exit, and the exit's
//! classification, record and audit, with paused time, as any user, without runsc.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::hands::Hands;
use super::stdio::EngineStdio;
use super::{Guard, World};
use crate::error::OciError;
use crate::state::{ExitRecord, Record, StateDir};
use crate::tests::{audit_records, opened_as, record};
use gvisor_hardened_core::exit::ExitCause;
use gvisor_hardened_core::fake::{Fake, Step};
use gvisor_hardened_core::host::SandboxCgroups;
use gvisor_hardened_core::reaper::ExitStatus;
use gvisor_hardened_core::runsc::client::ProcessIo;

/// What the guard asked of its own process and the host; the engine's stdout it hands over,
/// when a test reads it.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<String>>>, Arc<Mutex<Option<std::fs::File>>>);

impl Recorder {
    /// A recorder whose stdio has a stdout: the end the engine would read is returned.
    fn with_stdout() -> (Recorder, std::fs::File) {
        let (engine_reads, stdout) = gvisor_hardened_core::output_limit::sandbox_pipe().unwrap();
        let hands = Recorder::default();
        *hands.1.lock().unwrap() = Some(stdout);
        (hands, engine_reads)
    }

    fn did(&self, what: String) {
        self.0.lock().unwrap().push(what);
    }

    fn done(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Until the guard, which runs beside the caller on this task, has done `what`.
    async fn wait_for(&self, what: &str) {
        while !self.done().iter().any(|d| d.starts_with(what)) {
            tokio::task::yield_now().await;
        }
    }
}

impl EngineStdio for Recorder {
    fn stdio(&self) -> crate::error::Result<ProcessIo> {
        self.did("stdio".into());
        Ok(ProcessIo {
            stdout: self.1.lock().unwrap().take().map(Into::into),
            ..ProcessIo::default()
        })
    }

    fn let_go_of_stdio(&self) {
        self.did("let go of stdio".into());
    }
}

impl Hands for Recorder {
    fn join(&self, _cgroups: &dyn SandboxCgroups) -> Vec<std::path::PathBuf> {
        self.did("join".into());
        vec!["/home-cgroup".into()]
    }

    fn leave(&self, home: &[std::path::PathBuf]) {
        self.did(format!("leave {home:?}"));
    }

    fn start_runsc_delete(&self, id: &str, _state: &StateDir, home: &[std::path::PathBuf]) {
        self.did(format!("runsc delete {id} from {home:?}"));
    }
}

/// Container `c1` as `create` left it (state directory, record, notify fifo), limited to
/// `max_runtime` with a 10 s grace period.
struct Container {
    dir: tempfile::TempDir,
    state: StateDir,
    record: Record,
    policy: policy_injector::Policy,
}

fn container(max_runtime: Duration) -> Container {
    container_where(max_runtime, |_, _| {})
}

/// [`container`], with `edit` applied to what `create` would have kept before it is written.
fn container_where(
    max_runtime: Duration,
    edit: impl FnOnce(&mut Record, &mut policy_injector::Policy),
) -> Container {
    let dir = tempfile::tempdir().unwrap();
    let (mut record, mut policy) = record(dir.path());
    edit(&mut record, &mut policy);
    record.lifetime.max_runtime = max_runtime;
    record.lifetime.grace_period = Duration::from_secs(10);
    let state = StateDir::new(Some(&dir.path().join("state")), "c1").unwrap();
    state.create(&record).unwrap();
    Container {
        dir,
        state,
        record,
        policy,
    }
}

impl Container {
    fn world(&self, fake: &Fake, hands: &Recorder) -> World {
        World {
            c: opened_as(
                fake,
                self.state.clone(),
                self.record.clone(),
                self.policy.clone(),
            ),
            hands: Box::new(hands.clone()),
        }
    }

    /// `runsc-hardened start c1`, as the engine calls it.
    async fn start(&self, fake: &Fake) {
        let opened = opened_as(
            fake,
            self.state.clone(),
            self.record.clone(),
            self.policy.clone(),
        );
        crate::start::run(&opened).await.unwrap();
    }

    /// The `event` of every container record in the audit log, in order.
    fn audited(&self) -> Vec<String> {
        audit_records(&self.dir.path().join("audit.jsonl"))
            .iter()
            .filter_map(|v| v["event"].as_str().map(str::to_string))
            .collect()
    }
}

/// Launches the guard of `c` and watches it while `meanwhile` runs beside it on this task:
/// the guard's exit code and what `meanwhile` gave.
async fn guarded<T>(
    c: &Container,
    fake: &Fake,
    hands: &Recorder,
    signals: mpsc::UnboundedReceiver<i32>,
    meanwhile: impl std::future::Future<Output = T>,
) -> (u8, T) {
    let guard = Guard::launch(c.world(fake, hands)).await.unwrap();
    tokio::join!(guard.watch(signals), meanwhile)
}

/// No signal ever comes.
fn no_signals() -> mpsc::UnboundedReceiver<i32> {
    mpsc::unbounded_channel().1
}

fn signaled(signal: i32) -> ExitStatus {
    ExitStatus::Signaled {
        signal,
        core_dumped: false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_workloads_own_exit_is_classified_recorded_and_audited_and_runsc_delete_started() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = container(Duration::from_secs(60));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        // Once the guard took the start (it leaves the sandbox's cgroups then): an exit that
        // is there first wins, and the start is never acted on.
        hands.wait_for("leave").await;
        fake.exit("c1", ExitStatus::Exited(3));
    })
    .await;
    assert_eq!(code, 3);
    assert_eq!(
        c.state.exit(),
        Some(ExitRecord {
            status: 3,
            cause: ExitCause::Exited
        })
    );
    assert_eq!(c.audited(), ["start", "exit"]);
    // The engine's `delete` finds runsc's part started, from where the guard came from.
    assert_eq!(
        hands.done(),
        [
            "stdio",
            "let go of stdio",
            "join",
            "leave [\"/home-cgroup\"]",
            "runsc delete c1 from []",
        ]
    );
    assert_eq!(fake.calls_of("kill"), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn the_wall_clock_limit_counts_from_start_and_its_exit_is_a_timeout() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = container(Duration::from_secs(60));
    let (code, started_at) = guarded(&c, &fake, &hands, no_signals(), async {
        // Created long before it is started: the limit must not count this.
        tokio::time::sleep(Duration::from_secs(300)).await;
        c.start(&fake).await;
        Instant::now()
    })
    .await;
    // The fake workload ends at the SIGTERM, at once.
    assert_eq!(Instant::now() - started_at, Duration::from_secs(60));
    assert_eq!(code, 128 + 15);
    assert_eq!(c.state.exit().unwrap().cause, ExitCause::Timeout);
    assert_eq!(c.audited(), ["start", "timeout", "exit"]);
    // SIGTERM to every process; no SIGKILL, as nothing was left at the end of the grace.
    assert_eq!(fake.calls_of("kill"), ["kill c1 15 all"]);
}

#[tokio::test(start_paused = true)]
async fn a_workload_ignoring_sigterm_is_killed_at_the_end_of_the_grace_period() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    fake.ignore_sigterm();
    let c = container(Duration::from_secs(60));
    let (code, started_at) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        Instant::now()
    })
    .await;
    assert_eq!(Instant::now() - started_at, Duration::from_secs(70));
    assert_eq!(code, 128 + 9);
    assert_eq!(
        c.state.exit(),
        Some(ExitRecord {
            status: 137,
            cause: ExitCause::Timeout
        })
    );
    assert_eq!(c.audited(), ["start", "timeout", "exit"]);
    assert_eq!(fake.calls_of("kill"), ["kill c1 15 all", "kill c1 9 all"]);
}

#[tokio::test(start_paused = true)]
async fn no_time_limit_runs_before_start() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = container(Duration::from_secs(60));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(fake.calls_of("kill"), Vec::<String>::new());
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    assert_eq!(c.audited(), ["exit"]);
    // Never started, so it never left the sandbox's cgroups.
    assert!(!hands.done().iter().any(|d| d.starts_with("leave")));
}

#[tokio::test(start_paused = true)]
async fn an_oom_kill_is_told_apart_and_its_cgroups_are_left_for_the_engine_to_see() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = container(Duration::from_secs(60));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        fake.set_cause("c1", ExitCause::Oom);
        fake.exit("c1", signaled(libc::SIGKILL));
    })
    .await;
    assert_eq!(code, 137);
    assert_eq!(c.state.exit().unwrap().cause, ExitCause::Oom);
    assert_eq!(c.audited(), ["start", "exit"]);
    // runsc's delete would remove the cgroup whose OOM event the engine has yet to read.
    assert!(!hands.done().iter().any(|d| d.starts_with("runsc delete")));
}

#[tokio::test(start_paused = true)]
async fn signals_sent_to_the_guard_go_to_the_containers_init() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = container(Duration::from_secs(60));
    let (tx, signals) = mpsc::unbounded_channel();
    let (code, ()) = guarded(&c, &fake, &hands, signals, async {
        c.start(&fake).await;
        tx.send(libc::SIGTERM).unwrap();
    })
    .await;
    assert_eq!(fake.calls_of("kill"), ["kill c1 15 init"]);
    assert_eq!(code, 143);
    assert_eq!(
        c.state.exit().unwrap().cause,
        ExitCause::Signaled,
        "the engine's stop is no time limit"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_runsc_create_is_the_error_and_leaves_no_sandbox_or_cgroup() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    fake.fail_next(Step::Create);
    let c = container(Duration::from_secs(60));
    let Err(e) = Guard::launch(c.world(&fake, &hands)).await else {
        panic!("the create succeeded");
    };
    assert!(matches!(e, OciError::Runsc(_)), "{e}");
    assert!(e.to_string().contains("create"), "{e}");
    assert_eq!(fake.leftovers(), Vec::<String>::new());
    assert!(fake.calls().contains(&"remove-cgroups c1".to_string()));
    // runsc had the streams; the guard let go of them, as on success.
    assert_eq!(hands.done(), ["stdio", "let go of stdio"]);
}

#[tokio::test(start_paused = true)]
async fn a_sandbox_that_cannot_be_watched_is_deleted_again() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    fake.fail_next(Step::Watch);
    let c = container(Duration::from_secs(60));
    let Err(e) = Guard::launch(c.world(&fake, &hands)).await else {
        panic!("the create succeeded");
    };
    assert!(matches!(e, OciError::Reaper(_)), "{e}");
    assert_eq!(fake.calls_of("delete"), ["delete c1"]);
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_cgroup_already_there_refuses_the_create_before_runsc_runs() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    fake.add_foreign_cgroup("c1");
    let c = container(Duration::from_secs(60));
    let Err(e) = Guard::launch(c.world(&fake, &hands)).await else {
        panic!("the create succeeded");
    };
    assert!(matches!(e, OciError::Cgroup(_)), "{e}");
    assert_eq!(fake.calls_of("create"), Vec::<String>::new());
    assert_eq!(hands.done(), Vec::<String>::new());
}

/// The exit record of the audit log under `c`.
fn exit_record(c: &Container) -> serde_json::Value {
    audit_records(&c.dir.path().join("audit.jsonl"))
        .into_iter()
        .rfind(|r| r["event"] == "exit")
        .expect("an exit record")
}

#[tokio::test(start_paused = true)]
async fn a_bounded_output_reaches_the_engine_up_to_the_bound_and_the_exit_record_counts_it() {
    let fake = Fake::default();
    let (hands, mut engine_reads) = Recorder::with_stdout();
    let mut c = container(Duration::from_secs(60));
    c.policy.output.max_bytes = Some(policy_injector::quantity::ByteSize(10));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        fake.write_stdout("c1", "", b"0123456789abcdef\n");
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    let mut got = String::new();
    std::io::Read::read_to_string(&mut engine_reads, &mut got).unwrap();
    assert!(
        got.starts_with("0123456789\n[gvisor-hardened: output limit of 10 bytes"),
        "{got:?}"
    );
    assert!(!got.contains("abcdef"), "{got:?}");
    let exit = exit_record(&c);
    assert_eq!(exit["output_bytes"], 10);
    assert_eq!(exit["output_truncated"], true);
    assert_eq!(exit["output"]["stdout"]["discarded_bytes"], 7);
}

/// What the engine reads from the container's stdout after a process limit kill, with or
/// without an output bound (a copy, or the streams handed to runsc as they are).
async fn engine_log_after_a_process_limit_kill(bound: Option<u64>) -> String {
    let fake = Fake::default();
    let (hands, mut engine_reads) = Recorder::with_stdout();
    let mut c = container(Duration::from_secs(60));
    c.policy.output.max_bytes = bound.map(policy_injector::quantity::ByteSize);
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        fake.write_stdout("c1", "", b"forking\n");
        fake.set_cause("c1", ExitCause::ProcessLimit);
        fake.exit("c1", ExitStatus::Exited(2));
    })
    .await;
    assert_eq!(code, 2);
    assert_eq!(exit_record(&c)["exit_cause"], "process-limit");
    let mut got = String::new();
    std::io::Read::read_to_string(&mut engine_reads, &mut got).unwrap();
    got
}

const PROCESS_LIMIT_NOTE: &str =
    "gvisor-hardened: stopped at the sandbox's process limit (pids ceiling reached)";

#[tokio::test(start_paused = true)]
async fn a_process_limit_kill_says_why_in_the_engines_log_after_the_last_line() {
    // `docker logs` and `podman logs` are where their users look; the audit says it too.
    let got = engine_log_after_a_process_limit_kill(Some(1 << 20)).await;
    assert_eq!(got, format!("forking\n{PROCESS_LIMIT_NOTE}\n"));
}

#[tokio::test(start_paused = true)]
async fn without_an_output_copy_the_guard_still_says_why_after_the_last_line() {
    // The guard never saw the last byte: the note starts a line of its own.
    let got = engine_log_after_a_process_limit_kill(None).await;
    assert_eq!(got, format!("forking\n\n{PROCESS_LIMIT_NOTE}\n"));
}

#[tokio::test(start_paused = true)]
async fn without_a_bound_or_idle_timeout_the_engines_streams_go_to_runsc_as_they_are() {
    let fake = Fake::default();
    let (hands, mut engine_reads) = Recorder::with_stdout();
    let c = container(Duration::from_secs(60));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        fake.write_stdout("c1", "", b"all of it\n");
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    let mut got = String::new();
    std::io::Read::read_to_string(&mut engine_reads, &mut got).unwrap();
    assert_eq!(got, "all of it\n");
    assert!(exit_record(&c).get("output_bytes").is_none());
    assert!(!c.state.output_budget_file().exists());
}

#[tokio::test(start_paused = true)]
async fn an_idle_container_is_stopped_at_its_idle_timeout_and_its_exit_is_an_idle_timeout() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let mut c = container(Duration::from_secs(3600));
    c.record.lifetime.idle_timeout = Some(Duration::from_secs(30));
    let (code, started_at) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        Instant::now()
    })
    .await;
    // No CPU and no output from start on: SIGTERM once 30 s of samples were idle.
    let stopped_after = Instant::now() - started_at;
    assert!(
        stopped_after >= Duration::from_secs(30) && stopped_after <= Duration::from_secs(32),
        "{stopped_after:?}"
    );
    assert_eq!(code, 128 + 15);
    assert_eq!(c.state.exit().unwrap().cause, ExitCause::IdleTimeout);
    assert_eq!(c.audited(), ["start", "idle-timeout", "exit"]);
    assert_eq!(fake.calls_of("kill"), ["kill c1 15 all"]);
}

#[tokio::test(start_paused = true)]
async fn output_keeps_a_container_with_an_idle_timeout_running() {
    let fake = Fake::default();
    let (hands, _engine_reads) = Recorder::with_stdout();
    let mut c = container(Duration::from_secs(3600));
    c.record.lifetime.idle_timeout = Some(Duration::from_secs(30));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        // The budget the guard made, mapped here as an exec's guard would map it.
        let budget = gvisor_hardened_core::output_limit::OutputBudget::in_file(
            &c.state.output_budget_file(),
            None,
            false,
        )
        .unwrap();
        // A line every 10 s for two minutes: four times the timeout, never idle for it.
        for n in 1..=12u64 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            fake.write_stdout("c1", "", b"still working\n");
            // The copy is a thread of its own: paused time must not run on before it counted.
            while budget.bytes_seen() < 14 * n {
                tokio::task::yield_now().await;
            }
        }
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    assert_eq!(fake.calls_of("kill"), Vec::<String>::new());
    assert_eq!(c.audited(), ["start", "exit"]);
}

#[tokio::test(start_paused = true)]
async fn an_idle_timeout_whose_cpu_time_cannot_be_read_refuses_the_sandbox_and_leaves_nothing() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    fake.fail_always(Step::ReadCpu);
    let mut c = container(Duration::from_secs(60));
    c.record.lifetime.idle_timeout = Some(Duration::from_secs(30));
    let Err(e) = Guard::launch(c.world(&fake, &hands)).await else {
        panic!("the sandbox was left running");
    };
    assert!(
        e.to_string().contains("cannot read the sandbox's CPU time"),
        "{e}"
    );
    assert_eq!(fake.leftovers(), Vec::<String>::new());
}

#[tokio::test]
async fn a_terminal_under_an_output_bound_is_relayed_and_runsc_gets_the_relays_socket() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let mut c = container(Duration::from_secs(60));
    c.policy.output.max_bytes = Some(policy_injector::quantity::ByteSize(10));
    let engine = gvisor_hardened_core::console::ConsoleSocket::new(c.dir.path()).unwrap();
    let engine_path = engine.path().to_path_buf();
    c.record.console_socket = Some(engine_path.clone());
    let received = std::thread::spawn(move || engine.receive(Duration::from_secs(10)));
    let guard = Guard::launch(c.world(&fake, &hands)).await.unwrap();
    received.join().unwrap().expect("the engine got a terminal");
    assert!(guard.streams.copies(), "the terminal's output is copied");
    fake.exit("c1", ExitStatus::Exited(0));
    assert_eq!(guard.watch(no_signals()).await, 0);
    assert_eq!(exit_record(&c)["output_bytes"], 0);
}

/// Container `c1` under a policy whose egress allowlist is on: the record carries the plan the
/// hardening made, as `create` keeps it. Any executable stands in for the forwarder binary
/// (the fake runtime runs none).
fn egress_container() -> Container {
    container_where(Duration::from_secs(60), |record, policy| {
        *policy = policy_injector::Policy::from_toml_str(
            "[network.egress]\nallow = [\"api.example.test\"]\nforwarder = \"/bin/sh\"\n",
        )
        .unwrap();
        let spec = serde_json::json!({"ociVersion": "1.0.2",
            "process": {"args": ["true"], "cwd": "/"}, "root": {"path": "rootfs"},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"},
                                     {"type": "mount"}, {"type": "uts"}]}});
        let hardened = policy_injector::harden(&spec, policy, &Default::default()).unwrap();
        assert!(
            hardened.egress.is_some(),
            "the policy's allowlist makes a plan"
        );
        record.egress = hardened.egress;
    })
}

// Not paused: the proxy and the forwarder's supervisor do real socket I/O and name lookups.
#[tokio::test]
async fn egress_runs_its_forwarder_from_start_and_stops_it_before_the_exit_record() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = egress_container();
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        // The forwarder is up once the supervisor audited its HELLO.
        while !c.audited().iter().any(|e| e == "egress-forwarder-ready") {
            tokio::task::yield_now().await;
        }
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    // One forwarder, started through the runtime in the container's sandbox.
    assert_eq!(fake.calls_of("forwarder"), ["forwarder c1 127.0.0.1:3128"]);
    // Stopped with the sandbox, and its records come before the exit's in the one log.
    assert!(
        !fake.leftovers().iter().any(|l| l.contains("forwarder")),
        "{:?}",
        fake.leftovers()
    );
    let events = c.audited();
    let ready = events.iter().position(|e| e == "egress-forwarder-ready");
    let exit = events.iter().position(|e| e == "exit");
    assert!(
        ready.is_some() && exit.is_some() && ready < exit,
        "{events:?}"
    );
    assert_eq!(
        events.first().map(String::as_str),
        Some("start"),
        "{events:?}"
    );
}

#[tokio::test]
async fn egress_that_cannot_be_confined_stays_closed_and_the_log_says_why_before_the_exit() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    fake.fail_next(Step::Confine);
    let c = egress_container();
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        while !c.audited().iter().any(|e| e == "egress-forwarder-died") {
            tokio::task::yield_now().await;
        }
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    // No proxy outside its confinement: no forwarder, nothing listens inside.
    assert!(fake.calls_of("forwarder").is_empty());
    let events = c.audited();
    let died = events.iter().position(|e| e == "egress-forwarder-died");
    let exit = events.iter().position(|e| e == "exit");
    assert!(died.is_some() && died < exit, "{events:?}");
}

#[tokio::test(start_paused = true)]
async fn without_an_allowlist_the_guard_starts_no_forwarder() {
    let (fake, hands) = (Fake::default(), Recorder::default());
    let c = container(Duration::from_secs(60));
    let (code, ()) = guarded(&c, &fake, &hands, no_signals(), async {
        c.start(&fake).await;
        hands.wait_for("leave").await;
        fake.exit("c1", ExitStatus::Exited(0));
    })
    .await;
    assert_eq!(code, 0);
    assert!(fake.calls_of("forwarder").is_empty());
    assert_eq!(c.audited(), ["start", "exit"]);
}
