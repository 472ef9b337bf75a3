//! gvisor-hardened node installer.
//!
//! A functional core (`config`, `plan`, `diff`, `handlers`) decides what to change in memory;
//! a thin imperative shell (`files`, `containerd`, `cri`, `kube`, `state`) carries it out, and
//! `install` / `uninstall` run the steps in a fixed, documented order with one typed error per step.

pub mod config;
pub mod diff;
pub mod handlers;
pub mod plan;
