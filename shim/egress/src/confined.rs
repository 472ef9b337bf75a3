//! The proxy in a process of its own, one per sandbox: the code that parses what the sandbox
//! sends (request heads, ClientHellos, TLS for credential hosts) runs without root, without
//! capabilities, under `no_new_privs` and a seccomp allowlist, in the pod's network namespace
//! and cgroups, holding that sandbox's CA key only. The shim keeps what needs root and what
//! must survive a compromised proxy: starting the forwarder (`runsc exec`), the audit trail,
//! the credential files and the lookups, and the supervision (a dead proxy process is a
//! forwarder death: recorded, restarted with backoff, the sandbox without egress meanwhile).
//!
//! - [`wire`]: the messages over the socket between the two;
//! - [`confine`]: what the process gives up before it serves;
//! - [`child`]: the process itself (the shim's binary, started with [`PROXY_ARG`]);
//! - [`parent`]: the shim's side.

pub mod child;
pub mod confine;
pub mod parent;
pub mod wire;

pub use parent::Confinement;

/// The first argument that makes the shim's binary (either front end's) the proxy process.
pub const PROXY_ARG: &str = "--gvisor-hardened-egress-proxy";

/// Call first in `main`: when this process was started as a sandbox's proxy process, runs it
/// and returns its exit code; otherwise `None`.
pub fn run_if_proxy_process() -> Option<std::process::ExitCode> {
    if std::env::args_os().nth(1).as_deref() != Some(std::ffi::OsStr::new(PROXY_ARG)) {
        return None;
    }
    Some(match child::run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gvisor-hardened egress proxy: {e}");
            std::process::ExitCode::FAILURE
        }
    })
}
