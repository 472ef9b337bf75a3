//! `--await-listener ADDR [--timeout SECS] -- PROGRAM ARGS...`: the workload's own first step in
//! a sandbox whose forwarder starts after it (`runsc exec` is refused before `runsc start`, so
//! the shim can only start the forwarder once the workload's process exists). The shim puts this
//! in front of the workload's command: it waits until something listens on ADDR, which can only
//! be the forwarder (nothing else runs in the sandbox yet), and then becomes the workload. So
//! the workload never gets the chance to take the forwarder's port first.
//!
//! Listening sockets are read from /proc/net/tcp (and tcp6), which gVisor fills from its own
//! network stack: no probe connection (the proxy would see and audit it) and no trial bind
//! (which could make the forwarder's own bind fail).

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{exit, Command};
use std::thread;
use std::time::{Duration, Instant};

use gvisor_hardened_forwarder::listening;

const POLL: Duration = Duration::from_millis(5);
/// What the workload exits with when the forwarder never listened: like a shell's "cannot
/// execute", and never 0.
const NO_FORWARDER: i32 = 125;

/// Runs the mode and never returns. `args` follows `--await-listener`.
pub fn run(args: &[String]) -> ! {
    let usage = "usage: --await-listener ADDR [--timeout SECS] -- PROGRAM [ARGS...]";
    let fail = |msg: &str| -> ! {
        eprintln!("gvisor-hardened: {msg}");
        exit(NO_FORWARDER)
    };
    let Some(addr) = args.first().and_then(|a| a.parse::<SocketAddr>().ok()) else {
        fail(usage)
    };
    let mut rest = &args[1..];
    let mut timeout = Duration::from_secs(30);
    if rest.first().map(String::as_str) == Some("--timeout") {
        match rest.get(1).and_then(|s| s.parse::<u64>().ok()) {
            Some(s) => timeout = Duration::from_secs(s),
            None => fail(usage),
        }
        rest = &rest[2..];
    }
    let Some(("--", command)) = rest.split_first().map(|(a, r)| (a.as_str(), r)) else {
        fail(usage)
    };
    let Some((program, program_args)) = command.split_first() else {
        fail(usage)
    };
    let table = if addr.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        if listening(&text, addr) {
            break;
        }
        if Instant::now() >= deadline {
            fail(&format!(
                "the egress forwarder did not listen on {addr} within {timeout:?}; not running {program}"
            ));
        }
        thread::sleep(POLL);
    }
    let err = Command::new(program).args(program_args).exec();
    eprintln!("gvisor-hardened: cannot run {program}: {err}");
    exit(if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    })
}
