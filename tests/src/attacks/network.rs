//! Network attacks: reaching outside, the host and its loopback, DNS, raw and packet sockets,
//! a privileged port. The default policy runs runsc with `--network=none`: the sandbox has
//! gVisor's own loopback and nothing else.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::Duration;

use super::filesystem::probe_errno;
use super::lab::{Job, Lab};
use super::{ensure, wait_for, Attack, Category, Failed, Outcome};
use crate::inspect;
use crate::probe::ProbeLine;

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Network,
        expected,
        run,
    };
    vec![
        a("connect to an outside address (1.1.1.1:80)", "EHOSTUNREACH", outside),
        a("connect to the host's own address", "EHOSTUNREACH; the host listener sees nothing", host_address),
        a("connect to a service on the host's loopback", "ECONNREFUSED (the sandbox's own loopback); host listener sees nothing", host_loopback),
        a("DNS lookup (8.8.8.8 and the default resolver)", "fails: no route / refused; nothing resolved", dns),
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

fn outside(lab: &Lab) -> Outcome {
    probe_errno(
        lab,
        "net-out",
        &["connect", "1.1.1.1", "80", "2000"],
        "EHOSTUNREACH",
    )
}

/// The host's first non-loopback IPv4 address.
fn host_ipv4() -> Result<Ipv4Addr, Failed> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, released below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Err(Failed("getifaddrs failed".into()));
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: `cur` walks the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null()
            // SAFETY: ifa_addr is non-null and points to a sockaddr.
            && i32::from(unsafe { (*ifa.ifa_addr).sa_family }) == libc::AF_INET
        {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            if !ip.is_loopback() {
                found = Some(ip);
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
    found.ok_or_else(|| Failed("the host has no IPv4 address besides loopback".into()))
}

/// A host listener, and whether anything connected to it.
pub(crate) struct Listener(TcpListener);

impl Listener {
    pub(crate) fn bind(addr: &str) -> Result<Listener, Failed> {
        let l = TcpListener::bind(addr).map_err(|e| Failed(format!("bind {addr}: {e}")))?;
        l.set_nonblocking(true)
            .map_err(|e| Failed(format!("nonblocking: {e}")))?;
        Ok(Listener(l))
    }

    pub(crate) fn port(&self) -> u16 {
        self.0.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    pub(crate) fn untouched(&self) -> bool {
        matches!(self.0.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }
}

fn host_address(lab: &Lab) -> Outcome {
    let ip = host_ipv4()?;
    let listener = Listener::bind("0.0.0.0:0")?;
    let port = listener.port().to_string();
    let ran = lab.run(Job::probe(
        "net-hostip",
        &["connect", &ip.to_string(), &port, "2000"],
    ))?;
    let line = ran.line()?;
    ensure(line.errno() == Some("EHOSTUNREACH"), || {
        format!("expected EHOSTUNREACH: {}", ran.summary())
    })?;
    ensure(listener.untouched(), || {
        "the host listener accepted a connection".into()
    })?;
    Ok(format!(
        "{ip}:{port}: EHOSTUNREACH; host listener untouched"
    ))
}

fn host_loopback(lab: &Lab) -> Outcome {
    let listener = Listener::bind("127.0.0.1:0")?;
    let port = listener.port().to_string();
    let ran = lab.run(Job::probe(
        "net-hostlo",
        &["connect", "127.0.0.1", &port, "2000"],
    ))?;
    let line = ran.line()?;
    ensure(line.errno() == Some("ECONNREFUSED"), || {
        format!("expected ECONNREFUSED: {}", ran.summary())
    })?;
    ensure(listener.untouched(), || {
        "the host listener accepted a connection".into()
    })?;
    Ok(format!(
        "127.0.0.1:{port}: ECONNREFUSED; host listener untouched"
    ))
}

fn dns(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::sh(
        "net-dns",
        "nslookup example.com 8.8.8.8; echo \"ok status=$?\"; nslookup example.com; echo \"ok status=$?\"",
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
        all.contains("No route to host") && all.contains("Connection refused"),
        || format!("unexpected failure: {}", ran.summary()),
    )?;
    Ok("8.8.8.8: No route to host; default (127.0.0.1): Connection refused".into())
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

fn ip(args: &[&str]) -> Result<(), Failed> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| Failed(format!("ip {}: {e}", args.join(" "))))?;
    ensure(out.status.success(), || {
        format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// A network namespace like the ones CNI makes for pods (/run/netns/<name>), with an interface
/// and an address, standing in for another pod's network.
fn foreign_netns(lab: &Lab) -> Outcome {
    let name = format!("gvh-victim-{}", crate::ids::random_hex(4));
    ip(&["netns", "add", &name])?;
    let result = (|| {
        ip(&[
            "-n", &name, "link", "add", "gvh0", "type", "veth", "peer", "name", "gvh1",
        ])?;
        ip(&["-n", &name, "addr", "add", "10.213.7.1/24", "dev", "gvh0"])?;
        ip(&["-n", &name, "link", "set", "gvh0", "up"])?;
        let ran = lab.run(
            Job::probes("net-podns", &["ifaces", "connect 10.213.7.1 80 2000"])
                .flags(["--with-ns", &format!("network:/run/netns/{name}")]),
        )?;
        let l = ran.probe_lines(2)?;
        ensure(l[0].field("ifaces") == Some("lo"), || {
            format!("interfaces: {}", ran.summary())
        })?;
        ensure(l[1].errno() == Some("EHOSTUNREACH"), || {
            format!("connect into the namespace's network: {}", ran.summary())
        })?;
        Ok("accepted (path on namespaces.allowed_paths); inside: ifaces=lo; 10.213.7.1 (the namespace's address): EHOSTUNREACH".to_string())
    })();
    ip(&["netns", "del", &name])?;
    result
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
