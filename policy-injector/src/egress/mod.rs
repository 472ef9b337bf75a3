//! The egress allowlist: what a sandbox may reach through the shim's proxy, as a plan the shim
//! carries out (start the forwarder, run the proxy) and the pure pieces of the spec it implies
//! (proxy variables, the forwarder's mount, the forwarder's OCI process).
//!
//! Egress is on when `[network] mode = "none"` and `[network.egress] allow` is not empty. The
//! sandbox keeps `--network=none`; a forwarder started inside with `runsc exec` listens on
//! `listen` and carries connections over its stdio to the proxy.

// The policy's `[network.egress]` section checks its entries and defaults with these two,
// which depend on nothing of the policy: this module reads the policy, never the reverse.
pub mod credentials;
pub(crate) mod defaults;
pub(crate) mod entry;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use credentials::{
    ca_bundle_host_path, check_credential_header, path_is_plain, path_problem, CredentialPlan,
    CredentialRule, CA_BUNDLE_IN_SANDBOX, CA_VARS, NODE_TRUST_STORE,
};
pub use defaults::{DEFAULT_FORWARDER, DEFAULT_FORWARDER_ID};
pub use entry::{
    check_host_name, first_match, normalize_host, AllowEntry, Cidr, HostPattern, DEFAULT_PORT,
};

use crate::policy::EgressPolicy;

/// Where the forwarder binary is bind-mounted (read-only) inside every sandbox with egress on.
/// The directory is reserved: a spec mount at or under it is rejected.
pub const FORWARDER_IN_SANDBOX: &str = "/.gvisor-hardened/forwarder";
/// The reserved directory of [`FORWARDER_IN_SANDBOX`].
pub const RESERVED_DIR: &str = "/.gvisor-hardened";
/// `NO_PROXY`: the sandbox's own loopback never goes through the proxy.
pub const NO_PROXY: &str = "localhost,127.0.0.1,::1";
/// Variables set to the proxy URL in every container and exec.
pub const PROXY_VARS: [&str; 4] = ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"];
/// Variables set to [`NO_PROXY`].
pub const NO_PROXY_VARS: [&str; 2] = ["NO_PROXY", "no_proxy"];

/// The forwarder: which binary, and who it runs as.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwarderPlan {
    pub host_path: String,
    pub in_sandbox_path: String,
    pub uid: u32,
    pub gid: u32,
}

/// What the shim must do for a sandbox with egress on. Deserialisable: runsc-hardened keeps it
/// in its state for the guard, which runs the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressPlan {
    /// The effective allowlist: the policy's, or the annotation's narrower one.
    pub allow: Vec<AllowEntry>,
    pub allow_cidrs: Vec<Cidr>,
    /// Static names resolved without DNS (normalised name -> address).
    pub hosts: BTreeMap<String, IpAddr>,
    /// Bytes per sandbox, both directions together.
    pub max_bytes: u64,
    /// Connections open at once through the proxy. (Defaults: a plan runsc-hardened kept in
    /// its state before the caps existed still loads, with the policy defaults.)
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// New connections per second (and the burst allowed at once).
    #[serde(default = "default_max_connection_rate")]
    pub max_connection_rate: u32,
    /// Bytes per second, both directions together; `None`: no rate cap.
    #[serde(default)]
    pub max_rate: Option<u64>,
    /// The forwarder's address inside the sandbox.
    pub listen: SocketAddr,
    pub plain_http: bool,
    pub require_sni: bool,
    /// True when a `gvisor-hardened.dev/egress` annotation narrowed the allowlist.
    pub narrowed: bool,
    pub forwarder: ForwarderPlan,
    /// Credentials the proxy adds, per `host:port` (normalised name; see [`credential_key`]).
    /// (Defaults: plans kept before credentials existed load with none; a plan kept when the
    /// key was the host alone still finds its credential on port 443.)
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<String, CredentialPlan>,
    /// PEM file of the CAs a credential host's upstream must chain to; `None`: the node's
    /// trust store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<String>,
}

fn default_max_connections() -> u32 {
    crate::policy::DEFAULT_MAX_CONNECTIONS
}

fn default_max_connection_rate() -> u32 {
    crate::policy::DEFAULT_MAX_CONNECTION_RATE
}

/// The plan's key of a policy's `[network.egress.credentials]` entry `HOST` or `HOST:PORT`
/// (443 by default, as in `allow`): `host:port`, the host normalised.
pub fn credential_key(key: &str) -> Result<String, String> {
    let entry: AllowEntry = key.parse()?;
    match entry.host {
        HostPattern::Exact(_) => Ok(entry.to_string()),
        HostPattern::Subdomains(_) => Err(format!(
            "{key:?}: a credential names one host, not a wildcard"
        )),
    }
}

/// Descriptors the forwarder may hold besides its connections (stdio, the listener, the
/// runtime's own).
const FORWARDER_SPARE_FDS: u64 = 64;

/// Parses a policy's allow list (already validated when the policy loaded).
fn parse_all<T: std::str::FromStr<Err = String>>(items: &[String]) -> Result<Vec<T>, String> {
    items.iter().map(|s| s.parse()).collect()
}

impl EgressPlan {
    /// The plan of a validated policy section: `None` when its allowlist is empty (egress off).
    pub fn from_policy(p: &EgressPolicy) -> Result<Option<EgressPlan>, String> {
        if p.allow.is_empty() {
            return Ok(None);
        }
        let mut hosts = BTreeMap::new();
        for (name, addr) in &p.hosts {
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| format!("hosts.{name}: {addr:?} is not an IP address"))?;
            hosts.insert(normalize_host(name), ip);
        }
        let mut credentials = BTreeMap::new();
        for (key, c) in &p.credentials {
            credentials.insert(
                credential_key(key)?,
                CredentialPlan {
                    header: c.header.to_ascii_lowercase(),
                    file: c.file.clone(),
                    rules: parse_all(&c.rules)?,
                },
            );
        }
        Ok(Some(EgressPlan {
            credentials,
            upstream_ca: p.upstream_ca.clone(),
            allow: parse_all(&p.allow)?,
            allow_cidrs: parse_all(&p.allow_cidrs)?,
            hosts,
            max_bytes: p.max_bytes.0,
            max_connections: p.max_connections,
            max_connection_rate: p.max_connection_rate,
            max_rate: p.max_rate.map(|r| r.0),
            listen: p
                .listen
                .parse()
                .map_err(|_| format!("bad listen address {:?}", p.listen))?,
            plain_http: p.plain_http,
            require_sni: p.require_sni,
            narrowed: false,
            forwarder: ForwarderPlan {
                host_path: p.forwarder.clone(),
                in_sandbox_path: FORWARDER_IN_SANDBOX.to_string(),
                uid: p.forwarder_uid,
                gid: p.forwarder_gid,
            },
        }))
    }

    /// Connections the forwarder holds at once before it closes new ones unanswered: twice the
    /// proxy's cap, so past the cap the proxy still has room to answer 503 with its reason
    /// (refused streams are short-lived) while a flood never exhausts the forwarder's
    /// descriptors (connections it could not accept would sit in the backlog, answered by
    /// nobody and audited by nobody).
    pub fn forwarder_max_connections(&self) -> u32 {
        self.max_connections.saturating_mul(2)
    }

    /// The upstream trust anchors' file: the policy's `upstream_ca` or the node's store.
    pub fn upstream_ca_file(&self) -> &str {
        self.upstream_ca.as_deref().unwrap_or(NODE_TRUST_STORE)
    }

    /// The credential for `host:port` (host normalised), if the proxy adds one there: never on
    /// another port of the same host, which may be another service.
    pub fn credential(&self, host: &str, port: u16) -> Option<&CredentialPlan> {
        self.credentials.get(&format!("{host}:{port}")).or_else(|| {
            // A plan kept (runsc-hardened's state) when credentials were keyed by host alone,
            // which then meant the default port.
            (port == DEFAULT_PORT)
                .then(|| self.credentials.get(host))
                .flatten()
        })
    }

    /// The host names (without ports) the proxy adds a credential for: the names the
    /// sandbox's CA may sign for.
    pub fn credential_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self
            .credentials
            .keys()
            .map(|k| {
                k.rsplit_once(':')
                    .map_or(k.as_str(), |(h, _)| h)
                    .to_string()
            })
            .collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }

    /// `(host, port)` of every credential.
    pub fn credential_destinations(&self) -> Vec<(String, u16)> {
        self.credentials
            .keys()
            .map(|k| match k.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().unwrap_or(DEFAULT_PORT)),
                None => (k.clone(), DEFAULT_PORT),
            })
            .collect()
    }

    /// The read-only bind mount of the sandbox's CA bundle (written by the shim at `source`),
    /// when the plan has credentials.
    pub fn ca_bundle_mount(&self, source: &str) -> Option<Value> {
        if self.credentials.is_empty() {
            return None;
        }
        Some(json!({
            "destination": CA_BUNDLE_IN_SANDBOX,
            "type": "bind",
            "source": source,
            "options": ["bind", "ro", "nosuid", "nodev", "noexec"]
        }))
    }

    /// The CA variables every container and exec gets when the plan has credentials.
    pub fn ca_env(&self) -> Vec<(&'static str, String)> {
        if self.credentials.is_empty() {
            return Vec::new();
        }
        CA_VARS
            .iter()
            .map(|n| (*n, CA_BUNDLE_IN_SANDBOX.to_string()))
            .collect()
    }

    /// `http://<listen>`, the value of the proxy variables.
    pub fn proxy_url(&self) -> String {
        format!("http://{}", self.listen)
    }

    /// The variables every container and exec gets, in a fixed order.
    pub fn proxy_env(&self) -> Vec<(&'static str, String)> {
        proxy_env_for(self.listen)
    }

    /// The read-only bind mount of the forwarder binary for the spec's `mounts`.
    pub fn forwarder_mount(&self) -> Value {
        json!({
            "destination": self.forwarder.in_sandbox_path,
            "type": "bind",
            "source": self.forwarder.host_path,
            "options": ["bind", "ro", "nosuid", "nodev"]
        })
    }

    /// The OCI process for `runsc exec --process`: its own uid and gid, **empty capability
    /// sets** (measured: with runsc's default set the workload's shell could kill it),
    /// no new privileges, cwd `/`, and nothing secret in args or env (the workload can read
    /// its cmdline and environ).
    pub fn forwarder_process(&self) -> Value {
        let nofile = u64::from(self.forwarder_max_connections()) + FORWARDER_SPARE_FDS;
        json!({
            "terminal": false,
            "user": {"uid": self.forwarder.uid, "gid": self.forwarder.gid, "additionalGids": []},
            "args": [
                self.forwarder.in_sandbox_path,
                "--listen",
                self.listen.to_string(),
                "--max-connections",
                self.forwarder_max_connections().to_string()
            ],
            "env": [],
            "cwd": "/",
            "capabilities": {
                "bounding": [], "effective": [], "inheritable": [], "permitted": [], "ambient": []
            },
            "noNewPrivileges": true,
            // One descriptor per connection it may hold, and spares: the limit matches the cap.
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": nofile, "soft": nofile}]
        })
    }
}

/// The proxy variables for a listen address.
pub fn proxy_env_for(listen: SocketAddr) -> Vec<(&'static str, String)> {
    let url = format!("http://{listen}");
    let mut out: Vec<(&'static str, String)> =
        PROXY_VARS.iter().map(|n| (*n, url.clone())).collect();
    out.extend(NO_PROXY_VARS.iter().map(|n| (*n, NO_PROXY.to_string())));
    out
}

/// Parses a `gvisor-hardened.dev/egress` annotation: comma-separated entries, spaces around
/// commas allowed. An empty value narrows to nothing (egress off for that sandbox).
pub fn parse_annotation(value: &str) -> Result<Vec<AllowEntry>, String> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    value.split(',').map(|s| s.trim().parse()).collect()
}

/// Checks that each narrowing entry is covered by the policy's list; names the first one
/// that is not.
pub fn check_narrowing(policy: &[AllowEntry], wanted: &[AllowEntry]) -> Result<(), String> {
    for w in wanted {
        if !policy.iter().any(|p| p.covers(w)) {
            return Err(if policy.is_empty() {
                format!("entry {w} is not allowed: the policy allows no egress")
            } else {
                format!("entry {w} is not covered by the policy's egress allowlist")
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
