//! The two short-lived actions containerd runs the shim binary for, besides the server:
//! `start` (launch or reuse the pod's server, print its address) and `delete` (clean up after a
//! shim that died).

pub mod delete;
pub mod start;
