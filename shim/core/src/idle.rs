//! Idle detection for `[lifetime] idle_timeout`: a pure state machine fed samples of the
//! sandbox's cumulative CPU time (its host cgroup: sentry, gofer and their helpers) and of the
//! bytes it has written to stdout/stderr, taken about every [`SAMPLE_INTERVAL`].
//!
//! An interval is idle when the sandbox wrote nothing and its CPU use stayed under the
//! threshold. The sandbox has been idle since the start of the first idle interval in an
//! unbroken run of them; when that run reaches the timeout, [`IdleDetector::observe`] says
//! [`Verdict::TimedOut`]. Anything the detector cannot judge (a counter that went backwards, two
//! samples at the same instant) counts as activity: a wrong "busy" only delays the stop, a wrong
//! "idle" would kill work.
//!
//! The threshold, measured on this project's machine (runsc 20221219, ptrace, `sleep` as the
//! container, cgroup `cpuacct.usage` read once a second for 60 s): an idle sandbox used 0.14 ms
//! of CPU per second (median), 0.36 ms (95th percentile), 6.4 ms in its busiest second, 0.33 ms
//! on average. A shell busy loop on the same machine, with two other sandboxes' worth of load,
//! used 335-517 ms per second. [`IDLE_CPU_NS_PER_SEC`] is 20 ms per second: three times the
//! busiest idle second, and a fifteenth of the slowest busy-loop second. A CPU quota below
//! 200m would let a busy loop stay under it, so [`IdleThreshold::for_cpu_limit`] lowers the
//! threshold to a tenth of the quota.

use std::path::Path;
use std::time::Duration;

use crate::cgroup::SandboxCgroup;

/// How often the caller should sample.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// CPU time per second of wall time under which an interval counts as idle (see the module
/// comment for the measurement).
pub const IDLE_CPU_NS_PER_SEC: u64 = 20_000_000;

/// CPU nanoseconds per wall-clock second under which an interval is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdleThreshold {
    pub cpu_ns_per_sec: u64,
}

impl Default for IdleThreshold {
    fn default() -> Self {
        IdleThreshold {
            cpu_ns_per_sec: IDLE_CPU_NS_PER_SEC,
        }
    }
}

impl IdleThreshold {
    /// The threshold for a sandbox whose CPU quota is `millicpu` (None: no quota): never more
    /// than a tenth of what the quota lets a busy loop use.
    pub fn for_cpu_limit(millicpu: Option<u64>) -> IdleThreshold {
        // 1000m = 1e9 ns per second; a tenth of it per millicore is 100_000 ns.
        let cap = millicpu.map_or(u64::MAX, |m| m.saturating_mul(100_000));
        IdleThreshold {
            cpu_ns_per_sec: IDLE_CPU_NS_PER_SEC.min(cap),
        }
    }

    /// The threshold for a sandbox run from the hardened `spec`: by its CPU quota.
    pub fn of_spec(spec: &serde_json::Value) -> IdleThreshold {
        Self::for_cpu_limit(cpu_millis(spec))
    }
}

/// The CPU quota of a spec in millicores (`linux.resources.cpu` quota over period).
fn cpu_millis(spec: &serde_json::Value) -> Option<u64> {
    let cpu = spec.pointer("/linux/resources/cpu")?;
    let quota = cpu.get("quota")?.as_i64().filter(|q| *q > 0)? as u64;
    let period = cpu
        .get("period")
        .and_then(serde_json::Value::as_u64)
        .filter(|p| *p > 0)
        .unwrap_or(100_000);
    Some(quota.saturating_mul(1000) / period)
}

/// One observation. `at` is monotonic time since any fixed origin (the caller's start);
/// `cpu_ns` and `output_bytes` are cumulative.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: Duration,
    pub cpu_ns: u64,
    pub output_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The last interval showed activity (or there is no interval yet).
    Active,
    /// Idle since `since`, not yet for the timeout.
    Idle { since: Duration },
    /// Idle since `since`, for at least the timeout: stop the sandbox.
    TimedOut { since: Duration },
}

#[derive(Debug, Clone)]
pub struct IdleDetector {
    timeout: Duration,
    threshold: IdleThreshold,
    last: Option<Sample>,
    idle_since: Option<Duration>,
}

impl IdleDetector {
    pub fn new(timeout: Duration, threshold: IdleThreshold) -> IdleDetector {
        IdleDetector {
            timeout,
            threshold,
            last: None,
            idle_since: None,
        }
    }

    pub fn observe(&mut self, s: Sample) -> Verdict {
        let Some(last) = self.last else {
            self.last = Some(s);
            return Verdict::Active;
        };
        if s.at <= last.at {
            // No interval to judge; keep the state, drop the sample.
            return self.verdict(last.at);
        }
        let idle = match (
            s.cpu_ns.checked_sub(last.cpu_ns),
            s.output_bytes.checked_sub(last.output_bytes),
        ) {
            (Some(cpu), Some(0)) => {
                let dt = (s.at - last.at).as_nanos();
                (cpu as u128) * 1_000_000_000 < (self.threshold.cpu_ns_per_sec as u128) * dt
            }
            _ => false,
        };
        if idle {
            self.idle_since.get_or_insert(last.at);
        } else {
            self.idle_since = None;
        }
        self.last = Some(s);
        self.verdict(s.at)
    }

    fn verdict(&self, now: Duration) -> Verdict {
        match self.idle_since {
            None => Verdict::Active,
            Some(since) if now - since >= self.timeout => Verdict::TimedOut { since },
            Some(since) => Verdict::Idle { since },
        }
    }
}

/// Cumulative CPU time of the sandbox's cgroup, in nanoseconds: `cpuacct.usage` (v1) or
/// `usage_usec` of `cpu.stat` (v2).
pub fn cpu_usage_ns(cgroup: &SandboxCgroup) -> std::io::Result<u64> {
    let bad = |path: &Path, text: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{}: unexpected content {text:?}", path.display()),
        )
    };
    let dir = cgroup
        .dir("cpuacct")
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::NotFound, e.to_string()))?;
    if cgroup.is_v2() {
        let path = dir.join("cpu.stat");
        let text = std::fs::read_to_string(&path)?;
        parse_v2_usage_ns(&text).ok_or_else(|| bad(&path, &text))
    } else {
        let path = dir.join("cpuacct.usage");
        let text = std::fs::read_to_string(&path)?;
        text.trim().parse().map_err(|_| bad(&path, &text))
    }
}

fn parse_v2_usage_ns(cpu_stat: &str) -> Option<u64> {
    cpu_stat.lines().find_map(|l| {
        let usec = l.strip_prefix("usage_usec ")?.trim().parse::<u64>().ok()?;
        usec.checked_mul(1000)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Feeds one sample a second; `cpu_ms[i]` and `out[i]` are what happened in second i.
    fn run(timeout_s: u64, seconds: &[(u64, u64)]) -> Vec<Verdict> {
        let mut d = IdleDetector::new(Duration::from_secs(timeout_s), IdleThreshold::default());
        let (mut cpu, mut out) = (0, 0);
        let mut v = vec![d.observe(Sample {
            at: Duration::ZERO,
            cpu_ns: 0,
            output_bytes: 0,
        })];
        for (i, (cpu_ms, bytes)) in seconds.iter().enumerate() {
            cpu += cpu_ms * MS;
            out += bytes;
            v.push(d.observe(Sample {
                at: Duration::from_secs(i as u64 + 1),
                cpu_ns: cpu,
                output_bytes: out,
            }));
        }
        v
    }

    fn timed_out(v: &[Verdict]) -> Option<usize> {
        v.iter().position(|x| matches!(x, Verdict::TimedOut { .. }))
    }

    #[test]
    fn an_idle_sandbox_times_out_after_the_timeout() {
        // What the measured idle sandbox does: well under a millisecond, one 6.4 ms second.
        let seconds = [(0, 0), (1, 0), (0, 0), (6, 0), (0, 0), (0, 0), (0, 0)];
        let v = run(5, &seconds);
        assert_eq!(timed_out(&v), Some(5));
        assert_eq!(
            v[5],
            Verdict::TimedOut {
                since: Duration::ZERO
            }
        );
        assert_eq!(
            v[3],
            Verdict::Idle {
                since: Duration::ZERO
            }
        );
    }

    #[test]
    fn a_busy_loop_is_never_idle() {
        let v = run(3, &[(340, 0); 30]);
        assert!(v.iter().all(|x| *x == Verdict::Active), "{v:?}");
    }

    #[test]
    fn output_is_never_idle() {
        // No CPU to speak of, but a byte every second.
        let v = run(3, &[(0, 1); 30]);
        assert!(v.iter().all(|x| *x == Verdict::Active), "{v:?}");
    }

    #[test]
    fn idle_then_busy_then_idle_starts_the_count_again() {
        let mut seconds = vec![(0, 0); 4];
        seconds.push((500, 0));
        seconds.extend([(0, 0); 6]);
        let v = run(5, &seconds);
        // Four idle seconds are not five; the busy second resets the count; five idle seconds
        // after it time out.
        assert!(
            v[..=5]
                .iter()
                .all(|x| !matches!(x, Verdict::TimedOut { .. })),
            "{v:?}"
        );
        assert_eq!(v[5], Verdict::Active);
        assert_eq!(timed_out(&v), Some(10));
        assert_eq!(
            v[10],
            Verdict::TimedOut {
                since: Duration::from_secs(5)
            }
        );
    }

    #[test]
    fn the_threshold_is_a_rate_not_an_amount() {
        // 30 ms over 2 s is 15 ms/s: idle. 30 ms over 1 s: busy.
        let mut d = IdleDetector::new(Duration::from_secs(1), IdleThreshold::default());
        let s = |at, cpu| Sample {
            at: Duration::from_secs(at),
            cpu_ns: cpu * MS,
            output_bytes: 0,
        };
        d.observe(s(0, 0));
        assert_eq!(
            d.observe(s(2, 30)),
            Verdict::TimedOut {
                since: Duration::ZERO
            }
        );
        assert_eq!(d.observe(s(3, 60)), Verdict::Active);
    }

    #[test]
    fn counters_going_backwards_or_a_repeated_instant_count_as_activity() {
        let mut d = IdleDetector::new(Duration::from_secs(2), IdleThreshold::default());
        let s = |at, cpu, out| Sample {
            at: Duration::from_secs(at),
            cpu_ns: cpu,
            output_bytes: out,
        };
        d.observe(s(0, 1000, 10));
        assert_eq!(
            d.observe(s(1, 1000, 10)),
            Verdict::Idle {
                since: Duration::ZERO
            }
        );
        assert_eq!(
            d.observe(s(1, 1000, 10)),
            Verdict::Idle {
                since: Duration::ZERO
            }
        );
        assert_eq!(d.observe(s(2, 5, 10)), Verdict::Active);
        d.observe(s(3, 5, 10));
        assert_eq!(d.observe(s(4, 5, 3)), Verdict::Active);
    }

    #[test]
    fn a_small_cpu_quota_lowers_the_threshold() {
        assert_eq!(IdleThreshold::for_cpu_limit(None).cpu_ns_per_sec, 20 * MS);
        assert_eq!(
            IdleThreshold::for_cpu_limit(Some(2000)).cpu_ns_per_sec,
            20 * MS
        );
        // 100m: a busy loop gets 100 ms/s at most; a tenth of that.
        assert_eq!(
            IdleThreshold::for_cpu_limit(Some(100)).cpu_ns_per_sec,
            10 * MS
        );
    }

    #[test]
    fn the_cpu_quota_is_read_in_millicores() {
        use serde_json::{json, Value};
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

    #[test]
    fn cgroup_v2_cpu_stat_is_read_in_nanoseconds() {
        let text = "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n";
        assert_eq!(parse_v2_usage_ns(text), Some(1_234_000));
        assert_eq!(parse_v2_usage_ns("user_usec 5\n"), None);
    }
}
