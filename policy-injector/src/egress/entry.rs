//! Allowlist entries (`HOST`, `*.SUFFIX`, each with an optional `:PORT`) and destination
//! ranges (`allow_cidrs`).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The port an entry without `:PORT` allows.
pub const DEFAULT_PORT: u16 = 443;

/// Which names an entry matches. Names are kept lower-case without a trailing dot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostPattern {
    /// Exactly this name.
    Exact(String),
    /// Any name ending in `.SUFFIX`, but not SUFFIX itself.
    Subdomains(String),
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AllowEntry {
    pub host: HostPattern,
    pub port: u16,
}

/// Lower-cases a host name and drops one trailing dot: `API.Example.TEST.` names the same
/// host as `api.example.test`.
pub fn normalize_host(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

/// Checks a DNS name (already normalised): labels of 1-63 letters, digits and hyphens, not
/// starting or ending with a hyphen, at least two labels, 253 bytes at most, and not all
/// digits and dots (that would be an IP address).
pub fn check_host_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty host name".into());
    }
    if name.len() > 253 {
        return Err(format!("host name {name:?} is longer than 253 bytes"));
    }
    if name.parse::<IpAddr>().is_ok() || name.starts_with('[') {
        return Err(format!(
            "{name:?} is an IP address: allow addresses with allow_cidrs"
        ));
    }
    let labels: Vec<&str> = name.split('.').collect();
    if labels.len() < 2 {
        return Err(format!(
            "{name:?} is a single label: write the fully qualified name"
        ));
    }
    for label in &labels {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!("{name:?} has an invalid label {label:?}"));
        }
    }
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(format!("{name:?} ends in a numeric label"));
    }
    Ok(())
}

fn parse_port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("bad port {p:?} (use 1-65535)")),
        Ok(n) if p.starts_with('0') => Err(format!("bad port {p:?} (write {n})")),
        Ok(n) => Ok(n),
    }
}

impl FromStr for AllowEntry {
    type Err = String;

    fn from_str(s: &str) -> Result<AllowEntry, String> {
        if s.trim() != s || s.is_empty() {
            return Err(format!("{s:?}: no spaces, not empty"));
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, parse_port(p).map_err(|e| format!("{s:?}: {e}"))?),
            None => (s, DEFAULT_PORT),
        };
        let host = normalize_host(host);
        let wildcard_err = || {
            format!("{s:?}: a wildcard is only allowed as a whole first label (\"*.example.test\")")
        };
        let pattern = match host.strip_prefix("*.") {
            Some(suffix) if suffix.contains('*') => return Err(wildcard_err()),
            Some(suffix) => {
                check_host_name(suffix).map_err(|e| format!("{s:?}: {e}"))?;
                HostPattern::Subdomains(suffix.to_string())
            }
            None if host.contains('*') => return Err(wildcard_err()),
            None => {
                check_host_name(&host).map_err(|e| format!("{s:?}: {e}"))?;
                HostPattern::Exact(host)
            }
        };
        Ok(AllowEntry {
            host: pattern,
            port,
        })
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Exact(h) => write!(f, "{h}:{}", self.port),
            HostPattern::Subdomains(s) => write!(f, "*.{s}:{}", self.port),
        }
    }
}

/// `name` is a proper subdomain of `suffix`.
fn is_subdomain(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

impl AllowEntry {
    /// Whether a request for `host:port` (host normalised) is allowed by this entry.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        port == self.port
            && match &self.host {
                HostPattern::Exact(h) => h == host,
                HostPattern::Subdomains(s) => is_subdomain(host, s),
            }
    }

    /// Whether everything `other` allows is also allowed by `self` (narrowing check).
    pub fn covers(&self, other: &AllowEntry) -> bool {
        if self.port != other.port {
            return false;
        }
        match (&self.host, &other.host) {
            (HostPattern::Exact(a), HostPattern::Exact(b)) => a == b,
            (HostPattern::Subdomains(a), HostPattern::Exact(b)) => is_subdomain(b, a),
            (HostPattern::Subdomains(a), HostPattern::Subdomains(b)) => {
                a == b || is_subdomain(b, a)
            }
            (HostPattern::Exact(_), HostPattern::Subdomains(_)) => false,
        }
    }
}

/// The first entry of `list` that allows `host:port`.
pub fn first_match<'a>(list: &'a [AllowEntry], host: &str, port: u16) -> Option<&'a AllowEntry> {
    list.iter().find(|e| e.matches(host, port))
}

/// An address range, `ADDR/PREFIX` (a bare address is a single host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?}: {a:?} is not an IP address"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max && !p.starts_with('+') => n,
                _ => return Err(format!("{s:?}: bad prefix length {p:?} (0-{max})")),
            },
        };
        let c = Cidr { addr, prefix };
        if c.network() != addr {
            return Err(format!(
                "{s:?}: host bits are set (write {}/{prefix})",
                c.network()
            ));
        }
        Ok(c)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn mask_bits(bits: u32, value: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        return 0;
    }
    let keep = u128::MAX << (bits - prefix as u32);
    let width_mask = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    value & keep & width_mask
}

fn as_bits(a: IpAddr) -> (u32, u128) {
    match a {
        IpAddr::V4(v4) => (32, u32::from(v4) as u128),
        IpAddr::V6(v6) => (128, u128::from(v6)),
    }
}

impl Cidr {
    /// The range's first address.
    pub fn network(&self) -> IpAddr {
        let (bits, v) = as_bits(self.addr);
        let m = mask_bits(bits, v, self.prefix);
        match self.addr {
            IpAddr::V4(_) => IpAddr::V4((m as u32).into()),
            IpAddr::V6(_) => IpAddr::V6(m.into()),
        }
    }

    /// Whether `ip` is inside the range. An IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
    /// treated as its IPv4 address, so a v4 range covers both spellings.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let (bits, v) = as_bits(ip);
        let (self_bits, own) = as_bits(self.addr);
        bits == self_bits && mask_bits(bits, v, self.prefix) == mask_bits(bits, own, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(s: &str) -> AllowEntry {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn entries_parse_with_the_default_port() {
        assert_eq!(
            e("API.Example.Test."),
            AllowEntry {
                host: HostPattern::Exact("api.example.test".into()),
                port: 443
            }
        );
        assert_eq!(
            e("*.pkg.example.test:8443"),
            AllowEntry {
                host: HostPattern::Subdomains("pkg.example.test".into()),
                port: 8443
            }
        );
        assert_eq!(e("git.example.test:22").to_string(), "git.example.test:22");
    }

    #[test]
    fn bad_entries_say_why() {
        for (input, why) in [
            ("", "not empty"),
            (" a.test", "no spaces"),
            ("a.test:0", "bad port"),
            ("a.test:65536", "bad port"),
            ("a.test:080", "write 80"),
            ("a.test:x", "bad port"),
            ("localhost", "single label"),
            ("*", "wildcard is only allowed"),
            ("*.test", "single label"),
            ("a*.example.test", "wildcard is only allowed"),
            ("*.*.example.test", "wildcard is only allowed"),
            ("10.0.0.1", "allow_cidrs"),
            ("10.0.0.1:443", "allow_cidrs"),
            ("[::1]:443", "allow_cidrs"),
            ("-a.example.test", "invalid label"),
            ("a..test", "invalid label"),
            ("a_b.test", "invalid label"),
            ("a.123", "numeric label"),
        ] {
            let err = input.parse::<AllowEntry>().unwrap_err();
            assert!(err.contains(why), "{input:?}: {err}");
        }
    }

    #[test]
    fn subdomain_entries_match_subdomains_only() {
        let w = e("*.pkg.example.test");
        assert!(w.matches("a.pkg.example.test", 443));
        assert!(w.matches("a.b.pkg.example.test", 443));
        assert!(!w.matches("pkg.example.test", 443), "the suffix itself");
        assert!(
            !w.matches("evilpkg.example.test", 443),
            "not a label boundary"
        );
        assert!(!w.matches("a.pkg.example.test", 80), "another port");
        let x = e("api.example.test");
        assert!(x.matches("api.example.test", 443));
        assert!(!x.matches("v1.api.example.test", 443));
    }

    #[test]
    fn covers_is_the_narrowing_relation() {
        let cases = [
            ("*.example.test", "a.example.test", true),
            ("*.example.test", "*.a.example.test", true),
            ("*.example.test", "*.example.test", true),
            ("*.example.test", "example.test", false),
            ("*.a.example.test", "*.example.test", false),
            ("a.example.test", "a.example.test", true),
            ("a.example.test", "*.a.example.test", false),
            ("a.example.test", "a.example.test:80", false),
        ];
        for (wide, narrow, want) in cases {
            assert_eq!(e(wide).covers(&e(narrow)), want, "{wide} covers {narrow}");
        }
    }

    #[test]
    fn cidrs_parse_and_contain() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(c.contains("::ffff:10.1.2.3".parse().unwrap()), "v4-mapped");
        assert!(!c.contains("10.2.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let single: Cidr = "192.0.2.7".parse().unwrap();
        assert_eq!(single.prefix, 32);
        assert!(single.contains("192.0.2.7".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("203.0.113.9".parse().unwrap()));
    }

    #[test]
    fn bad_cidrs_say_why() {
        for (input, why) in [
            ("10.0.0.0/33", "bad prefix"),
            ("10.0.0.0/+8", "bad prefix"),
            ("10.0.0.1/8", "write 10.0.0.0/8"),
            ("example.test/8", "not an IP address"),
            ("fd00::1/8", "host bits"),
        ] {
            let err = input.parse::<Cidr>().unwrap_err();
            assert!(err.contains(why), "{input:?}: {err}");
        }
    }
}
