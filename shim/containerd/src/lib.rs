//! The containerd front end of gvisor-hardened: `containerd-shim-gvisor-hardened-v1` is a thin
//! `main.rs` over this library. It maps the sandbox core's operations (`gvisor_hardened_core`)
//! onto containerd's shim v2 task API: the ttrpc server and task service, the container and
//! process state machines, containerd's fifos and console, events and metrics in containerd's
//! protobufs, the shim's start/delete actions and its log fifo.
//!
//! See `shim/README.md` for the request flow from containerd to runsc and where things go.

pub mod actions;
pub mod container;
pub mod env;
pub mod error;
pub mod events;
#[cfg(test)]
pub mod fake;
pub mod flags;
pub mod logger;
pub mod options;
pub mod packed;
pub mod process;
pub mod record;
pub mod server;
pub mod service;
pub mod stdio;
pub mod task;
