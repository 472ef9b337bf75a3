//! The policy's time limits, enforced the same way under both front ends: when the wall-clock
//! limit (`max_runtime`) passes or the idle detector fires, the moment is recorded (the
//! caller's `fired`: the audit record, the cause the exit will carry), every process of the
//! container gets SIGTERM, then after the grace period SIGKILL. A SIGKILL runsc cannot deliver
//! (a wedged sandbox) goes to the sandbox process from the host, through its pidfd.
//!
//! The caller drops the future when the container exits first: nothing here waits for the
//! exit. Callers: the shim's `container/lifetime.rs` (armed at Start) and runsc-hardened's
//! guard (armed at `start`), each with [`idle`] as its idle detector.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use policy_injector::quantity::HumanDuration;

use super::host_process::HostProcess;
use crate::exit::ExitCause;
use crate::host::SandboxCgroups;
use crate::idle::{IdleDetector, IdleThreshold, Sample, Verdict, SAMPLE_INTERVAL};
use crate::output_limit::OutputBudget;
use crate::runtime::{KillTarget, SandboxRuntime};

/// The idle detector's verdict: idle this long, CPU under this many ms per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idle {
    pub for_: Duration,
    pub cpu_ms_per_sec: u64,
}

/// What a limit stops.
pub struct Target {
    pub runtime: Arc<dyn SandboxRuntime>,
    pub id: String,
    /// The sandbox process on the host, when this container is the sandbox's own: the last
    /// resort for SIGKILL.
    pub sandbox: Option<Arc<HostProcess>>,
}

/// Runs the limits until one fires and the container was told to stop; returns the cause.
/// The wall-clock limit counts from `armed_at` (the caller's Start), not from whenever this
/// future is first polled, which on a busy runtime can be later. `idle` resolves when the idle
/// detector fires (never without an idle timeout).
pub async fn enforce(
    target: &Target,
    armed_at: tokio::time::Instant,
    max_runtime: Duration,
    grace_period: Duration,
    idle: impl Future<Output = Idle>,
    fired: impl FnOnce(ExitCause),
) -> ExitCause {
    let id = &target.id;
    let cause = tokio::select! {
        _ = tokio::time::sleep_until(armed_at + max_runtime) => {
            log::warn!("container {id}: maximum runtime {max_runtime:?} reached, sending SIGTERM");
            ExitCause::Timeout
        }
        idle = idle => {
            log::warn!(
                "container {id}: idle (no output, CPU under {} ms/s) for {:?}, at its idle timeout; sending SIGTERM",
                idle.cpu_ms_per_sec,
                idle.for_
            );
            ExitCause::IdleTimeout
        }
    };
    fired(cause);
    signal_all(target, libc::SIGTERM).await;
    tokio::time::sleep(grace_period).await;
    log::warn!("container {id}: grace period over, sending SIGKILL");
    signal_all(target, libc::SIGKILL).await;
    cause
}

/// Resolves once the container has been idle for `timeout`: its sandbox's CPU time (read from
/// `cgroups` every [`SAMPLE_INTERVAL`]) under `threshold` and no byte through `output` (the
/// copy's activity counter; `None`: nothing is interposed, only the CPU counts). Anything that
/// cannot be read counts as activity: a wrong "busy" only delays a stop, a wrong "idle" would
/// kill work. A paused container uses no CPU and counts as idle. `who` names the container in
/// the one warning. Never resolves without an idle timeout or without the sandbox's cgroups
/// (with a timeout, the front ends refused such a sandbox: [`check_idle_sampling`]).
pub async fn idle(
    who: String,
    timeout: Option<Duration>,
    threshold: IdleThreshold,
    cgroups: Option<Arc<dyn SandboxCgroups>>,
    output: Option<OutputBudget>,
) -> Idle {
    let (Some(timeout), Some(cgroups)) = (timeout, cgroups) else {
        return std::future::pending().await;
    };
    let mut detector = IdleDetector::new(timeout, threshold);
    let origin = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warned = false;
    loop {
        tick.tick().await;
        let cpu_ns = match cgroups.cpu_usage_ns() {
            Ok(ns) => ns,
            Err(e) => {
                if !warned {
                    log::warn!(
                        "{who}: reading the sandbox's CPU time for the idle timeout: {e}; counted as activity"
                    );
                    warned = true;
                }
                detector = IdleDetector::new(timeout, threshold);
                continue;
            }
        };
        let sample = Sample {
            at: origin.elapsed(),
            cpu_ns,
            output_bytes: output.as_ref().map_or(0, |b| b.bytes_seen()),
        };
        if let Verdict::TimedOut { since } = detector.observe(sample) {
            return Idle {
                for_: sample.at - since,
                cpu_ms_per_sec: threshold.cpu_ns_per_sec / 1_000_000,
            };
        }
    }
}

/// With an idle timeout, the sandbox's CPU time must be readable before the workload runs:
/// the front end refuses the container otherwise, rather than run a sandbox its idle timeout
/// could never stop. The error says why, for the front end's own error.
pub fn check_idle_sampling(
    timeout: Option<Duration>,
    cgroups: Option<&dyn SandboxCgroups>,
) -> Result<(), String> {
    let Some(timeout) = timeout else {
        return Ok(());
    };
    let read = match cgroups {
        Some(cg) => cg.cpu_usage_ns().map(drop).map_err(|e| e.to_string()),
        None => Err("the sandbox's cgroups were not found".to_string()),
    };
    read.map_err(|why| {
        format!(
            "idle timeout {}: cannot read the sandbox's CPU time ({why}); refusing to run a sandbox its idle timeout could not stop",
            HumanDuration(timeout)
        )
    })
}

/// `signal` to every process of the container through runsc; a SIGKILL runsc could not deliver
/// goes to the sandbox from the host.
async fn signal_all(target: &Target, signal: i32) {
    let Err(e) = target
        .runtime
        .kill(&target.id, signal as u32, KillTarget::All)
        .await
    else {
        return;
    };
    if e.is_gone() {
        return;
    }
    log::warn!(
        "container {}: signal {signal} at the time limit: {e}",
        target.id
    );
    if signal == libc::SIGKILL {
        if let Some(sandbox) = &target.sandbox {
            log::warn!(
                "container {}: killing sandbox pid {} from the host",
                target.id,
                sandbox.pid()
            );
            let _ = sandbox.signal(libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::fake::{Fake, Step};

    fn target(fake: &Fake, sandbox: Option<Arc<HostProcess>>) -> Target {
        Target {
            runtime: Arc::new(fake.clone()),
            id: "c1".into(),
            sandbox,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_wall_clock_limit_records_then_sends_sigterm_then_sigkill() {
        let fake = Fake::default();
        let fired = Mutex::new(None);
        let cause = enforce(
            &target(&fake, None),
            tokio::time::Instant::now(),
            Duration::from_secs(60),
            Duration::from_secs(5),
            std::future::pending(),
            |c| *fired.lock().unwrap() = Some(c),
        )
        .await;
        assert_eq!(cause, ExitCause::Timeout);
        assert_eq!(*fired.lock().unwrap(), Some(ExitCause::Timeout));
        assert_eq!(fake.calls_of("kill"), ["kill c1 15 all", "kill c1 9 all"]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_wall_clock_limit_counts_from_when_it_was_armed_not_from_the_first_poll() {
        let fake = Fake::default();
        let target = target(&fake, None);
        let armed_at = tokio::time::Instant::now();
        let limits = enforce(
            &target,
            armed_at,
            Duration::from_secs(60),
            Duration::from_secs(5),
            std::future::pending(),
            |_| {},
        );
        // A busy runtime polls the limit's task 10 s late.
        tokio::time::advance(Duration::from_secs(10)).await;
        let sigterm_at = std::cell::Cell::new(None);
        let watch_sigterm = async {
            while fake.calls_of("kill").is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            sigterm_at.set(Some(armed_at.elapsed()));
        };
        tokio::join!(limits, watch_sigterm);
        assert_eq!(sigterm_at.get(), Some(Duration::from_secs(60)));
    }

    #[tokio::test(start_paused = true)]
    async fn the_idle_detector_stops_the_container_as_an_idle_timeout() {
        let fake = Fake::default();
        let idle = async {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Idle {
                for_: Duration::from_secs(10),
                cpu_ms_per_sec: 5,
            }
        };
        let cause = enforce(
            &target(&fake, None),
            tokio::time::Instant::now(),
            Duration::from_secs(60),
            Duration::from_secs(5),
            idle,
            |_| {},
        )
        .await;
        assert_eq!(cause, ExitCause::IdleTimeout);
    }

    #[tokio::test(start_paused = true)]
    async fn a_sigkill_runsc_cannot_deliver_goes_to_the_sandbox_from_the_host() {
        let fake = Fake::default();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let sandbox = Arc::new(HostProcess::open(child.id() as i32).unwrap());
        // Watched through a second pidfd (a reaper test in this process may reap the child).
        let watch = HostProcess::open(child.id() as i32).unwrap();
        // A wedged sandbox: runsc delivers neither SIGTERM nor SIGKILL.
        fake.fail_always(Step::Kill);
        let t = target(&fake, Some(sandbox));
        enforce(
            &t,
            tokio::time::Instant::now(),
            Duration::from_secs(1),
            Duration::from_secs(1),
            std::future::pending(),
            |_| {},
        )
        .await;
        // `sleep 30` does not end by itself within the wait: the host's SIGKILL ended it.
        assert!(watch.wait_exited(Duration::from_secs(10)));
        let _ = child.wait();
    }
}
