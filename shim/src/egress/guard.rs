//! The resolved-address guard: a destination the proxy is about to dial must not be the host
//! itself, its neighbours or the cloud's metadata service, unless the policy's `allow_cidrs`
//! names it. Pure: the node's own addresses are passed in.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use policy_injector::egress::Cidr;

/// Why an address is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unspecified,
    Loopback,
    /// 169.254.0.0/16 and fe80::/10; cloud metadata (169.254.169.254) lives here.
    LinkLocal,
    Private,
    Cgnat,
    UniqueLocal,
    Multicast,
    Broadcast,
    /// 240.0.0.0/4 and other ranges no public host uses.
    Reserved,
    NodeAddress,
}

impl Refusal {
    /// A short rule name for audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Unspecified => "unspecified",
            Refusal::Loopback => "loopback",
            Refusal::LinkLocal => "link-local",
            Refusal::Private => "private",
            Refusal::Cgnat => "cgnat",
            Refusal::UniqueLocal => "unique-local",
            Refusal::Multicast => "multicast",
            Refusal::Broadcast => "broadcast",
            Refusal::Reserved => "reserved",
            Refusal::NodeAddress => "node-address",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Refusal::Unspecified => "an unspecified address",
            Refusal::Loopback => "a loopback address",
            Refusal::LinkLocal => "a link-local address (where cloud metadata services live)",
            Refusal::Private => "a private address",
            Refusal::Cgnat => "a carrier-grade NAT address",
            Refusal::UniqueLocal => "an IPv6 unique-local address",
            Refusal::Multicast => "a multicast address",
            Refusal::Broadcast => "the broadcast address",
            Refusal::Reserved => "a reserved address",
            Refusal::NodeAddress => "an address of this node",
        })
    }
}

/// The IPv4 address an IPv6 address stands for: IPv4-mapped (`::ffff:a.b.c.d`) and the NAT64
/// well-known prefix (`64:ff9b::/96`), which a NAT64 gateway would turn into that IPv4 address.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let o = ip.octets();
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    None
}

fn v4_class(ip: Ipv4Addr) -> Option<Refusal> {
    let o = ip.octets();
    Some(match o {
        [0, ..] => Refusal::Unspecified,
        [127, ..] => Refusal::Loopback,
        [169, 254, ..] => Refusal::LinkLocal,
        [10, ..] => Refusal::Private,
        [172, b, ..] if (16..32).contains(&b) => Refusal::Private,
        [192, 168, ..] => Refusal::Private,
        [100, b, ..] if (64..128).contains(&b) => Refusal::Cgnat,
        [255, 255, 255, 255] => Refusal::Broadcast,
        [a, ..] if (224..240).contains(&a) => Refusal::Multicast,
        [a, ..] if a >= 240 => Refusal::Reserved,
        _ => return None,
    })
}

fn v6_class(ip: Ipv6Addr) -> Option<Refusal> {
    if let Some(v4) = embedded_v4(ip) {
        return v4_class(v4);
    }
    let s0 = ip.segments()[0];
    Some(if ip.is_unspecified() {
        Refusal::Unspecified
    } else if ip.is_loopback() {
        Refusal::Loopback
    } else if s0 & 0xffc0 == 0xfe80 {
        Refusal::LinkLocal
    } else if s0 & 0xffc0 == 0xfec0 {
        // Deprecated site-local: private by another name.
        Refusal::Private
    } else if s0 & 0xfe00 == 0xfc00 {
        Refusal::UniqueLocal
    } else if s0 & 0xff00 == 0xff00 {
        Refusal::Multicast
    } else {
        return None;
    })
}

/// The guard of one sandbox's proxy.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow_cidrs: Vec<Cidr>,
    node_addresses: Vec<IpAddr>,
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => embedded_v4(v6).map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

impl Guard {
    pub fn new(allow_cidrs: Vec<Cidr>, node_addresses: Vec<IpAddr>) -> Guard {
        Guard {
            allow_cidrs,
            node_addresses: node_addresses.into_iter().map(canonical).collect(),
        }
    }

    /// `Ok` with the `allow_cidrs` entry that admitted a refused-range address (for the audit),
    /// or `Ok(None)` for an ordinary public address.
    pub fn check(&self, ip: IpAddr) -> Result<Option<Cidr>, Refusal> {
        if let Some(c) = self.allowed_by_cidr(ip) {
            return Ok(Some(c));
        }
        let class = match ip {
            IpAddr::V4(v4) => v4_class(v4),
            IpAddr::V6(v6) => v6_class(v6),
        };
        if let Some(r) = class {
            return Err(r);
        }
        if self.node_addresses.contains(&canonical(ip)) {
            return Err(Refusal::NodeAddress);
        }
        Ok(None)
    }

    /// The `allow_cidrs` entry covering `ip`, if any.
    pub fn allowed_by_cidr(&self, ip: IpAddr) -> Option<Cidr> {
        self.allow_cidrs.iter().copied().find(|c| c.contains(ip))
    }
}

/// The node's own addresses (every interface of the host's network namespace), for
/// [`Guard::new`]. An empty list when they cannot be read is not fail-closed, so this returns
/// the error and the caller decides.
pub fn node_addresses() -> std::io::Result<Vec<IpAddr>> {
    let addrs = nix::ifaddrs::getifaddrs().map_err(std::io::Error::from)?;
    let mut out = Vec::new();
    for a in addrs {
        let Some(sa) = a.address else { continue };
        if let Some(v4) = sa.as_sockaddr_in() {
            out.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = sa.as_sockaddr_in6() {
            out.push(IpAddr::V6(v6.ip()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(cidrs: &[&str], node: &[&str]) -> Guard {
        Guard::new(
            cidrs.iter().map(|c| c.parse().unwrap()).collect(),
            node.iter().map(|a| a.parse().unwrap()).collect(),
        )
    }

    #[test]
    fn refused_ranges_are_refused_with_their_reason() {
        let g = guard(&[], &["203.0.113.7", "2001:db8::7"]);
        let cases = [
            ("0.0.0.0", Refusal::Unspecified),
            ("0.1.2.3", Refusal::Unspecified),
            ("127.0.0.1", Refusal::Loopback),
            ("127.255.0.9", Refusal::Loopback),
            ("169.254.169.254", Refusal::LinkLocal),
            ("169.254.0.1", Refusal::LinkLocal),
            ("10.0.0.1", Refusal::Private),
            ("172.16.0.1", Refusal::Private),
            ("172.31.255.255", Refusal::Private),
            ("192.168.1.1", Refusal::Private),
            ("100.64.0.1", Refusal::Cgnat),
            ("100.127.255.254", Refusal::Cgnat),
            ("224.0.0.1", Refusal::Multicast),
            ("239.255.255.250", Refusal::Multicast),
            ("255.255.255.255", Refusal::Broadcast),
            ("240.0.0.1", Refusal::Reserved),
            ("::", Refusal::Unspecified),
            ("::1", Refusal::Loopback),
            ("fe80::1", Refusal::LinkLocal),
            ("febf::1", Refusal::LinkLocal),
            ("fec0::1", Refusal::Private),
            ("fc00::1", Refusal::UniqueLocal),
            ("fd00:ec2::254", Refusal::UniqueLocal),
            ("ff02::1", Refusal::Multicast),
            ("::ffff:127.0.0.1", Refusal::Loopback),
            ("::ffff:169.254.169.254", Refusal::LinkLocal),
            ("::ffff:10.1.2.3", Refusal::Private),
            ("64:ff9b::a9fe:a9fe", Refusal::LinkLocal),
            ("64:ff9b::7f00:1", Refusal::Loopback),
            ("203.0.113.7", Refusal::NodeAddress),
            ("::ffff:203.0.113.7", Refusal::NodeAddress),
            ("2001:db8::7", Refusal::NodeAddress),
        ];
        for (ip, want) in cases {
            assert_eq!(g.check(ip.parse().unwrap()), Err(want), "{ip}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        let g = guard(&[], &["203.0.113.7"]);
        for ip in [
            // Documentation addresses (RFC 5737, RFC 3849) stand for the Internet here: the
            // guard classifies them like any public address.
            "198.51.100.1",
            "198.51.100.53",
            "172.32.0.1",
            "172.15.255.255",
            "100.128.0.1",
            "100.63.255.255",
            "192.169.0.1",
            "169.255.0.1",
            "2001:db8:1::1111",
            "::ffff:198.51.100.53",
            "203.0.113.8",
        ] {
            assert_eq!(g.check(ip.parse().unwrap()), Ok(None), "{ip}");
        }
    }

    #[test]
    fn allow_cidrs_admit_refused_ranges_and_say_which() {
        let g = guard(&["10.213.0.0/16", "127.0.0.1/32"], &["10.213.7.1"]);
        let c: Cidr = "10.213.0.0/16".parse().unwrap();
        assert_eq!(g.check("10.213.7.2".parse().unwrap()), Ok(Some(c)));
        assert_eq!(g.check("::ffff:10.213.7.2".parse().unwrap()), Ok(Some(c)));
        // allow_cidrs is the operator's explicit word, even for a node address.
        assert_eq!(g.check("10.213.7.1".parse().unwrap()), Ok(Some(c)));
        assert_eq!(
            g.check("10.214.0.1".parse().unwrap()),
            Err(Refusal::Private)
        );
        assert!(g.check("127.0.0.1".parse().unwrap()).is_ok());
        assert_eq!(
            g.check("127.0.0.2".parse().unwrap()),
            Err(Refusal::Loopback)
        );
    }

    #[test]
    fn node_addresses_can_be_read() {
        let addrs = node_addresses().unwrap();
        assert!(addrs.contains(&"127.0.0.1".parse().unwrap()), "{addrs:?}");
    }
}
