//! The short-lived actions containerd runs the shim binary for, besides the server: `start`
//! (launch or reuse the pod's server, print its address), `delete` (clean up after a shim that
//! died) and, in containerd 2.x, `-info` (what this runtime is and supports); and the warm
//! pool's `pool-fill` and `pool-drain`, which containerd never runs.

pub mod delete;
pub mod info;
pub mod pool;
pub mod start;
