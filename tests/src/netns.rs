//! Network targets a test owns, so that "not reachable from the sandbox" is always shown against
//! a live server and never sends a packet anywhere the test did not create.
//!
//! - [`LoopbackTarget`]: a TCP listener on the host's 127.0.0.1 (ephemeral port).
//! - [`TestNetns`]: a network namespace of the test's own (`/run/netns/gvh-net-<hex>`), joined
//!   to the host by a veth pair on a /30 of [`RANGE`] picked so no other interface on the host
//!   uses it, with a TCP listener and a UDP "DNS" recorder (port 53) inside, and a TCP listener
//!   on the host's end of the pair.
//!
//! Every target is verified from the host before it is handed out (a TCP connect is accepted,
//! a datagram arrives) and those control contacts are consumed, so `untouched()` and
//! `datagrams()` afterwards see only what the sandbox did. Drop closes the sockets, deletes the
//! host end of the veth (which takes its peer along) and the namespace, also when the test
//! panicked. Names and subnets are unique per instance: tests run in parallel, and several
//! test processes on one machine coordinate through a lock file.
//!
//! The sockets inside the namespace are created by a thread that `setns`es into it and exits:
//! a socket stays in the namespace it was made in. No process runs in the namespace, and runsc
//! is never started under `ip netns exec` (which remounts /sys and breaks runsc's cgroups).

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::Duration;

use crate::error::{HarnessError, Result};
use crate::ids::random_hex;
use crate::poll::poll_until;
use crate::process::output_with_deadline;

/// The private range test namespaces take their /30 from. Nothing else on the build machines
/// uses it (the CRI harness's pods are in 10.128.0.0/10); [`TestNetns::create`] checks anyway.
pub const RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 213, 0, 0), 16);

/// Serialises subnet choice between test processes (each checks `ip -4 addr`, then adds).
const LOCK_FILE: &str = "/run/gvisor-hardened-tests-netns.lock";

/// How long a verification from the host may take.
const VERIFY: Duration = Duration::from_secs(5);

fn net_err(what: impl Into<String>) -> HarnessError {
    HarnessError::Network(what.into())
}

fn ip(args: &[&str]) -> Result<()> {
    let mut cmd = Command::new("ip");
    cmd.args(args);
    output_with_deadline(&mut cmd, None, Duration::from_secs(30))?.checked()?;
    Ok(())
}

fn nonblocking_tcp(l: TcpListener) -> Result<TcpListener> {
    l.set_nonblocking(true)
        .map_err(|e| net_err(format!("nonblocking listener: {e}")))?;
    Ok(l)
}

/// Whether anything is waiting to be accepted on a non-blocking listener (accepting it).
fn accepted(l: &TcpListener) -> bool {
    !matches!(l.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// Connects from the host (root network namespace) and waits until the listener accepted that
/// connection: the target is live and reachable, and its backlog is empty again.
fn verify_tcp(l: &TcpListener, addr: SocketAddr) -> Result<()> {
    let stream = TcpStream::connect_timeout(&addr, VERIFY)
        .map_err(|e| net_err(format!("{addr} not reachable from the host: {e}")))?;
    poll_until(
        &format!("{addr} to accept the host's connection"),
        VERIFY,
        || accepted(l).then_some(()),
    )?;
    drop(stream);
    Ok(())
}

/// Claims a block of `2^block_bits` addresses of `range` (one of the blocks numbered `blocks`)
/// that no host interface has an address in, and returns its first address. Under
/// [`LOCK_FILE`], so tests in other processes cannot pick the same block: `assign` must put an
/// address of the block on a host interface before the lock is released, which is what the
/// next caller's `ip -4 addr` then sees. Two namespaces whose host ends share an address would
/// not fail: the host routes to one of them, and a test aimed at the other talks to the wrong
/// server.
pub(crate) fn claim_free_block(
    range: (Ipv4Addr, u8),
    block_bits: u8,
    blocks: std::ops::Range<u32>,
    assign: impl FnOnce(Ipv4Addr) -> Result<()>,
) -> Result<Ipv4Addr> {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .map_err(|e| HarnessError::io("opening", LOCK_FILE, e))?;
    // SAFETY: flock on an open descriptor; released when `lock` is closed below.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(HarnessError::io(
            "locking",
            LOCK_FILE,
            std::io::Error::last_os_error(),
        ));
    }
    let mut cmd = Command::new("ip");
    cmd.args(["-4", "-o", "addr", "show"]);
    let taken = output_with_deadline(&mut cmd, None, Duration::from_secs(30))?.checked()?;
    let used: Vec<u32> = taken
        .stdout
        .split_whitespace()
        .filter_map(|w| w.split('/').next()?.parse::<Ipv4Addr>().ok())
        .map(u32::from)
        .collect();
    let base = u32::from(range.0);
    let mask = !((1u32 << block_bits) - 1);
    let count = blocks.end.saturating_sub(blocks.start).max(1);
    let start = u32::from_str_radix(&random_hex(2), 16).unwrap_or(0) % count;
    let free = (0..count)
        .map(|i| base + (blocks.start + (start + i) % count) * (1 << block_bits))
        .find(|block| !used.iter().any(|a| a & mask == *block))
        .ok_or_else(|| net_err(format!("no free block left in {}/{}", range.0, range.1)))?;
    assign(Ipv4Addr::from(free))?;
    drop(lock);
    Ok(Ipv4Addr::from(free))
}

/// A TCP listener on 127.0.0.1, reachable from the host (verified).
pub struct LoopbackTarget {
    listener: TcpListener,
    addr: SocketAddr,
}

impl LoopbackTarget {
    pub fn start() -> Result<LoopbackTarget> {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| net_err(format!("bind 127.0.0.1:0: {e}")))?;
        let listener = nonblocking_tcp(listener)?;
        let addr = listener
            .local_addr()
            .map_err(|e| net_err(format!("local_addr: {e}")))?;
        verify_tcp(&listener, addr)?;
        Ok(LoopbackTarget { listener, addr })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// No connection arrived since the verification.
    pub fn untouched(&self) -> bool {
        !accepted(&self.listener)
    }
}

/// A network namespace with a veth pair to the host and live listeners on both ends.
pub struct TestNetns {
    name: String,
    host_if: String,
    host_ip: Ipv4Addr,
    ns_ip: Ipv4Addr,
    ns_tcp: Option<TcpListener>,
    ns_dns: Option<UdpSocket>,
    host_tcp: Option<TcpListener>,
    /// Whether `ip netns add` succeeded (what Drop must undo).
    created: bool,
}

impl TestNetns {
    /// Creates the namespace, the veth pair and the listeners, and verifies each from the host.
    pub fn create() -> Result<TestNetns> {
        let hex = random_hex(3);
        let mut net = TestNetns {
            name: format!("gvh-net-{hex}"),
            host_if: format!("gvhh{hex}"),
            host_ip: Ipv4Addr::UNSPECIFIED,
            ns_ip: Ipv4Addr::UNSPECIFIED,
            ns_tcp: None,
            ns_dns: None,
            host_tcp: None,
            created: false,
        };
        ip(&["netns", "add", &net.name])?;
        net.created = true;
        let ns_if = format!("gvhn{hex}");
        ip(&[
            "link",
            "add",
            &net.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns_if,
            "netns",
            &net.name,
        ])?;
        net.address()?;
        ip(&["link", "set", &net.host_if, "up"])?;
        let ns_cidr = format!("{}/30", net.ns_ip);
        ip(&["-n", &net.name, "addr", "add", &ns_cidr, "dev", &ns_if])?;
        ip(&["-n", &net.name, "link", "set", &ns_if, "up"])?;
        ip(&["-n", &net.name, "link", "set", "lo", "up"])?;

        let (tcp, dns) = net.sockets_inside()?;
        let host_tcp = nonblocking_tcp(
            TcpListener::bind((net.host_ip, 0))
                .map_err(|e| net_err(format!("bind {}:0: {e}", net.host_ip)))?,
        )?;
        net.ns_tcp = Some(tcp);
        net.ns_dns = Some(dns);
        net.host_tcp = Some(host_tcp);
        net.verify()?;
        Ok(net)
    }

    /// Picks a free /30 of [`RANGE`] and gives the host end its first address.
    fn address(&mut self) -> Result<()> {
        let subnets = 1u32 << (32 - RANGE.1 - 2);
        let host_if = self.host_if.clone();
        let free = claim_free_block(RANGE, 2, 0..subnets, |net| {
            let host = Ipv4Addr::from(u32::from(net) + 1);
            ip(&["addr", "add", &format!("{host}/30"), "dev", &host_if])
        })?;
        self.host_ip = Ipv4Addr::from(u32::from(free) + 1);
        self.ns_ip = Ipv4Addr::from(u32::from(free) + 2);
        Ok(())
    }

    /// The TCP listener and the UDP recorder, made by a thread inside the namespace.
    fn sockets_inside(&self) -> Result<(TcpListener, UdpSocket)> {
        let path = self.path();
        let ns = File::open(&path).map_err(|e| HarnessError::io("opening", &path, e))?;
        let ip = self.ns_ip;
        // setns(CLONE_NEWNET) changes only the calling thread: a thread of its own, then gone.
        thread::spawn(move || -> std::io::Result<(TcpListener, UdpSocket)> {
            // SAFETY: setns on an open namespace fd, for this thread only.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let tcp = TcpListener::bind((ip, 0))?;
            let dns = UdpSocket::bind((ip, 53))?;
            Ok((tcp, dns))
        })
        .join()
        .map_err(|_| net_err("the namespace thread panicked"))?
        .map_err(|e| net_err(format!("sockets inside {}: {e}", self.name)))
        .and_then(|(tcp, dns)| {
            dns.set_nonblocking(true)
                .map_err(|e| net_err(format!("nonblocking udp: {e}")))?;
            Ok((nonblocking_tcp(tcp)?, dns))
        })
    }

    /// From the host: both listeners accept, and a datagram reaches the recorder.
    fn verify(&self) -> Result<()> {
        verify_tcp(self.tcp_listener(), self.ns_tcp())?;
        verify_tcp(self.host_listener(), self.host_tcp())?;
        let probe = format!("gvh-verify-{}", random_hex(4));
        let sender =
            UdpSocket::bind(("0.0.0.0", 0)).map_err(|e| net_err(format!("udp bind: {e}")))?;
        sender
            .send_to(probe.as_bytes(), self.dns())
            .map_err(|e| net_err(format!("{} not reachable from the host: {e}", self.dns())))?;
        poll_until(
            &format!("the host's datagram to reach {}", self.dns()),
            VERIFY,
            || {
                self.datagrams()
                    .iter()
                    .any(|d| d.as_slice() == probe.as_bytes())
                    .then_some(())
            },
        )?;
        Ok(())
    }

    fn tcp_listener(&self) -> &TcpListener {
        self.ns_tcp.as_ref().expect("set in create")
    }

    fn host_listener(&self) -> &TcpListener {
        self.host_tcp.as_ref().expect("set in create")
    }

    /// `/run/netns/<name>`, for `--with-ns network:<path>` or `nsenter --net=<path>`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The namespace's own address (its end of the veth).
    pub fn ns_ip(&self) -> Ipv4Addr {
        self.ns_ip
    }

    /// The host's address on the veth: an address of the host, on an interface the test made.
    pub fn host_ip(&self) -> Ipv4Addr {
        self.host_ip
    }

    /// The TCP listener inside the namespace.
    pub fn ns_tcp(&self) -> SocketAddr {
        self.tcp_listener()
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::V4(SocketAddrV4::new(self.ns_ip, 0)))
    }

    /// The TCP listener on the host's end of the veth.
    pub fn host_tcp(&self) -> SocketAddr {
        self.host_listener()
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::V4(SocketAddrV4::new(self.host_ip, 0)))
    }

    /// The UDP recorder inside the namespace, on port 53 (a DNS server's address).
    pub fn dns(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.ns_ip, 53))
    }

    /// No connection reached the namespace's TCP listener since the verification.
    pub fn ns_tcp_untouched(&self) -> bool {
        !accepted(self.tcp_listener())
    }

    /// No connection reached the host end's TCP listener since the verification.
    pub fn host_tcp_untouched(&self) -> bool {
        !accepted(self.host_listener())
    }

    /// The datagrams that reached the recorder since the last call (the verification's own
    /// is consumed by `create`).
    pub fn datagrams(&self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 1500];
        if let Some(sock) = &self.ns_dns {
            while let Ok(n) = sock.recv(&mut buf) {
                out.push(buf[..n].to_vec());
            }
        }
        out
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        // The sockets hold the namespace alive: close them before deleting it.
        self.ns_tcp = None;
        self.ns_dns = None;
        self.host_tcp = None;
        if link_exists(&self.host_if) {
            // Deleting one end of a veth deletes both.
            if let Err(e) = ip(&["link", "del", &self.host_if]) {
                eprintln!("netns cleanup: {e}");
            }
        }
        if self.created {
            if let Err(e) = ip(&["netns", "del", &self.name]) {
                eprintln!("netns cleanup: {e}");
            }
        }
    }
}

fn link_exists(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

#[cfg(test)]
mod tests;
