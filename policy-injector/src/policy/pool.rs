//! `[pool]`: a warm pool of pre-booted runsc sandboxes for CRI pods (issue 21; the design and its
//! measurements are in shim/README.md, "A warm pool"). Kept apart from the other sections
//! because only the shim acts on it, never the spec rewriter, and because no annotation may
//! reach it: a pod cannot ask for sandboxes to be booted on its node ahead of time, only the
//! operator's policy can (the annotations rule refuses every unknown `gvisor-hardened.dev/*` key,
//! and there is deliberately no pool key).

use serde::{Deserialize, Serialize};

use super::issue::{invalid, Issue};
use super::Policy;

use crate::quantity::ByteSize;

/// `[pool]`: how many booted, idle sandboxes the shim keeps ready per pool key, and what they
/// may cost. Off (`size = 0`) by default, so each RuntimeClass's policy opts in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolPolicy {
    /// Warm sandboxes kept ready per pool key; 0 turns the pool off.
    pub size: u32,
    /// Bound on the total proportional set size (PSS) of this pool's warm sandboxes: the
    /// filler never boots one that would take the pool past it.
    pub memory_limit: ByteSize,
    /// The most sandboxes the filler boots per minute.
    pub refill_per_minute: u32,
}

impl Default for PoolPolicy {
    fn default() -> Self {
        PoolPolicy {
            size: 0,
            memory_limit: ByteSize(DEFAULT_POOL_MEMORY_LIMIT),
            refill_per_minute: DEFAULT_POOL_REFILL_PER_MINUTE,
        }
    }
}

impl PoolPolicy {
    /// True when the policy asks for warm sandboxes (`size > 0`).
    pub fn enabled(&self) -> bool {
        self.size > 0
    }

    /// `memory_limit` in bytes.
    pub fn memory_limit_bytes(&self) -> u64 {
        self.memory_limit.0
    }
}

/// Default `memory_limit`: eleven warm sandboxes even at the 43 MiB one costs alone (ten that
/// share runsc's pages were measured at about 170 MiB together).
pub const DEFAULT_POOL_MEMORY_LIMIT: u64 = 512 << 20;
/// Default `refill_per_minute`.
pub const DEFAULT_POOL_REFILL_PER_MINUTE: u32 = 30;
/// The largest `size`: a typo (640 for 64) must not boot hundreds of sandboxes on every node
/// that runs the RuntimeClass.
pub const MAX_POOL_SIZE: u32 = 64;
/// The smallest `memory_limit` of a pool that is on: one booted idle sandbox was measured at
/// about 43 MiB of PSS (sentry and gofer), so below this not even one fits with room to spare.
pub const MIN_POOL_MEMORY_LIMIT: u64 = 64 << 20;
/// The largest `refill_per_minute` (ten boots a second): one boot takes about 170 ms of runsc
/// create and start, so a typo must not turn the refill into a boot storm.
pub const MAX_POOL_REFILL_PER_MINUTE: u32 = 600;

pub(super) fn validate(p: &Policy) -> Result<(), Issue> {
    let pool = &p.pool;
    if pool.size > MAX_POOL_SIZE {
        return Err(invalid(
            "pool.size",
            format!(
                "{} is above the limit of {MAX_POOL_SIZE} warm sandboxes per pool",
                pool.size
            ),
        ));
    }
    if pool.memory_limit.0 == 0 {
        return Err(invalid(
            "pool.memory_limit",
            "0 bytes leaves room for no warm sandbox (size = 0 is how to turn the pool off)",
        ));
    }
    if !pool.enabled() {
        return Ok(());
    }
    if pool.memory_limit.0 < MIN_POOL_MEMORY_LIMIT {
        return Err(invalid(
            "pool.memory_limit",
            format!(
                "{} is below the minimum of {} while size > 0: one warm sandbox costs about 43 MiB of PSS",
                pool.memory_limit,
                ByteSize(MIN_POOL_MEMORY_LIMIT)
            ),
        ));
    }
    if pool.refill_per_minute == 0 || pool.refill_per_minute > MAX_POOL_REFILL_PER_MINUTE {
        return Err(invalid(
            "pool.refill_per_minute",
            format!(
                "{} is outside 1 to {MAX_POOL_REFILL_PER_MINUTE} while size > 0",
                pool.refill_per_minute
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::PolicyError;

    fn err(src: &str) -> PolicyError {
        Policy::from_toml_str(src).expect_err("expected a policy error")
    }

    fn invalid_key(e: &PolicyError) -> &str {
        match e {
            PolicyError::Invalid { key, .. } => key,
            other => panic!("expected an invalid value, got {other:?}"),
        }
    }

    #[test]
    fn pool_is_off_by_default() {
        for p in [
            Policy::default(),
            Policy::from_toml_str("").unwrap(),
            Policy::from_toml_str(crate::DEFAULT_POLICY_TOML).unwrap(),
        ] {
            assert!(!p.pool.enabled());
            assert_eq!(p.pool.size, 0);
            assert_eq!(p.pool.memory_limit_bytes(), 512 << 20);
            assert_eq!(p.pool.refill_per_minute, 30);
        }
    }

    #[test]
    fn every_shipped_preset_leaves_the_pool_off() {
        for (name, text) in crate::PRESETS {
            assert!(
                !Policy::from_toml_str(text).unwrap().pool.enabled(),
                "{name}"
            );
        }
    }

    #[test]
    fn a_pool_section_round_trips_through_toml() {
        let p = Policy::from_toml_str(
            "[pool]\nsize = 8\nmemory_limit = \"1Gi\"\nrefill_per_minute = 12\n",
        )
        .unwrap();
        assert_eq!(
            p.pool,
            PoolPolicy {
                size: 8,
                memory_limit: ByteSize(1 << 30),
                refill_per_minute: 12,
            }
        );
        assert!(p.pool.enabled());
        assert_eq!(p.pool.memory_limit_bytes(), 1 << 30);
        let text = p.to_toml_string();
        assert!(text.contains("[pool]"), "{text}");
        assert!(text.contains("memory_limit = \"1Gi\""), "{text}");
        assert_eq!(Policy::from_toml_str(&text).unwrap(), p);
    }

    #[test]
    fn a_pool_section_may_set_only_the_size() {
        let p = Policy::from_toml_str("[pool]\nsize = 4\n").unwrap();
        assert!(p.pool.enabled());
        assert_eq!(p.pool.memory_limit, PoolPolicy::default().memory_limit);
        assert_eq!(p.pool.refill_per_minute, DEFAULT_POOL_REFILL_PER_MINUTE);
    }

    #[test]
    fn pool_memory_limit_takes_any_quantity() {
        for (text, bytes) in [("\"768Mi\"", 768u64 << 20), ("\"1G\"", 1_000_000_000)] {
            let p = Policy::from_toml_str(&format!("[pool]\nsize = 1\nmemory_limit = {text}\n"))
                .unwrap();
            assert_eq!(p.pool.memory_limit_bytes(), bytes, "{text}");
        }
        let e = err("[pool]\nmemory_limit = \"512MB\"\n");
        assert!(
            matches!(&e, PolicyError::Parse { key: Some(k), line: Some(2), .. } if k == "pool.memory_limit"),
            "{e:?}"
        );
    }

    #[test]
    fn pool_size_of_64_is_accepted() {
        let p = Policy::from_toml_str("[pool]\nsize = 64\n").unwrap();
        assert_eq!(p.pool.size, MAX_POOL_SIZE);
    }

    #[test]
    fn pool_size_above_64_is_refused_naming_the_limit() {
        let e = err("[pool]\nsize = 65\n");
        assert_eq!(invalid_key(&e), "pool.size");
        let text = e.to_string();
        assert!(
            text.contains("pool.size") && text.contains("64") && text.contains("line 2"),
            "{text}"
        );
    }

    #[test]
    fn pool_size_above_64_is_refused_even_in_a_policy_built_in_code() {
        let mut p = Policy::default();
        p.pool.size = 1000;
        assert!(
            matches!(p.validate(), Err(PolicyError::Invalid { key, line: None, .. }) if key == "pool.size")
        );
    }

    #[test]
    fn negative_or_fractional_pool_numbers_are_refused() {
        for src in [
            "[pool]\nsize = -1\n",
            "[pool]\nsize = 1.5\n",
            "[pool]\nrefill_per_minute = -3\n",
            "[pool]\nsize = \"4\"\n",
        ] {
            assert!(matches!(err(src), PolicyError::Parse { .. }), "{src}");
        }
    }

    #[test]
    fn pool_memory_limit_below_one_sandbox_is_refused() {
        for limit in ["\"32Mi\"", "\"64M\"", "\"1\""] {
            let e = err(&format!("[pool]\nsize = 2\nmemory_limit = {limit}\n"));
            assert_eq!(invalid_key(&e), "pool.memory_limit", "{limit}");
            let text = e.to_string();
            assert!(
                text.contains("64Mi") && text.contains("43 MiB") && text.contains("line 3"),
                "{text}"
            );
        }
        let p = Policy::from_toml_str("[pool]\nsize = 1\nmemory_limit = \"64Mi\"\n").unwrap();
        assert_eq!(p.pool.memory_limit_bytes(), MIN_POOL_MEMORY_LIMIT);
    }

    #[test]
    fn pool_memory_limit_of_zero_is_refused_even_with_the_pool_off() {
        let e = err("[pool]\nmemory_limit = \"0\"\n");
        assert_eq!(invalid_key(&e), "pool.memory_limit");
        // A small but non-zero bound is harmless while nothing is booted.
        let p = Policy::from_toml_str("[pool]\nmemory_limit = \"16Mi\"\n").unwrap();
        assert!(!p.pool.enabled());
    }

    #[test]
    fn pool_refill_rate_outside_1_to_600_is_refused_while_the_pool_is_on() {
        for rate in [0, 601, 100_000] {
            let e = err(&format!("[pool]\nsize = 2\nrefill_per_minute = {rate}\n"));
            assert_eq!(invalid_key(&e), "pool.refill_per_minute", "{rate}");
            let text = e.to_string();
            assert!(text.contains("600") && text.contains("line 3"), "{text}");
        }
        for rate in [1, 600] {
            let src = format!("[pool]\nsize = 2\nrefill_per_minute = {rate}\n");
            assert_eq!(
                Policy::from_toml_str(&src).unwrap().pool.refill_per_minute,
                rate
            );
        }
        // With the pool off the rate bounds nothing.
        assert!(Policy::from_toml_str("[pool]\nrefill_per_minute = 0\n").is_ok());
    }

    #[test]
    fn unknown_pool_key_is_refused() {
        for (src, key) in [
            ("[pool]\nsize = 2\nmax_size = 4\n", "pool.max_size"),
            ("[pool]\nmemory = \"1Gi\"\n", "pool.memory"),
            (
                "[pool]\nsize = 1\n[pool.key]\nruntime_class = \"x\"\n",
                "pool.key",
            ),
        ] {
            let e = err(src);
            let PolicyError::Parse { key: got, line, .. } = &e else {
                panic!("{src}: {e:?}")
            };
            assert_eq!(got.as_deref(), Some(key), "{src}");
            assert!(line.is_some(), "{src}: {e}");
        }
    }
}
