//! Test support for the installer: a private containerd 1.6 with CRI, and a fake Kubernetes API.
//! Self-contained on purpose (the shared harness lives elsewhere).

#![allow(dead_code)]

pub mod containerd;
pub mod fake_api;
