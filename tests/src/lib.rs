//! Integration-test harness for gvisor-hardened: real containerd, real runsc, real ctr.
//!
//! A typical test:
//!
//! ```no_run
//! use gvisor_hardened_tests::*;
//!
//! // shim_binary() needs the shim built first: `cargo build -p containerd-shim-gvisor-hardened`.
//! let c = Containerd::start(ContainerdOptions::with_shim(shim_binary()?))?;
//! let image = TestImage::ensure()?;
//! c.import(&image)?;
//! let id = unique_id("caps");
//! let out = c.run_output(&Run::new(image.reference(), &id).probe(["caps"]))?;
//! let caps = ProbeLine::parse_last(&out.stdout)?;
//! assert_eq!(caps.field("CapEff"), Some("0000000000000000"));
//! assert_nothing_left(&c, &id, &Runtime::hardened());
//! assert_clean_shutdown(c);
//! # Ok::<(), HarnessError>(())
//! ```
//!
//! Every [`Containerd`] is private (own directory under the temp dir, own sockets, own unique
//! namespace), so tests run in parallel. Tests must run as root. See `tests/README.md` for the
//! API at a glance, the test image and the probe.

pub mod attacks;
pub mod audit_tools;
pub mod census;
pub mod containerd;
pub mod cri;
pub mod crictl;
pub mod critest;
pub mod ctr;
pub mod direct;
pub mod docker;
pub mod egress;
pub mod engine;
pub mod engine_limits;
pub mod error;
pub mod events;
pub mod fault;
pub mod http_get;
pub mod ids;
pub mod image;
pub mod inspect;
pub mod kube;
#[cfg(test)]
mod layout;
pub mod leaks;
pub mod nerdctl;
pub mod netns;
pub mod podman;
pub mod poll;
pub mod probe;
pub mod process;
pub mod pty;
pub mod public_targets;
pub mod run;
pub mod shim_binary;
pub mod stack;
pub mod workspace;

pub use containerd::{ConfigHook, Containerd, ContainerdOptions, ShutdownReport, Stop};
pub use ctr::CtrCommand;
pub use error::{HarnessError, Result};
pub use events::Events;
pub use ids::unique_id;
pub use image::{TestImage, GIT_IMAGE_REF, TEST_IMAGE_REF};
pub use leaks::{assert_clean_shutdown, assert_nothing_left, container_leaks, dir_leaks, Leaks};
pub use poll::poll_until;
pub use probe::{Outcome, ProbeLine, PROBE_IN_IMAGE};
pub use process::CommandOutput;
pub use run::{runsc_baseline_wrapper, Run, Runtime};
pub use shim_binary::shim_binary;
