//! Network attacks: reaching another network, the host and its loopback, DNS, raw and packet
//! sockets, a privileged port. The default policy runs runsc with `--network=none`: the sandbox
//! has gVisor's own loopback and nothing else.
//!
//! Every target is a live server the attack started itself (see [`crate::netns`]): a listener
//! on the host's loopback, and listeners in a network namespace joined to the host by a veth
//! pair, each reached from the host first. Nothing is sent anywhere else.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::Duration;

use super::filesystem::probe_errno;
use super::lab::{Job, Lab};
use super::{ensure, wait_for, Attack, Category, Failed, Outcome};
use crate::inspect;
use crate::netns::{LoopbackTarget, TestNetns};
use crate::probe::ProbeLine;

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Network,
        expected,
        run,
    };
    vec![
        a("connect to a live server on another network (a test netns over a veth)", "no route (EHOSTUNREACH/ENETUNREACH); the server sees nothing", outside),
        a("connect to the host's own address (its end of a test veth)", "no route (EHOSTUNREACH/ENETUNREACH); the host listener sees nothing", host_address),
        a("connect to a service on the host's loopback", "ECONNREFUSED (the sandbox's own loopback); host listener sees nothing", host_loopback),
        a("DNS lookup (a live UDP :53 recorder on a test netns, and the default resolver)", "fails: no route / refused; no query arrives; nothing resolved", dns),
        a("open a raw socket", "EPERM", raw_socket),
        a("open a packet socket", "EPERM", packet_socket),
        a("list network interfaces", "only lo", interfaces),
        a(
            "join another pod's network namespace (/run/netns/...)",
            "neutralised: allowed path, but runsc --network=none uses none of its interfaces: only lo, its address unreachable",
            foreign_netns,
        ),
        a(
            "bind and listen on privileged port 80",
            "neutralised: binds inside gVisor's netstack; unreachable from the host (root netns and the sandbox's netns) and from another sandbox",
            privileged_port,
        ),
    ]
}

/// The probe's `connect` arguments for `addr`.
fn connect_args(addr: SocketAddr) -> [String; 4] {
    [
        "connect".into(),
        addr.ip().to_string(),
        addr.port().to_string(),
        "2000".into(),
    ]
}

/// What [`connect_fails`] expects for "no route": either runsc's (crate::stack).
const NO_ROUTE: &str = "EHOSTUNREACH/ENETUNREACH";

/// Runs the probe's connect to `addr` (a live target, reachable from the host) and expects
/// `errno` and an untouched target.
fn connect_fails(
    lab: &Lab,
    prefix: &'static str,
    addr: SocketAddr,
    errno: &str,
    untouched: impl Fn() -> bool,
) -> Outcome {
    let args = connect_args(addr);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = lab.run(Job::probe(prefix, &args))?;
    let line = ran.line()?;
    let matches = if errno == NO_ROUTE {
        crate::stack::is_no_route(line.errno())
    } else {
        line.errno() == Some(errno)
    };
    ensure(matches, || format!("expected {errno}: {}", ran.summary()))?;
    ensure(untouched(), || {
        format!("the target {addr} accepted a connection")
    })?;
    Ok(format!(
        "{addr} (live, reached from the host first): {errno}; target untouched"
    ))
}

fn test_netns() -> Result<TestNetns, Failed> {
    TestNetns::create().map_err(|e| Failed(format!("test network: {e}")))
}

fn outside(lab: &Lab) -> Outcome {
    let net = test_netns()?;
    connect_fails(lab, "net-out", net.ns_tcp(), NO_ROUTE, || {
        net.ns_tcp_untouched()
    })
}

/// The host's address on a veth the attack made: as much "the host's own address" as its
/// primary one, and owned by the test.
fn host_address(lab: &Lab) -> Outcome {
    let net = test_netns()?;
    connect_fails(lab, "net-hostip", net.host_tcp(), NO_ROUTE, || {
        net.host_tcp_untouched()
    })
}

fn host_loopback(lab: &Lab) -> Outcome {
    let target = LoopbackTarget::start().map_err(|e| Failed(format!("loopback target: {e}")))?;
    connect_fails(lab, "net-hostlo", target.addr(), "ECONNREFUSED", || {
        target.untouched()
    })
}

fn dns(lab: &Lab) -> Outcome {
    let net = test_netns()?;
    let server = net.ns_ip();
    let ran = lab.run(Job::sh(
        "net-dns",
        &format!(
            "nslookup gvh-dns-probe.test {server}; echo \"ok status=$?\"; nslookup gvh-dns-probe.test; echo \"ok status=$?\""
        ),
    ))?;
    let all = format!("{}{}", ran.out.stdout, ran.out.stderr);
    let statuses: Vec<&str> = ran
        .out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("ok status="))
        .collect();
    ensure(statuses == ["1", "1"], || {
        format!("a lookup succeeded: {}", ran.summary())
    })?;
    ensure(!all.contains("Name:"), || {
        format!("a name resolved: {}", ran.summary())
    })?;
    ensure(
        crate::stack::mentions_no_route(&all) && all.contains("Connection refused"),
        || format!("unexpected failure: {}", ran.summary()),
    )?;
    let arrived = net.datagrams();
    ensure(arrived.is_empty(), || {
        format!(
            "{} queries reached the recorder at {}",
            arrived.len(),
            net.dns()
        )
    })?;
    Ok(format!(
        "{} (live recorder, a host datagram reached it first): no route, no query arrived; default (127.0.0.1): Connection refused",
        net.dns()
    ))
}

fn raw_socket(lab: &Lab) -> Outcome {
    probe_errno(lab, "net-raw", &["socket-raw"], "EPERM")
}

fn packet_socket(lab: &Lab) -> Outcome {
    probe_errno(lab, "net-packet", &["socket-packet"], "EPERM")
}

fn interfaces(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probe("net-ifaces", &["ifaces"]))?;
    let line = ran.line()?;
    ensure(line.field("ifaces") == Some("lo"), || {
        format!("expected only lo: {}", ran.summary())
    })?;
    Ok("ifaces=lo".into())
}

/// A network namespace like the ones CNI makes for pods (/run/netns/<name>), with a veth, an
/// address and a live server on it, standing in for another pod's network.
fn foreign_netns(lab: &Lab) -> Outcome {
    let net = test_netns()?;
    let target = net.ns_tcp();
    let ran = lab.run(
        Job::probes(
            "net-podns",
            &[
                "ifaces",
                &format!("connect {} {} 2000", target.ip(), target.port()),
            ],
        )
        .flags(["--with-ns", &format!("network:{}", net.path().display())]),
    )?;
    let l = ran.probe_lines(2)?;
    ensure(l[0].field("ifaces") == Some("lo"), || {
        format!("interfaces: {}", ran.summary())
    })?;
    ensure(crate::stack::is_no_route(l[1].errno()), || {
        format!("connect into the namespace's network: {}", ran.summary())
    })?;
    ensure(net.ns_tcp_untouched(), || {
        format!("the namespace's server {target} accepted a connection")
    })?;
    Ok(format!("accepted (path on namespaces.allowed_paths); inside: ifaces=lo; {target} (the namespace's live server): no route, untouched"))
}

/// Host sockets listening on `port` in the network namespace whose /proc/<pid>/net is `net`.
fn listeners(net: &str, port: u16) -> Vec<String> {
    let hex = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .flat_map(|f| {
            fs::read_to_string(format!("{net}/{f}"))
                .unwrap_or_default()
                .lines()
                .skip(1)
                .filter(|l| {
                    let cols: Vec<&str> = l.split_whitespace().collect();
                    cols.len() > 3 && cols[1].ends_with(&hex) && cols[3] == "0A"
                })
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Connects to 127.0.0.1:`port` from inside the network namespace of `pid`.
fn connect_in_netns(pid: i32, port: u16) -> Result<std::io::Result<()>, Failed> {
    let ns = File::open(format!("/proc/{pid}/ns/net"))
        .map_err(|e| Failed(format!("netns of {pid}: {e}")))?;
    // setns(CLONE_NEWNET) changes only the calling thread: a thread of its own, then gone.
    thread::spawn(move || {
        // SAFETY: setns on an open namespace fd, for this thread only.
        if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map(drop)
    })
    .join()
    .map_err(|_| Failed("the netns thread panicked".into()))
}

fn privileged_port(lab: &Lab) -> Outcome {
    let host_before = listeners("/proc/self/net", 80);
    let id = lab.start_detached(Job::probe("net-bind80", &["listen", "80", "300"]))?;
    let result = (|| {
        // Positive control: the port is open inside the sandbox.
        let inside = wait_for(
            "port 80 to accept inside the sandbox",
            Duration::from_secs(15),
            || {
                let out = lab
                    .exec(
                        &id,
                        &[],
                        &["/bin/sandbox-probe", "connect", "127.0.0.1", "80", "1000"],
                    )
                    .ok()?;
                out.stdout.starts_with("ok").then_some(out)
            },
        )?;
        let _ = inside;
        let host_now = listeners("/proc/self/net", 80);
        ensure(host_now == host_before, || {
            format!("a listener on port 80 appeared in the host's network namespace: {host_now:?}")
        })?;
        let sandbox = inspect::processes_mentioning(&id)
            .into_iter()
            .find(|p| p.cmdline.starts_with("runsc-sandbox"))
            .ok_or_else(|| Failed(format!("no runsc-sandbox process for {id}")))?;
        let in_sandbox_netns = listeners(&format!("/proc/{}/net", sandbox.pid), 80);
        ensure(in_sandbox_netns.is_empty(), || {
            format!("port 80 listens in the sandbox's host netns: {in_sandbox_netns:?}")
        })?;
        // runsc gives the sandbox a network namespace of its own with loopback down (measured
        // on 20221219: ENETUNREACH); with loopback up nothing listens there either.
        let from_netns = connect_in_netns(sandbox.pid, 80)?;
        let netns_errno = match &from_netns {
            Err(e) if e.kind() == ErrorKind::NetworkUnreachable => "ENETUNREACH",
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => "ECONNREFUSED",
            other => {
                return Err(Failed(format!(
                    "connect from the sandbox's host netns: {other:?}"
                )))
            }
        };
        let other = lab.run(Job::probe(
            "net-other",
            &["connect", "127.0.0.1", "80", "2000"],
        ))?;
        let other_line: ProbeLine = other.line()?;
        ensure(other_line.errno() == Some("ECONNREFUSED"), || {
            format!("another sandbox reached it: {}", other.summary())
        })?;
        Ok(format!("bind+listen ok inside (connect from inside ok); host netns: no listener; sandbox's host netns: {netns_errno}; other sandbox: ECONNREFUSED"))
    })();
    lab.remove(&id)?;
    result
}
