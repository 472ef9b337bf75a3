//! Credentials the proxy adds for a host (`[network.egress.credentials]`): the plan's part,
//! the checks of a header name and of a `METHOD /path` rule, and where the sandbox finds the CA
//! bundle that makes it trust the proxy's own certificates for those hosts.
//!
//! Pure: the shim makes the CA, writes the bundle at [`ca_bundle_host_path`] and reads the
//! credential files; this module only names them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The node's trust store (Debian's bundle): upstreams of credential hosts are verified
/// against it unless `upstream_ca` names another file; the sandbox's bundle starts with it.
pub const NODE_TRUST_STORE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The CA bundle inside the sandbox (read-only bind mount), in the reserved directory.
pub const CA_BUNDLE_IN_SANDBOX: &str = "/.gvisor-hardened/ca-bundle.pem";
/// Where the shim writes each sandbox's CA bundle on the host:
/// `<dir>/<namespace>/<sandbox id>/ca-bundle.pem` (a tmpfs: gone at reboot like the sandbox).
/// Outside `/run/gvisor-hardened`, which the default policy denies to binds: re-hardening a
/// hardened spec must accept this mount again. It holds certificates only, no key.
pub const CA_BUNDLE_HOST_DIR: &str = "/run/gvisor-hardened-egress-ca";
/// Variables pointed at [`CA_BUNDLE_IN_SANDBOX`] in every container and exec: OpenSSL, Python
/// `requests`, Node (adds to its own roots), git, curl and pip.
pub const CA_VARS: [&str; 6] = [
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
    "PIP_CERT",
];

/// The host file of a sandbox's CA bundle. `namespace` and `sandbox_id` were checked by the
/// caller (containerd's namespace, a container id): no `/` and no `..`.
pub fn ca_bundle_host_path(namespace: &str, sandbox_id: &str) -> String {
    format!("{CA_BUNDLE_HOST_DIR}/{namespace}/{sandbox_id}/ca-bundle.pem")
}

/// One credential as the proxy applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialPlan {
    /// The header's name, lower-case.
    pub header: String,
    /// The host file holding the value.
    pub file: String,
    /// What the workload may send with it; empty: anything.
    #[serde(default)]
    pub rules: Vec<CredentialRule>,
}

/// `METHOD /prefix`: a request with this method whose path is the prefix or below it (at a
/// `/` or `?` boundary: `/v1/messages` covers `/v1/messages/1` and `/v1/messages?x`, not
/// `/v1/messagesX`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CredentialRule {
    pub method: String,
    pub path: String,
}

impl FromStr for CredentialRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (method, path) = s
            .split_once(' ')
            .ok_or_else(|| format!("{s:?} is not \"METHOD /path\" (e.g. \"POST /v1/messages\")"))?;
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("{method:?} is not an upper-case HTTP method"));
        }
        if !path.starts_with('/') || path.bytes().any(|b| !b.is_ascii_graphic() || b == b'#') {
            return Err(format!(
                "{path:?} must start with / and hold printable ASCII only"
            ));
        }
        if !path_is_plain(path) {
            return Err(format!(
                "{path:?} has dot segments, escaped dots or slashes, or a backslash"
            ));
        }
        Ok(CredentialRule {
            method: method.to_string(),
            path: path.to_string(),
        })
    }
}

impl TryFrom<String> for CredentialRule {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<CredentialRule> for String {
    fn from(r: CredentialRule) -> String {
        r.to_string()
    }
}

impl fmt::Display for CredentialRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl CredentialRule {
    /// Whether a request's method and path (origin form, query included) fall under the rule.
    pub fn allows(&self, method: &str, target: &str) -> bool {
        if method != self.method {
            return false;
        }
        let Some(rest) = target.strip_prefix(&self.path) else {
            return false;
        };
        self.path.ends_with('/') || rest.is_empty() || rest.starts_with(['/', '?'])
    }
}

/// A path an upstream cannot read as another one: no `.`/`..` segments, no `%2e`, `%2f` or
/// `%5c` escapes, no backslash, no empty segment. Checked for every request under rules, so
/// `/v1/models/../admin` cannot pass as something under `/v1/models`.
pub fn path_is_plain(target: &str) -> bool {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let lower = path.to_ascii_lowercase();
    if lower.contains("%2e")
        || lower.contains("%2f")
        || lower.contains("%5c")
        || path.contains('\\')
    {
        return false;
    }
    let Some(rest) = path.strip_prefix('/') else {
        return false;
    };
    let segs: Vec<&str> = rest.split('/').collect();
    let last = segs.len() - 1;
    // The last segment may be empty (a trailing `/`, or the path `/`), no other.
    segs.iter()
        .enumerate()
        .all(|(i, seg)| *seg != "." && *seg != ".." && (i == last || !seg.is_empty()))
}

/// Headers a credential may not be: the proxy frames the request with them.
const FRAMING: [&str; 6] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "te",
    "upgrade",
];

/// A credential's header name: an HTTP token, not one the request's framing depends on.
pub fn check_credential_header(name: &str) -> Result<(), String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || name.len() > 64 || !name.bytes().all(tchar) {
        return Err(format!("{name:?} is not a header name"));
    }
    let lower = name.to_ascii_lowercase();
    if FRAMING.contains(&lower.as_str()) || lower.starts_with("proxy-") {
        return Err(format!(
            "{name} frames the request (Host, Content-Length, Transfer-Encoding, Connection, TE, Upgrade, Proxy-*): not a credential header"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_at_path_boundaries_only() {
        let r: CredentialRule = "POST /v1/messages".parse().unwrap();
        assert!(r.allows("POST", "/v1/messages"));
        assert!(r.allows("POST", "/v1/messages/1"));
        assert!(r.allows("POST", "/v1/messages?beta=1"));
        assert!(!r.allows("POST", "/v1/messagesX"));
        assert!(!r.allows("GET", "/v1/messages"));
        assert!(!r.allows("POST", "/v1"));
        let slash: CredentialRule = "GET /".parse().unwrap();
        assert!(slash.allows("GET", "/anything"));
    }

    #[test]
    fn bad_rules_and_headers_are_refused() {
        for bad in [
            "POST",
            "post /x",
            "GET x",
            "GET /a/../b",
            "GET /a b",
            "GET /%2e%2e/x",
        ] {
            assert!(bad.parse::<CredentialRule>().is_err(), "{bad}");
        }
        for bad in [
            "",
            "Host",
            "content-length",
            "Transfer-Encoding",
            "Connection",
            "x y",
            "Proxy-Authorization",
        ] {
            assert!(check_credential_header(bad).is_err(), "{bad}");
        }
        check_credential_header("x-api-key").unwrap();
        check_credential_header("Authorization").unwrap();
    }

    #[test]
    fn plain_paths() {
        for ok in ["/", "/v1/messages", "/v1/messages?x=..", "/a/b/"] {
            assert!(path_is_plain(ok), "{ok}");
        }
        for bad in [
            "/a/../b",
            "/a/./b",
            "/..",
            "/a/%2E%2E/b",
            "/a%2fb",
            "/a\\b",
            "/a//b",
        ] {
            assert!(!path_is_plain(bad), "{bad}");
        }
    }
}
