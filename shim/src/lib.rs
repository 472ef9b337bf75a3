//! gvisor-hardened's runtime as a library: the containerd shim (`containerd-shim-gvisor-hardened-v1`)
//! is a thin `main.rs` over it, and everything a second front end needs (the runsc command
//! builder, the audit writer, the cgroup readers, exit classification) is reachable from here.
//!
//! See `shim/README.md` for the request flow from containerd to runsc and where things go.

pub mod actions;
pub mod artifacts;
pub use gvisor_hardened_proc::atomic_file;
pub mod audit;
pub mod bundle;
pub mod cgroup;
pub mod container;
pub mod container_id;
pub mod core_dumps;
pub use gvisor_hardened_egress as egress;
/// The egress proxy against real runsc sandboxes (the egress crate has no runsc harness).
#[cfg(all(test, feature = "host-tests"))]
mod egress_reaped_tests;
pub mod env;
pub mod error;
pub mod events;
pub mod exit;
#[cfg(test)]
pub mod fake;
pub mod flags;
pub use gvisor_hardened_proc::heap;
pub mod host;
pub mod host_tree;
pub mod idle;
pub mod logger;
pub mod oci;
pub mod options;
pub mod output_limit;
pub mod packed;
pub mod policy_source;
pub mod prepare;
pub mod process;
pub use gvisor_hardened_proc::reaper;
pub mod rootfs;
pub mod runsc;
pub mod runtime;
pub mod sandbox;
pub mod server;
pub mod service;
pub mod stdio;
pub mod task;
pub mod text_pages;
pub mod token_volumes;
pub mod workspace;
