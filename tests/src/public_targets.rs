//! No test, demo or bench may aim at anything outside the machine: this scans their sources for
//! network targets that are not the harness's own.
//!
//! Flagged:
//! - an IPv4 literal outside 127.0.0.0/8, 0.0.0.0 and the ranges of networks the harness makes
//!   itself ([`crate::netns::RANGE`], the egress upstreams' [`crate::egress::UPSTREAM_RANGE`],
//!   the CRI harness's pod range [`CRI_POD_RANGE`]);
//! - a well-known public host people use to "test the network" (example.com, google.com,
//!   public resolvers' names...), anywhere;
//! - a host name after a network tool (`nslookup`, `dig`, `ping`, `wget`, `curl`, `nc`,
//!   `telnet`) or in an `http(s)://` URL, unless it is a reserved name that never resolves to
//!   the Internet (`localhost`, `*.test`, `*.invalid`, `*.localhost`).
//!
//! A line that carries data that only looks like a target (a Node's podCIDR in an admission
//! fixture) says so with the marker `net-scan: data`. Not scanned: `hack/lib.sh`, which installs
//! packages and the toolchain from their registries (no test's target), and this scanner, whose
//! source names what it looks for.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The CRI harness's host-local IPAM range (its pods, on a bridge it creates).
pub const CRI_POD_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 128, 0, 0), 10);

/// Marks a line whose address-like text is data, not a target.
pub const DATA_MARKER: &str = "net-scan: data";

/// Hosts commonly aimed at to show there is (no) network.
const PUBLIC_HOSTS: &[&str] = &[
    "example.com",
    "example.net",
    "example.org",
    "google.com",
    "dns.google",
    "cloudflare.com",
    "one.one.one.one",
    "quad9.net",
    "opendns.com",
    "ifconfig.me",
    "icanhazip.com",
];

const NETWORK_TOOLS: &[&str] = &["nslookup", "dig", "ping", "wget", "curl", "nc", "telnet"];

/// URLs that are identifiers, never fetched (XML namespaces).
const IDENTIFIER_URLS: &[&str] = &["http://www.w3.org/"];

/// Directories (recursive) and single files that hold test, demo and bench code.
const SCANNED_DIRS: &[&str] = &[
    "tests/src",
    "tests/tests",
    "tests/examples",
    "tests/probe",
    "tests/pause",
    "hack",
    "deploy/installer/tests",
    "policy-injector/tests",
    "policy-injector/benches",
    "fuzz/fuzz_targets",
];
const SCANNED_FILES: &[&str] = &["tests/build.rs", ".ci/run"];
const SCANNED_EXTENSIONS: &[&str] = &["rs", "sh", "py", "c", "h"];
const NOT_SCANNED: &[&str] = &[
    "hack/lib.sh",
    "tests/src/public_targets.rs",
    "tests/src/public_targets/tests.rs",
];

/// One target that is not the harness's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub file: String,
    pub line: usize,
    pub why: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.why)
    }
}

fn in_range(ip: Ipv4Addr, (base, bits): (Ipv4Addr, u8)) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(base) & mask
}

/// Whether an IPv4 address is one a test may aim at.
pub fn allowed_ipv4(ip: Ipv4Addr) -> bool {
    ip.is_loopback()
        || ip.is_unspecified()
        || in_range(ip, crate::netns::RANGE)
        || in_range(ip, crate::egress::UPSTREAM_RANGE)
        || in_range(ip, CRI_POD_RANGE)
}

/// Whether a host name can only ever mean this machine or nothing (RFC 2606/6761 names).
fn reserved_name(host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    host == "localhost"
        || [".test", ".invalid", ".localhost"]
            .iter()
            .any(|s| host.ends_with(s))
}

/// IPv4 literals in `line`: maximal runs of digits and dots with four parts of 0-255, not part
/// of a longer word (a version such as `v1.2.3.4` is not an address).
fn ipv4_literals(line: &str) -> Vec<Ipv4Addr> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_digit() || bytes[i] == b'.') {
            i += 1;
        }
        let glued = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphabetic() || *b == b'_');
        if glued(start.checked_sub(1).and_then(|p| bytes.get(p))) || glued(bytes.get(i)) {
            continue;
        }
        let run = line[start..i].trim_end_matches('.');
        let parts: Vec<&str> = run.split('.').collect();
        if parts.len() == 4 && parts.iter().all(|p| !p.is_empty() && p.len() <= 3) {
            if let Ok(ip) = run.parse::<Ipv4Addr>() {
                out.push(ip);
            }
        }
    }
    out
}

/// The host name that starts `rest` (letters, digits, '-', '.').
fn leading_host(rest: &str) -> &str {
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].trim_end_matches('.')
}

fn is_hostname(word: &str) -> bool {
    word.contains('.')
        && word.chars().any(|c| c.is_ascii_alphabetic())
        && word.parse::<Ipv4Addr>().is_err()
}

/// What in one line of source aims at a target that is not the harness's own.
pub fn scan_line(line: &str) -> Vec<String> {
    if line.contains(DATA_MARKER) {
        return Vec::new();
    }
    let mut why = Vec::new();
    for ip in ipv4_literals(line) {
        if !allowed_ipv4(ip) {
            why.push(format!(
                "IPv4 address {ip} is outside 127.0.0.0/8 and the harness's own networks"
            ));
        }
    }
    let lower = line.to_ascii_lowercase();
    for host in PUBLIC_HOSTS {
        let mut from = 0;
        while let Some(at) = lower[from..].find(host) {
            let at = from + at;
            let before = lower[..at].chars().next_back();
            if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-') {
                why.push(format!("public host {host}"));
            }
            from = at + host.len();
        }
    }
    let words: Vec<&str> = line.split_whitespace().collect();
    for (i, w) in words.iter().enumerate() {
        let tool = w.trim_start_matches(['"', '\'', '(', '`']);
        if !NETWORK_TOOLS.contains(&tool) {
            continue;
        }
        // The first operand is the target; dig's `@server` operands are targets too.
        for arg in words[i + 1..].iter().filter(|a| !a.starts_with('-')) {
            let arg = arg.trim_start_matches(['"', '\'']);
            let server = arg.strip_prefix('@');
            let t = leading_host(server.unwrap_or(arg));
            if is_hostname(t) && !reserved_name(t) {
                why.push(format!("`{tool}` aims at host {t}"));
            }
            if server.is_none() {
                break;
            }
        }
    }
    for scheme in ["http://", "https://"] {
        let mut from = 0;
        while let Some(at) = line[from..].find(scheme) {
            let at = from + at;
            from = at + scheme.len();
            if IDENTIFIER_URLS.iter().any(|u| line[at..].starts_with(u)) {
                continue;
            }
            let rest = &line[from..];
            if rest.starts_with('[') || rest.starts_with('{') {
                // An IPv6 literal (the harness's `[::]` placeholder) or a formatted address,
                // whose value the IPv4 rule or the code it comes from decides.
                continue;
            }
            let host = leading_host(rest);
            let ok =
                host.parse::<Ipv4Addr>().map(allowed_ipv4).unwrap_or(false) || reserved_name(host);
            if !ok {
                why.push(format!("URL to host {host}"));
            }
        }
    }
    why
}

/// Every finding in `text` (the contents of `file`).
pub fn scan_text(file: &str, text: &str) -> Vec<Finding> {
    text.lines()
        .enumerate()
        .flat_map(|(n, line)| {
            scan_line(line).into_iter().map(move |why| Finding {
                file: file.to_string(),
                line: n + 1,
                why,
            })
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| SCANNED_EXTENSIONS.contains(&x))
            // Extensionless scripts (hack/bench/runsc-replay-features) are scanned too.
            || p.extension().is_none() && is_script(&p)
        {
            out.push(p);
        }
    }
}

fn is_script(p: &Path) -> bool {
    std::fs::read(p).is_ok_and(|b| b.starts_with(b"#!"))
}

/// The files [`scan_repo`] reads, relative to `root`.
pub fn scanned_files(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    for d in SCANNED_DIRS {
        collect(&root.join(d), &mut paths);
    }
    paths.extend(SCANNED_FILES.iter().map(|f| root.join(f)));
    let mut rel: Vec<String> = paths
        .iter()
        .filter_map(|p| p.strip_prefix(root).ok())
        .map(|p| p.display().to_string())
        .filter(|p| !NOT_SCANNED.contains(&p.as_str()))
        .collect();
    rel.sort();
    rel.dedup();
    rel
}

/// Every finding in the repository's test, demo and bench sources.
pub fn scan_repo(root: &Path) -> Vec<Finding> {
    scanned_files(root)
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(root.join(f)).unwrap_or_default();
            scan_text(f, &text)
        })
        .collect()
}

#[cfg(test)]
mod tests;
