//! Shared by the tests that run `policy-injector audit metrics` as a server: the process, killed
//! however the test ends, and the address it says it serves on.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A process killed (and waited for) when the test ends, however it ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `audit metrics` over `log` on a free loopback port, with `extra` options before
/// `--listen`; returns once it said where it serves.
pub fn start(log: &Path, extra: &[&str]) -> (Killed, SocketAddr) {
    let child = Command::new(env!("CARGO_BIN_EXE_policy-injector"))
        .args(["audit", "metrics"])
        .args(extra)
        .args(["--listen", "127.0.0.1:0", "--log"])
        .arg(log)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut exporter = Killed(child);
    let mut first = String::new();
    BufReader::new(exporter.0.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // "serving http://127.0.0.1:PORT/metrics from PATH"
    let addr = first
        .strip_prefix("serving http://") // net-scan: data
        .and_then(|r| r.split_once("/metrics"))
        .map(|(a, _)| a.parse().unwrap())
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"));
    (exporter, addr)
}
