//! The evidence settings: what the shim records about a sandbox's writable volumes
//! (`[audit.artifacts]`) and how much output it lets through (`[output]`). Kept apart from the
//! other sections because the shim, not the spec rewriter, acts on them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::issue::{invalid, Issue};
use super::Policy;

use crate::quantity::{ByteSize, HumanDuration};

/// `[audit.artifacts]`: manifests of the writable bind mounts at start and at exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArtifactsPolicy {
    pub enabled: bool,
    /// Entries (files, directories, links, anything) a manifest names before the walk stops.
    pub max_files: u64,
    /// Bytes hashed per manifest; a regular file that would cross it is named, not hashed.
    pub max_hashed_bytes: ByteSize,
    /// Wall-clock bound of one walk: the exit event waits for the exit manifest at most this
    /// long.
    pub max_walk_time: HumanDuration,
}

impl Default for ArtifactsPolicy {
    fn default() -> Self {
        ArtifactsPolicy {
            enabled: true,
            max_files: 50_000,
            max_hashed_bytes: ByteSize(256 << 20),
            max_walk_time: HumanDuration(Duration::from_secs(5)),
        }
    }
}

/// `[output]`: a bound on what a container may write to stdout and stderr together.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutputPolicy {
    /// `None` (the key left out): output is not bounded and the shim does not interpose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<ByteSize>,
}

/// The shortest idle timeout a policy or annotation may set: the shim samples CPU use about
/// once a second, and an idle sandbox still shows short bursts (measured up to 6.4 ms in one
/// second), so a few samples are needed before "idle" means anything.
pub const MIN_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Upper bounds that keep a typo from turning a bound into no bound.
pub(crate) const MAX_ARTIFACT_FILES: u64 = 10_000_000;
pub(crate) const MAX_WALK_TIME: Duration = Duration::from_secs(600);

pub(super) fn validate(p: &Policy) -> Result<(), Issue> {
    let a = &p.audit.artifacts;
    if a.max_files == 0 {
        return Err(invalid(
            "audit.artifacts.max_files",
            "0 would record nothing (set enabled = false to turn manifests off)",
        ));
    }
    if a.max_files > MAX_ARTIFACT_FILES {
        return Err(invalid(
            "audit.artifacts.max_files",
            format!("at most {MAX_ARTIFACT_FILES}: each entry is held in the shim's memory"),
        ));
    }
    if a.max_walk_time.0.is_zero() {
        return Err(invalid(
            "audit.artifacts.max_walk_time",
            "0 would stop every walk before its first entry",
        ));
    }
    if a.max_walk_time.0 > MAX_WALK_TIME {
        return Err(invalid(
            "audit.artifacts.max_walk_time",
            format!(
                "at most {}: the exit event waits for the walk",
                HumanDuration(MAX_WALK_TIME)
            ),
        ));
    }
    if p.output.max_bytes.is_some_and(|b| b.0 == 0) {
        return Err(invalid(
            "output.max_bytes",
            "0 would discard all output (leave the key out for no bound)",
        ));
    }
    if let Some(idle) = p.lifetime.idle_timeout {
        if idle.0 < MIN_IDLE_TIMEOUT {
            return Err(invalid(
                "lifetime.idle_timeout",
                format!(
                    "below the minimum {} (leave the key out for no idle timeout)",
                    HumanDuration(MIN_IDLE_TIMEOUT)
                ),
            ));
        }
    }
    Ok(())
}
