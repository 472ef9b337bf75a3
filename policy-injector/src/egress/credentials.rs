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
                "{path:?} has {}: a server could read it as another path",
                path_problem(path).unwrap_or_default()
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

/// A path an upstream cannot read as another one: see [`path_problem`]. Checked for every
/// request on a credential connection, so `/v1/models/../admin` cannot pass as something under
/// `/v1/models`.
pub fn path_is_plain(target: &str) -> bool {
    path_problem(target).is_none()
}

/// What in a request's path (origin form; the query is not looked at) a server, a framework or
/// a proxy in front of the upstream could read as another path than the one a rule matched, if
/// anything: a backslash (read as `/` by some), a `;` parameter (Tomcat, Jetty and Spring drop
/// `..;` to `..`), a `.` or `..` segment, an empty segment, a malformed `%` escape, or an
/// escape of `.`, `/`, `\`, `;`, `%` (decoded twice it is another path), a control character
/// or an overlong UTF-8 lead byte (`%c0%ae` is `.` to a lenient decoder).
pub fn path_problem(target: &str) -> Option<&'static str> {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if path.contains('\\') {
        return Some("a backslash");
    }
    if path.contains(';') {
        return Some("a ; parameter");
    }
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            i += 1;
            continue;
        }
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        let Some(byte) = hex else {
            return Some("a malformed % escape");
        };
        match byte {
            b'.' => return Some("an escaped dot (%2e)"),
            b'/' => return Some("an escaped slash (%2f)"),
            b'\\' => return Some("an escaped backslash (%5c)"),
            b';' => return Some("an escaped ; (%3b)"),
            b'%' => return Some("an escaped % (%25)"),
            0..=0x1f | 0x7f => return Some("an escaped control character"),
            0xc0 | 0xc1 => return Some("an overlong UTF-8 escape"),
            _ => {}
        }
        i += 3;
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Some("no leading /");
    };
    let segs: Vec<&str> = rest.split('/').collect();
    let last = segs.len() - 1;
    for (i, seg) in segs.iter().enumerate() {
        if *seg == "." || *seg == ".." {
            return Some("a dot segment (. or ..)");
        }
        // The last segment may be empty (a trailing `/`, or the path `/`), no other.
        if seg.is_empty() && i != last {
            return Some("an empty segment (//)");
        }
    }
    None
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
        for (bad, why) in [
            ("/a/../b", "a dot segment (. or ..)"),
            ("/a/./b", "a dot segment (. or ..)"),
            ("/..", "a dot segment (. or ..)"),
            ("/a/%2E%2E/b", "an escaped dot (%2e)"),
            ("/a%2fb", "an escaped slash (%2f)"),
            ("/a%5Cb", "an escaped backslash (%5c)"),
            ("/a\\b", "a backslash"),
            ("/a//b", "an empty segment (//)"),
            ("/v1/models/..;/admin/keys", "a ; parameter"),
            ("/v1/models;x=1", "a ; parameter"),
            ("/v1/models/..%3b/admin", "an escaped ; (%3b)"),
            ("/v1/models/%252e%252e/admin", "an escaped % (%25)"),
            ("/v1/models/%c0%ae%c0%ae/admin", "an overlong UTF-8 escape"),
            ("/v1/models/%00", "an escaped control character"),
            ("/v1/models/%zz", "a malformed % escape"),
            ("/v1/models/%2", "a malformed % escape"),
        ] {
            assert_eq!(path_problem(bad), Some(why), "{bad}");
            assert!(!path_is_plain(bad), "{bad}");
        }
        // What follows `?` is the query, not the path.
        assert_eq!(path_problem("/v1/models?q=..;%2f"), None);
        assert_eq!(path_problem("/v1/models/caf%C3%A9"), None);
    }
}
