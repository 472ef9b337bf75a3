//! Per-sandbox caps of the proxy: how many connections may be open at once, how many may start
//! per second, and how many bytes per second may pass (`max_rate`, both directions together).
//! A workload that floods the forwarder meets the first two: every connection past them is
//! answered with its reason and audited, and the proxy's sockets and buffers (the host's memory,
//! not the sandbox's) stay bounded by the policy. The third slows a sandbox down, never cuts it.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapRefusal {
    /// `max_connections` are open.
    Open { max: u32 },
    /// More than `max_connection_rate` started in the last second (the bucket is empty).
    Rate { per_second: u32 },
}

/// The caps of one sandbox, shared by every stream of its proxy.
pub struct ConnectionCaps {
    max_open: u32,
    open: Arc<AtomicU32>,
    per_second: u32,
    bucket: Mutex<Bucket>,
}

/// A token bucket refilled at `rate` per second, holding at most one second's worth.
struct Bucket {
    rate: f64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: f64) -> Bucket {
        Bucket {
            rate,
            tokens: rate,
            at: Instant::now(),
        }
    }

    /// Adds what accrued since the last look, up to one second's worth.
    fn refill(&mut self) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.at = now;
    }
}

/// One admitted connection; the slot is free again when this drops.
pub struct Slot {
    open: Arc<AtomicU32>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnectionCaps {
    pub fn new(max_open: u32, per_second: u32) -> ConnectionCaps {
        // Zero is refused when the policy loads; a plan built some other way still admits.
        let per_second = per_second.max(1);
        ConnectionCaps {
            max_open: max_open.max(1),
            open: Arc::new(AtomicU32::new(0)),
            per_second,
            bucket: Mutex::new(Bucket::full(f64::from(per_second))),
        }
    }

    /// Connections open now.
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Acquire)
    }

    /// Admits one connection, or says which cap it met. A refused connection takes neither a
    /// slot nor a token: refusals are answered at once and do not count against later ones.
    pub fn admit(&self) -> Result<Slot, CapRefusal> {
        let taken = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_open).then_some(n + 1)
            });
        if taken.is_err() {
            return Err(CapRefusal::Open { max: self.max_open });
        }
        let slot = Slot {
            open: self.open.clone(),
        };
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        b.refill();
        if b.tokens < 1.0 {
            // `slot` drops here: the open count goes back down.
            return Err(CapRefusal::Rate {
                per_second: self.per_second,
            });
        }
        b.tokens -= 1.0;
        Ok(slot)
    }
}

/// Bytes per second for a whole sandbox: a bucket of one second's worth that may go into debt;
/// whoever takes bytes past it waits out its share of the debt before sending them.
pub struct ByteRate {
    bucket: Mutex<Bucket>,
}

impl ByteRate {
    pub fn new(per_second: u64) -> ByteRate {
        let per_second = per_second.max(1);
        ByteRate {
            bucket: Mutex::new(Bucket::full(per_second as f64)),
        }
    }

    /// Takes `n` bytes; returns how long the caller must wait before sending them.
    pub fn take(&self, n: usize) -> std::time::Duration {
        let mut b = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
        b.refill();
        b.tokens -= n as f64;
        if b.tokens >= 0.0 {
            return std::time::Duration::ZERO;
        }
        // Whole nanoseconds, rounded up: a sender never goes early.
        std::time::Duration::from_nanos((-b.tokens * 1e9 / b.rate).ceil() as u64)
    }

    /// Takes `n` bytes and waits until they may go.
    pub async fn pace(&self, n: usize) {
        let wait = self.take(n);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn open_connections_past_the_cap_are_refused_until_one_ends() {
        let caps = ConnectionCaps::new(3, 1000);
        let held: Vec<Slot> = (0..3).map(|_| caps.admit().unwrap()).collect();
        assert_eq!(caps.admit().err(), Some(CapRefusal::Open { max: 3 }));
        assert_eq!(caps.open(), 3, "a refusal takes no slot");
        drop(held);
        assert_eq!(caps.open(), 0);
        assert!(caps.admit().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_one_seconds_worth_then_the_rate() {
        let caps = ConnectionCaps::new(1000, 10);
        for i in 0..10 {
            assert!(caps.admit().is_ok(), "burst connection {i}");
        }
        assert_eq!(
            caps.admit().err(),
            Some(CapRefusal::Rate { per_second: 10 })
        );
        assert_eq!(
            caps.open(),
            0,
            "admitted slots dropped, the refused one took none"
        );
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(caps.admit().is_ok(), "a tenth of a second refills one");
        assert!(caps.admit().is_err());
        tokio::time::advance(Duration::from_secs(60)).await;
        let n = (0..100).filter(|_| caps.admit().is_ok()).count();
        assert_eq!(n, 10, "an idle minute refills one second's worth, no more");
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_past_one_seconds_worth_wait_their_share_of_the_debt() {
        let rate = ByteRate::new(1000);
        assert_eq!(
            rate.take(1000),
            Duration::ZERO,
            "one second's worth at once"
        );
        assert_eq!(rate.take(500), Duration::from_millis(500));
        // A second sender queues behind the first: the debt adds up.
        assert_eq!(rate.take(500), Duration::from_secs(1));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(rate.take(0), Duration::ZERO, "the debt is paid");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(rate.take(1000), Duration::ZERO);
        assert_eq!(
            rate.take(1),
            Duration::from_millis(1),
            "an idle minute refills one second's worth, no more"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_refusal_gives_its_slot_back() {
        let caps = ConnectionCaps::new(2, 1);
        let _a = caps.admit().unwrap();
        assert_eq!(caps.admit().err(), Some(CapRefusal::Rate { per_second: 1 }));
        assert_eq!(caps.open(), 1);
    }
}
