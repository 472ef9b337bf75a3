//! The sandbox core of gvisor-hardened: everything a sandbox goes through, once, with no
//! containerd or engine types in it. Hardening the spec (`prepare`), the runsc client (`runsc`)
//! and the runtime seam over it (`runtime`: `SandboxRuntime`, made real by runsc or faked), the
//! host seam (`host`: cgroups, rootfs, pidfds), the lifecycle operations both front ends call
//! (`sandbox`: exit classification and record, the wall-clock and idle limits, update), the
//! output bound (`output_limit`), the audit trail, artifact manifests and the workspace.
//!
//! Two front ends map these onto their callers: the containerd shim
//! (`shim/containerd`, `containerd-shim-gvisor-hardened-v1`) onto the task API, and
//! `runsc-hardened` (`shim/oci`) onto runc's command line for Docker and Podman.
//! See `shim/README.md` for where things go.

pub mod artifacts;
pub use gvisor_hardened_proc::atomic_file;
pub mod audit;
pub mod bundle;
pub mod cgroup;
pub mod console;
pub mod container_id;
pub mod core_dumps;
pub use gvisor_hardened_egress as egress;
/// The egress proxy against real runsc sandboxes (the egress crate has no runsc harness).
#[cfg(all(test, feature = "host-tests"))]
mod egress_reaped_tests;
pub mod exit;
/// The fake world behind the seams, for both front ends' lifecycle tests (`test-support`).
#[cfg(any(test, feature = "test-support"))]
pub mod fake;
pub mod host;
pub mod host_tree;
pub mod idle;
pub mod log_level;
pub mod output_limit;
pub mod policy_source;
pub mod pool;
pub use gvisor_hardened_proc::proc_stat;
pub mod prepare;
pub use gvisor_hardened_proc::reaper;
pub mod rootfs;
pub mod runsc;
pub mod runtime;
pub mod sandbox;
pub mod token_volumes;
pub mod workspace;
