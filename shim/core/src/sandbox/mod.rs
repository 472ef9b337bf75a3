//! The sandbox core: the operations a sandbox goes through that both front ends perform, each
//! defined once over the seams (`crate::runtime::SandboxRuntime` for runsc, `crate::host` for
//! the kernel) and free of containerd's types.
//!
//! - `crate::prepare`: load the policy, read and harden the spec, configure runsc, audit.
//! - [`start`]: the one start sequence (the start manifest, the workload, the front end's
//!   "it runs", the record), the front ends' part behind `StartSteps`.
//! - [`egress_start`]: a started sandbox's egress (proxy, forwarder, supervisor), fail closed.
//! - [`end`]: what a sandbox's end leaves for its exit record (output, manifest, workspace).
//! - [`ending`]: the one exit sequence every process takes, the front ends' part behind
//!   `ExitSteps`.
//! - [`launch`]: the one launch sequence after the spec is prepared (cgroups refused, egress
//!   credentials, boot, watch, idle sampling, the undo), the front ends' part behind
//!   `LaunchSteps`.
//! - [`exec_gate`]: a process added to a running sandbox, through the policy and recorded.
//! - [`exit`]: why a sandbox ended (enforcement, the cgroup's counters, or its status), and
//!   how that is said in the log.
//! - [`lifetime`]: the policy's time limits (SIGTERM to every process, the grace period,
//!   SIGKILL, the host's SIGKILL when runsc cannot deliver one).
//! - [`release`]: the one release sequence of a deleted container (runsc, what the front end
//!   holds, the cgroups, the bundle), every step run and every failure reported.
//! - [`update`]: new resources through the policy, into the cgroups, then to runsc.
//! - [`termination_message`]: why enforcement ended a Kubernetes container, in the file the
//!   kubelet reads into the pod's status.
//! - [`host_process`]: a host process the runtime recorded, signalled through a pidfd so a
//!   recycled pid is never hit.
//!
//! Callers: the containerd shim (`containerd_shim_gvisor_hardened::container`, which maps them onto the task API) and
//! runsc-hardened (`runsc_hardened`, which maps them onto runc's command line and its guard
//! processes).

pub mod egress_start;
pub mod end;
pub mod ending;
pub mod exec_gate;
pub mod exit;
pub mod launch;
pub use gvisor_hardened_proc::host_process;
pub mod lifetime;
pub mod release;
pub mod start;
pub mod termination_message;
pub mod update;
