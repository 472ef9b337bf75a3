//! The short-lived actions containerd runs the shim binary for, besides the server: `start`
//! (launch or reuse the pod's server, print its address), `delete` (clean up after a shim that
//! died) and, in containerd 2.x, `-info` (what this runtime is and supports).

pub mod delete;
pub mod info;
pub mod start;
