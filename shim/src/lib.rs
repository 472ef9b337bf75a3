//! gvisor-hardened's runtime as a library: the containerd shim (`containerd-shim-gvisor-hardened-v1`)
//! is a thin `main.rs` over it, and everything a second front end needs (the runsc command
//! builder, the audit writer, the cgroup readers, exit classification) is reachable from here.
//!
//! See `shim/README.md` for the request flow from containerd to runsc and where things go.

pub mod audit;
pub mod cgroup;
pub mod cleanup;
pub mod container;
pub mod egress;
pub mod error;
pub mod events;
pub mod flags;
pub mod logger;
pub mod options;
pub mod packed;
pub mod policy_source;
pub mod process;
pub mod reaper;
pub mod rootfs;
pub mod runsc;
pub mod server;
pub mod service;
pub mod start;
pub mod stdio;
pub mod task;
