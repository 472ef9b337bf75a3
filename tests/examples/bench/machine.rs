//! The machine a run happened on, so a published table says where its figures come from.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

/// First line of `program args...`'s stdout (or stderr: some tools print versions there).
fn version_of(program: &str, args: &[&str]) -> String {
    match Command::new(program).args(args).output() {
        Ok(o) => {
            let text = if o.stdout.is_empty() {
                o.stderr
            } else {
                o.stdout
            };
            String::from_utf8_lossy(&text)
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .to_string()
        }
        Err(e) => format!("unavailable: {e}"),
    }
}

fn cpuinfo_field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn meminfo_kib(key: &str) -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find(|l| l.starts_with(key))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The selected stack's binary `name` (`runsc`, `containerd`), or `name` on PATH.
fn stack_binary(name: &str) -> String {
    gvisor_hardened_tests::stack::bin(name)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| name.to_string())
}

#[derive(Debug, Clone)]
pub struct Machine {
    /// `current` or `compat` (`GVH_STACK`, tests/src/stack.rs).
    pub stack: &'static str,
    pub cpu_model: String,
    pub cpus: usize,
    pub mem_total_kib: u64,
    pub kernel: String,
    pub os: String,
    pub runsc: String,
    pub containerd: String,
    pub runc: String,
    pub shim_binary: String,
    pub shim_binary_bytes: u64,
}

impl Machine {
    pub fn probe(shim: &Path) -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let os = fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                    .map(|v| v.trim_matches('"').to_string())
            })
            .unwrap_or_default();
        Machine {
            stack: gvisor_hardened_tests::stack::Stack::selected().name(),
            cpu_model: cpuinfo_field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            mem_total_kib: meminfo_kib("MemTotal:").unwrap_or(0),
            kernel: version_of("uname", &["-r"]),
            os,
            runsc: version_of(&stack_binary("runsc"), &["--version"]),
            containerd: version_of(&stack_binary("containerd"), &["--version"]),
            runc: version_of("runc", &["--version"]),
            shim_binary: shim.display().to_string(),
            shim_binary_bytes: fs::metadata(shim).map_or(0, |m| m.len()),
        }
    }

    /// One line for the table header and the README.
    pub fn one_line(&self) -> String {
        format!(
            "{} stack: {} ({} CPUs), {:.0} GiB RAM, {}, kernel {}; {}; {}; {}",
            self.stack,
            self.cpu_model,
            self.cpus,
            self.mem_total_kib as f64 / (1024.0 * 1024.0),
            self.os,
            self.kernel,
            self.runsc,
            self.containerd,
            self.runc
        )
    }

    pub fn to_json(&self) -> Value {
        json!({
            "stack": self.stack,
            "cpu_model": self.cpu_model,
            "cpus": self.cpus,
            "mem_total_kib": self.mem_total_kib,
            "os": self.os,
            "kernel": self.kernel,
            "runsc": self.runsc,
            "containerd": self.containerd,
            "runc": self.runc,
            "shim_binary": self.shim_binary,
            "shim_binary_bytes": self.shim_binary_bytes,
        })
    }
}
