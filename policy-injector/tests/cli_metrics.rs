//! `policy-injector audit metrics` as a server, without Prometheus: concurrent scrapes all get
//! the whole exposition, and clients that send garbage, an endless head, or nothing at all get
//! an error or a deadline while everyone else is still served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use policy_injector::audit_chain::{self, Origin, Tail};

mod exporter;
use exporter::Killed;

/// Starts the exporter on a free loopback port over a log of `records` chained records.
fn exporter(dir: &std::path::Path, records: usize) -> (Killed, SocketAddr) {
    let path = dir.join("audit.jsonl");
    let origin = Origin {
        time: "2026-12-03T08:00:00.000Z",
        node: "n",
        policy_sha256: "",
    };
    let mut bytes: Vec<u8> = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    for i in 0..records {
        let tail = last.as_deref().map_or(Tail::Empty, Tail::Line);
        let rec = format!(
            r#"{{"time":"2026-12-03T08:00:00.000Z","event":"create","namespace":"default","container_id":"c{i}","policy":{{"path":"/p{}.toml","sha256":"","mode":"enforce"}},"oom":false,"timed_out":false,"process_limit_exceeded":false}}"#,
            i % 7
        );
        let out = audit_chain::compose(
            tail,
            audit_chain::next(tail, None),
            &origin,
            rec.as_bytes(),
            None,
        )
        .unwrap();
        bytes.extend_from_slice(&out.bytes);
        let body = bytes.strip_suffix(b"\n").unwrap();
        last = Some(body.rsplit(|c| *c == b'\n').next().unwrap().to_vec());
    }
    std::fs::write(&path, &bytes).unwrap();
    exporter::start(&path, &[])
}

/// Sends `request` raw and returns everything the server answers until it closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The server may answer (and stop reading) before a long request is all sent.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn scrape_until(addr: SocketAddr, want: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        if r.contains(want) {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never saw {want:?}: {r}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn concurrent_scrapes_all_get_the_whole_exposition() {
    let dir = tempfile::tempdir().unwrap();
    let (_exporter, addr) = exporter(dir.path(), 700);
    let want = "gvh_exporter_read_lines_total 701\n";
    scrape_until(addr, want);
    let scrapes: Vec<_> = (0..24)
        .map(|_| {
            std::thread::spawn(move || exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
        })
        .collect();
    for s in scrapes {
        let r = s.join().unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(body.len(), len);
        assert!(body.contains(want));
        assert!(body.contains("gvh_containers_created_total{policy=\"/p6.toml\"} 100\n"));
    }
}

#[test]
fn bad_requests_get_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (_exporter, addr) = exporter(dir.path(), 3);
    // Silent clients hold a connection until the deadline; others are served meanwhile.
    let silent: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
    assert!(exchange(addr, b"garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
    assert!(exchange(addr, b"\xff\xfe\r\n\r\n").starts_with("HTTP/1.1 400 "));
    assert!(exchange(addr, b"DELETE /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405 "));
    assert!(exchange(addr, b"GET /admin HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
    let endless = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n", "a".repeat(64 << 10));
    assert!(exchange(addr, endless.as_bytes()).starts_with("HTTP/1.1 431 "));
    // A client that closes halfway through its head gets nothing, and nothing breaks.
    drop(TcpStream::connect(addr).map(|mut s| s.write_all(b"GET /met")));
    let head = exchange(addr, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.ends_with("\r\n\r\n"), "{head}");
    scrape_until(addr, "gvh_audit_chain_intact 1\n");
    drop(silent);
}
