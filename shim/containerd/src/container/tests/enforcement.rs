//! What the runtime enforces while a sandbox runs: the wall-clock limit, OOM and the process
//! ceiling, each reported once.

use super::*;
use std::time::Duration;

use gvisor_hardened_core::exit::ExitCause;

#[tokio::test(start_paused = true)]
async fn the_wall_clock_limit_sends_sigterm_then_sigkill_after_the_grace_period() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    // Time moves only as the shim's own timers ask: the exit comes at the limit plus the grace.
    bed.assert_stopped_with_sigterm_then_sigkill(
        "c1",
        Duration::from_secs(65),
        ("timeout", true, "timeout"),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_workload_that_stops_at_sigterm_gets_no_sigkill() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    bed.running("c1").await;
    assert_eq!(bed.exit_status("c1").await, 128 + libc::SIGTERM as u32);
    assert_eq!(
        bed.fake.calls_of("kill"),
        [format!("kill c1 {SIGTERM} all")]
    );
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "timeout");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test(start_paused = true)]
async fn an_exit_before_the_limit_disarms_it() {
    let bed = Bed::with_policy("[lifetime]\nmax_runtime = \"60s\"\ngrace_period = \"5s\"");
    bed.running("c1").await;
    bed.fake.exit("c1", exited(0));
    bed.exit_status("c1").await;
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert!(bed.fake.calls_of("kill").is_empty());
    assert_eq!(bed.audit_record("c1", "exit")["exit_cause"], "exited");
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_oom_is_reported_once_when_the_notification_and_the_exit_both_say_so() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.notify_oom("c1").await;
    bed.events.published("oom c1").await;
    bed.fake.set_cause("c1", ExitCause::Oom);
    bed.fake.exit("c1", ExitStatus::killed());
    assert_eq!(bed.exit_status("c1").await, 137);
    assert_eq!(bed.events.matching("oom"), ["oom c1"]);
    assert_eq!(bed.audit_events("c1"), ["create", "start", "oom", "exit"]);
    let exit = bed.audit_record("c1", "exit");
    assert_eq!(
        (exit["exit_cause"].as_str(), exit["oom"].as_bool()),
        (Some("oom"), Some(true))
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn an_oom_seen_only_at_the_exit_is_published_before_task_exit() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.set_cause("c1", ExitCause::Oom);
    bed.fake.exit("c1", ExitStatus::killed());
    bed.exit_status("c1").await;
    assert_eq!(
        bed.events.lines(),
        ["create c1", "start c1", "oom c1", "exit c1 c1 137"]
    );
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}

#[tokio::test]
async fn crossing_the_process_limit_is_reported_once_as_such() {
    let bed = Bed::new();
    bed.running("c1").await;
    bed.fake.set_cause("c1", ExitCause::ProcessLimit);
    bed.fake.exit("c1", exited(2));
    assert_eq!(bed.exit_status("c1").await, 2);
    let exits: Vec<_> = bed
        .audit("c1")
        .into_iter()
        .filter(|r| r["event"] == "exit")
        .collect();
    assert_eq!(exits.len(), 1);
    assert_eq!(exits[0]["exit_cause"], "process-limit");
    assert_eq!(exits[0]["process_limit_exceeded"], true);
    assert_eq!(exits[0]["error"], "process limit exceeded");
    assert!(bed.events.matching("oom").is_empty());
    bed.shim.delete("c1", "").await.unwrap();
    bed.assert_clean();
}
