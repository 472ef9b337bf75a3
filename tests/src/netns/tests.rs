use super::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

fn addr_assigned(ip: Ipv4Addr) -> bool {
    let mut cmd = Command::new("ip");
    cmd.args(["-4", "-o", "addr", "show"]);
    let out = output_with_deadline(&mut cmd, None, Duration::from_secs(30)).unwrap();
    out.stdout.contains(&format!("inet {ip}/30"))
}

#[test]
fn loopback_target_notices_a_connection() {
    let t = LoopbackTarget::start().unwrap();
    assert!(t.addr().ip().is_loopback());
    assert!(t.untouched());
    let _c = TcpStream::connect(t.addr()).unwrap();
    poll_until("the connection to be pending", VERIFY, || {
        (!t.untouched()).then_some(())
    })
    .unwrap();
}

#[test]
fn netns_targets_are_live_from_the_host_and_record_what_arrives() {
    let net = TestNetns::create().unwrap();
    assert!(net.path().exists());
    assert!(in_range(net.ns_ip()) && in_range(net.host_ip()));
    assert_eq!(u32::from(net.ns_ip()), u32::from(net.host_ip()) + 1);
    assert!(net.ns_tcp_untouched() && net.host_tcp_untouched());
    assert!(
        net.datagrams().is_empty(),
        "the verification's datagram was consumed"
    );

    let _c = TcpStream::connect_timeout(&net.ns_tcp(), VERIFY).unwrap();
    poll_until("the netns listener to see it", VERIFY, || {
        (!net.ns_tcp_untouched()).then_some(())
    })
    .unwrap();
    let s = UdpSocket::bind(("0.0.0.0", 0)).unwrap();
    s.send_to(b"query", net.dns()).unwrap();
    let got = poll_until("the datagram", VERIFY, || {
        let d = net.datagrams();
        (!d.is_empty()).then_some(d)
    })
    .unwrap();
    assert_eq!(got, vec![b"query".to_vec()]);
}

fn in_range(ip: Ipv4Addr) -> bool {
    u32::from(ip) >> 16 == u32::from(RANGE.0) >> 16
}

#[test]
fn parallel_namespaces_get_their_own_names_and_subnets() {
    let nets: Vec<TestNetns> = thread::scope(|s| {
        let handles: Vec<_> = (0..4).map(|_| s.spawn(TestNetns::create)).collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    let mut names: Vec<&str> = nets.iter().map(|n| n.name()).collect();
    let mut subnets: Vec<u32> = nets.iter().map(|n| u32::from(n.host_ip()) & !3).collect();
    names.sort();
    names.dedup();
    subnets.sort();
    subnets.dedup();
    assert_eq!((names.len(), subnets.len()), (4, 4));
}

#[test]
fn everything_is_removed_on_drop_also_after_a_panic() {
    let mut seen = None;
    let r = catch_unwind(AssertUnwindSafe(|| {
        let net = TestNetns::create().unwrap();
        seen = Some((net.path(), net.host_if.clone(), net.host_ip()));
        panic!("a failing test");
    }));
    assert!(r.is_err());
    let (path, link, ip) = seen.unwrap();
    assert!(!path.exists(), "{} left", path.display());
    assert!(
        !Path::new("/sys/class/net").join(&link).exists(),
        "{link} left"
    );
    assert!(!addr_assigned(ip), "{ip} still assigned");
}
