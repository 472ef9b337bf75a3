//! No core dumps of the runtime's own processes.
//!
//! The shim (and runsc-hardened's guard) hold what the sandbox must never see: the injected
//! credentials' values, read from their key files, and each sandbox's CA private key. A crash
//! of either would otherwise write that memory to wherever the host's `core_pattern` points
//! (a file in the working directory, or a handler such as systemd-coredump that keeps it for
//! later). So both turn dumps off before they do anything else: the core size limit goes to 0
//! (soft and hard, inherited by what they spawn, runsc included), and the process is made
//! non-dumpable, which also stops a pipe `core_pattern` handler from being run for it and
//! keeps other processes of the same user from ptrace-attaching to read the same memory.

use rustix::process::{set_dumpable_behavior, setrlimit, DumpableBehavior, Resource, Rlimit};

/// Turns core dumps off for this process and what it spawns from now on. Fails only if the
/// kernel refuses, which the caller treats as fatal: a runtime that might dump a credential
/// does not start.
pub fn disable() -> std::io::Result<()> {
    setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )?;
    set_dumpable_behavior(DumpableBehavior::NotDumpable)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rustix::process::{dumpable_behavior, getrlimit, DumpableBehavior, Resource};

    #[test]
    fn disabling_leaves_no_core_limit_and_a_non_dumpable_process() {
        // In the test binary's own process: harmless (nothing here wants a dump), and what the
        // shim's main does at its first line.
        super::disable().unwrap();
        let limit = getrlimit(Resource::Core);
        assert_eq!((limit.current, limit.maximum), (Some(0), Some(0)));
        assert_eq!(dumpable_behavior().unwrap(), DumpableBehavior::NotDumpable);
    }
}
