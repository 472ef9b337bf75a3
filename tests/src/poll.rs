//! Waiting for a condition with a deadline: the only way the harness waits for anything.

use std::thread;
use std::time::{Duration, Instant};

use crate::error::{HarnessError, Result};

/// How often conditions are re-checked. Short enough not to add latency to the fast paths
/// (a shim exiting a few ms after `ctr run --rm` returns), long enough not to burn the 2 cores.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Calls `check` until it returns `Some` or `timeout` passes; `what` names the condition in the
/// error.
pub fn poll_until<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Option<T>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return Ok(value);
        }
        if Instant::now() >= deadline {
            return Err(HarnessError::Deadline {
                what: what.to_string(),
                timeout,
            });
        }
        thread::sleep(POLL_INTERVAL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_until_returns_the_first_value_found() {
        let mut calls = 0;
        let v = poll_until("third call", Duration::from_secs(5), || {
            calls += 1;
            (calls == 3).then_some(calls)
        })
        .unwrap();
        assert_eq!(v, 3);
    }

    #[test]
    fn poll_until_fails_with_the_condition_name_after_the_deadline() {
        let err = poll_until::<()>("never", Duration::from_millis(30), || None).unwrap_err();
        assert!(err.to_string().contains("never"), "{err}");
    }
}
