//! The integration tests: one test binary, each former test binary a module. They need root and
//! the real thing (containerd, runsc, Docker, Podman, a Kubernetes node), so the binary sits
//! behind gvisor-hardened-tests's `root` feature.
//!
//! Run it through `hack/integration.sh [MODULE...]` (or `run_integration_modules` in
//! `hack/lib.sh`): one process per module, because modules still rely on having the process to
//! themselves (environment read once, `OnceLock`s, a temp dir, port or bridge per process, the
//! host snapshot `attacks` and `nerdctl` take at the start, the node of `kube_node` and
//! `kube_agents`). A plain `cargo test --test integration` would run them all in one.
//!
//! A new test file here is a module declared below; the crate's unit test `layout` fails if a
//! file is not declared or a declaration has no file.

mod artifact_manifests;
mod attacks;
mod attacks_shim_bugs;
mod audit_chain;
mod bad_input;
mod bounded_output;
mod churn;
mod cri_hardened;
mod cri_runc;
mod crictl;
mod critest;
mod docker_engine;
mod egress_credentials;
mod egress_cri;
mod egress_engines;
mod egress_runsc;
mod egress_shim;
mod egress_tls;
mod faults_audit;
mod faults_create;
mod faults_kill;
mod faults_restart;
mod faults_start;
mod file_count;
mod harness;
mod idle_threshold;
mod kube_agents;
mod kube_node;
mod nerdctl;
mod platform_metrics;
mod podman_engine;
mod protocol_v3;
mod runsc_current;
mod runsc_hardened_cli;
mod shim_hardening;
mod shim_pod_grouping;
mod shim_protect_mask;
mod shim_smoke;
mod shim_task_api;
mod shim_ttrpc;
mod warm_pool;
mod workspace_git;
