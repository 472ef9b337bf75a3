//! The log level a policy asks for, applied to whichever logger the front end installed
//! (containerd's log fifo in the shim, the engine's `--log` in runsc-hardened).

use log::LevelFilter;

/// The level a policy's `[log] level` asks for; unknown words mean info (the policy core
/// validates the value, this only maps it).
pub fn policy_level(policy: &policy_injector::Policy) -> LevelFilter {
    match policy.log.level.as_str() {
        "error" => LevelFilter::Error,
        "warn" | "warning" => LevelFilter::Warn,
        "debug" => LevelFilter::Debug,
        "trace" => LevelFilter::Trace,
        _ => LevelFilter::Info,
    }
}

/// A policy may ask for more detail than containerd's `-debug` did; never less.
pub fn raise_level(level: LevelFilter) {
    if level > log::max_level() {
        log::set_max_level(level);
    }
}
