//! gvisor-hardened node installer.
//!
//! A functional core (`config`, `plan`, `diff`, `handlers`) decides what to change in memory;
//! a thin imperative shell (`files`, `containerd`, `cri`, `kube`, `state`) carries it out, and
//! `install` / `uninstall` run the steps in a fixed, documented order with one typed error per step.

pub mod command;
pub mod config;
pub mod cri;
pub mod diff;
pub mod error;
pub mod files;
pub mod handlers;
pub mod install;
pub mod kube;
pub mod layout;
pub mod plan;
pub mod sources;
pub mod state;
pub mod uninstall;
