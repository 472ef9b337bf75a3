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
    /// A cloud metadata service outside link-local (Azure's 168.63.129.16).
    Metadata,
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
            Refusal::Metadata => "metadata",
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
            Refusal::Metadata => "a cloud metadata service address",
        })
    }
}

/// The IPv4 addresses an IPv6 address stands for, which a translator or tunnel on the way would
/// deliver to: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated), the
/// NAT64 well-known prefix (`64:ff9b::/96`) and local-use prefix (`64:ff9b:1::/48`, RFC 6052's
/// /48 layout), 6to4 (`2002:AABB:CCDD::/48`) and Teredo (`2001:0::/32`: its server, and its
/// client with the bits inverted). Each is classified like the IPv4 address itself.
pub fn embedded_v4s(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let o = ip.octets();
    let s = ip.segments();
    let v4 = |a: u8, b: u8, c: u8, d: u8| Ipv4Addr::new(a, b, c, d);
    if let Some(v4) = ip.to_ipv4_mapped() {
        return vec![v4];
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && s[6] != 0 {
        // IPv4-compatible; `::` and `::1` (s[6] == 0) are the unspecified and loopback addresses.
        return vec![v4(o[12], o[13], o[14], o[15])];
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return vec![v4(o[12], o[13], o[14], o[15])];
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        // /48: octets 6-7 hold the first two, octet 8 is the reserved "u" byte, 9-10 the rest.
        return vec![v4(o[6], o[7], o[9], o[10])];
    }
    if s[0] == 0x2002 {
        return vec![v4(o[2], o[3], o[4], o[5])];
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return vec![
            v4(o[4], o[5], o[6], o[7]),
            v4(!o[12], !o[13], !o[14], !o[15]),
        ];
    }
    Vec::new()
}

/// The one IPv4 address an IPv6 address is another spelling of (mapped, compatible, NAT64), for
/// comparing with the node's own addresses. Tunnels (6to4, Teredo) reach other hosts.
pub fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    match embedded_v4s(ip).as_slice() {
        [one] if s[0] != 0x2002 => Some(*one),
        _ => None,
    }
}

/// Metadata services reachable outside 169.254.0.0/16: Azure's WireServer (168.63.129.16),
/// which hands out VM extensions' settings and keys to whoever asks from the VM.
const METADATA_V4: &[Ipv4Addr] = &[Ipv4Addr::new(168, 63, 129, 16)];

fn v4_class(ip: Ipv4Addr) -> Option<Refusal> {
    if METADATA_V4.contains(&ip) {
        return Some(Refusal::Metadata);
    }
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
    let embedded = embedded_v4s(ip);
    if !embedded.is_empty() {
        return embedded.into_iter().find_map(v4_class);
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
            ("168.63.129.16", Refusal::Metadata),
            ("::ffff:168.63.129.16", Refusal::Metadata),
            // IPv4 inside IPv6: IPv4-compatible, NAT64 local-use /48, 6to4, Teredo (server, and
            // client with inverted bits).
            ("::a9fe:a9fe", Refusal::LinkLocal),
            ("::10.0.0.1", Refusal::Private),
            ("64:ff9b:1:a9fe:00a9:fe00::", Refusal::LinkLocal),
            ("64:ff9b:1:7f00:0001::", Refusal::Loopback),
            ("2002:a9fe:a9fe::1", Refusal::LinkLocal),
            ("2002:0a00:0001::", Refusal::Private),
            ("2002:7f00:1::", Refusal::Loopback),
            ("2001:0:a9fe:a9fe::1", Refusal::LinkLocal),
            ("2001:0:c633:6401::f5ff:fffe", Refusal::Private),
            ("64:ff9b::a83f:8110", Refusal::Metadata),
            ("203.0.113.7", Refusal::NodeAddress),
            ("::ffff:203.0.113.7", Refusal::NodeAddress),
            ("::cb00:7107", Refusal::NodeAddress),
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
            "64:ff9b::c633:6435",
            "64:ff9b:1:c633:0064:3500::",
            "2002:c633:6401::1",
            "2001:0:c633:6401::3acc:9bca",
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
