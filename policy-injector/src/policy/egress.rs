//! `[network.egress]`: the allowlist section and its checks.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use super::issue::{check_abs_path, contradiction, invalid, Issue};
use super::{NetworkMode, Policy};
use crate::egress::defaults::{DEFAULT_FORWARDER, DEFAULT_FORWARDER_ID};
use crate::egress::entry::{check_host_name, normalize_host, AllowEntry, Cidr, HostPattern};
use crate::quantity::ByteSize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EgressPolicy {
    /// `HOST` or `*.SUFFIX`, optional `:PORT` (443). Empty: egress off.
    pub allow: Vec<String>,
    /// Destination ranges allowed after resolution (private and loopback ranges are refused
    /// unless listed here).
    pub allow_cidrs: Vec<String>,
    /// Names the proxy resolves without DNS.
    pub hosts: BTreeMap<String, String>,
    /// Per sandbox, both directions together.
    pub max_bytes: ByteSize,
    /// Connections open at once per sandbox (refusals past it are answered 503 and audited).
    pub max_connections: u32,
    /// New connections per second per sandbox (a burst of this many, then this rate;
    /// refusals past it are answered 429 and audited).
    pub max_connection_rate: u32,
    /// Bytes per second per sandbox, both directions together (a burst of one second's worth);
    /// unset: no rate cap (`max_bytes` still bounds the total).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rate: Option<ByteSize>,
    /// The forwarder's address inside the sandbox (a loopback address).
    pub listen: String,
    pub plain_http: bool,
    pub require_sni: bool,
    /// Host path of the static forwarder binary, bind-mounted read-only into the sandbox.
    pub forwarder: String,
    /// The forwarder's uid and gid inside the sandbox; never the workload's.
    pub forwarder_uid: u32,
    pub forwarder_gid: u32,
    /// PEM file of the CAs a credential host's upstream certificate must chain to; unset: the
    /// node's trust store (`egress::NODE_TRUST_STORE`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<String>,
    /// Per allowlisted host: a header the proxy adds with the value of a host file, behind TLS
    /// it terminates with the sandbox's own CA. The value never enters the sandbox.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<String, CredentialPolicy>,
}

/// One `[network.egress.credentials]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialPolicy {
    /// The header's name, e.g. `x-api-key` or `authorization`.
    pub header: String,
    /// The host file holding the header's value (read at each request: a rotated file takes
    /// effect at once).
    pub file: String,
    /// `METHOD /path-prefix` the workload may send with the credential; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<String>,
}

impl Default for EgressPolicy {
    fn default() -> Self {
        EgressPolicy {
            allow: Vec::new(),
            allow_cidrs: Vec::new(),
            hosts: BTreeMap::new(),
            max_bytes: ByteSize(1 << 30),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connection_rate: DEFAULT_MAX_CONNECTION_RATE,
            max_rate: None,
            listen: "127.0.0.1:3128".to_string(),
            plain_http: false,
            require_sni: true,
            forwarder: DEFAULT_FORWARDER.to_string(),
            forwarder_uid: DEFAULT_FORWARDER_ID,
            forwarder_gid: DEFAULT_FORWARDER_ID,
            upstream_ca: None,
            credentials: BTreeMap::new(),
        }
    }
}

const KEY: &str = "network.egress";

/// A coding agent's package manager opens a few dozen connections at once at most (pip, npm
/// and git were measured under the runtime well below it); a flood stops here.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 256;
/// New connections per second (and the burst allowed at once).
pub const DEFAULT_MAX_CONNECTION_RATE: u32 = 100;
/// The least `max_rate` may be (bytes per second).
pub const MIN_MAX_RATE: u64 = 64 * 1024;
/// The most `max_connections` may be: the forwarder holds one descriptor and two threads per
/// connection inside the sandbox (and the shim one socket on the host), so the cap bounds them.
pub const MAX_MAX_CONNECTIONS: u32 = 4096;

pub(super) fn validate(p: &Policy) -> Result<(), Issue> {
    let e = &p.network.egress;
    let key = |k: &str| format!("{KEY}.{k}");
    let mut seen: Vec<AllowEntry> = Vec::new();
    for (i, s) in e.allow.iter().enumerate() {
        let entry: AllowEntry = s
            .parse()
            .map_err(|why: String| invalid(format!("{KEY}.allow[{i}]"), why))?;
        if seen.contains(&entry) {
            return Err(invalid(
                format!("{KEY}.allow[{i}]"),
                format!("{entry} is listed twice"),
            ));
        }
        seen.push(entry);
    }
    for (i, s) in e.allow_cidrs.iter().enumerate() {
        s.parse::<Cidr>()
            .map_err(|why| invalid(format!("{KEY}.allow_cidrs[{i}]"), why))?;
    }
    for (name, addr) in &e.hosts {
        let k = format!("{KEY}.hosts.{name}");
        check_host_name(&normalize_host(name)).map_err(|why| invalid(&k, why))?;
        addr.parse::<IpAddr>()
            .map_err(|_| invalid(&k, format!("{addr:?} is not an IP address")))?;
    }
    if e.max_bytes.0 == 0 {
        return Err(invalid(
            key("max_bytes"),
            "0 bytes would refuse every connection",
        ));
    }
    if e.max_connections == 0 || e.max_connections > MAX_MAX_CONNECTIONS {
        return Err(invalid(
            key("max_connections"),
            format!(
                "{} is outside 1..={MAX_MAX_CONNECTIONS} (0 would refuse every connection)",
                e.max_connections
            ),
        ));
    }
    if e.max_connection_rate == 0 {
        return Err(invalid(
            key("max_connection_rate"),
            "0 connections per second would refuse every connection",
        ));
    }
    if e.max_rate.is_some_and(|r| r.0 < MIN_MAX_RATE) {
        return Err(invalid(
            key("max_rate"),
            format!("below {MIN_MAX_RATE} bytes per second: one frame of 64 KiB would wait over a second"),
        ));
    }
    let listen: SocketAddr = e.listen.parse().map_err(|_| {
        invalid(
            key("listen"),
            format!(
                "{:?} is not an address:port (e.g. \"127.0.0.1:3128\")",
                e.listen
            ),
        )
    })?;
    if !listen.ip().is_loopback() || listen.port() == 0 {
        return Err(invalid(
            key("listen"),
            format!("{listen} must be a loopback address with a port: the forwarder serves the sandbox only"),
        ));
    }
    check_abs_path(&key("forwarder"), &e.forwarder)?;
    if e.forwarder_uid == 0 || e.forwarder_gid == 0 {
        return Err(invalid(
            key("forwarder_uid"),
            "0 would run the forwarder as root inside the sandbox",
        ));
    }
    if e.forwarder_uid == p.user.uid {
        return Err(contradiction(
            &[&key("forwarder_uid"), "user.uid"],
            "the forwarder must not share the workload's uid, or the workload could signal it",
        ));
    }
    if let Some(ca) = &e.upstream_ca {
        check_abs_path(&key("upstream_ca"), ca)?;
    }
    let mut credentials: Vec<AllowEntry> = Vec::new();
    for (host, c) in &e.credentials {
        let k = format!("{KEY}.credentials.{host}");
        // `HOST` or `HOST:PORT` (443 by default): a credential goes to one port of its host,
        // never to another service the same name serves on another port.
        let entry: AllowEntry = host.parse().map_err(|why| invalid(&k, why))?;
        let HostPattern::Exact(_) = &entry.host else {
            return Err(invalid(&k, "a credential names one host, not a wildcard"));
        };
        if !seen.contains(&entry) {
            return Err(contradiction(
                &[&k, &key("allow")],
                format!("{entry} is not listed by name and port in allow: a credential goes only to a host and port the allowlist names"),
            ));
        }
        if credentials.contains(&entry) {
            // `api.example.test` and `api.example.test:443` name the same destination.
            return Err(invalid(&k, format!("{entry} has a credential twice")));
        }
        credentials.push(entry);
        crate::egress::credentials::check_credential_header(&c.header)
            .map_err(|why| invalid(format!("{k}.header"), why))?;
        check_abs_path(&format!("{k}.file"), &c.file)?;
        for (i, r) in c.rules.iter().enumerate() {
            r.parse::<crate::egress::credentials::CredentialRule>()
                .map_err(|why| invalid(format!("{k}.rules[{i}]"), why))?;
        }
    }
    if !e.allow.is_empty() && p.network.mode != NetworkMode::None {
        return Err(contradiction(
            &[&key("allow"), "network.mode"],
            format!(
                "an egress allowlist needs mode \"none\" (with mode {:?} the sandbox already reaches the network directly)",
                p.network.mode.as_str()
            ),
        ));
    }
    Ok(())
}
