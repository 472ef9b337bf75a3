//! The warm pool (issue 21): sandboxes booted before a pod asks, claimed by a pod's sandbox
//! container instead of a boot. Design and measurements: `shim/README.md`, "A warm pool".
//!
//! - `spec`: pure; the template a warm sandbox boots from and the key pods share a pool by.
//! - `store`: the pool on disk; a claim is a rename, so one sandbox serves one pod.
//! - `fill`: the filler, which boots warm sandboxes within the policy's bounds; `drain`:
//!   deleting the warm sandboxes no pod will claim; `lock`: the key's fill lock they share.
//! - `claim`: the shim's side; `adopt`: runsc's record of the claimed sandbox's cgroup;
//!   `memory`: what a warm sandbox costs (PSS).

pub mod adopt;
pub mod claim;
pub mod drain;
pub mod fill;
mod lock;
pub mod memory;
pub mod spec;
pub mod store;

pub use claim::{claim, start_filler, Claimed};
pub use store::{Entry, KeyDir, PoolError, Template};

/// The shim binary's argument for its filler mode: `<shim> pool-fill <key dir>`.
pub const FILL_ARG: &str = "pool-fill";
/// The shim binary's argument that deletes every unclaimed warm sandbox under a runsc root:
/// `<shim> pool-drain <policy runsc.root>`.
pub const DRAIN_ARG: &str = "pool-drain";
