//! The supervisor, mux and proxy together, against an in-process fake forwarder (the framing
//! codec over in-memory pipes), a fake resolver and a dialer that lands on real loopback
//! upstreams. The real forwarder under real runsc is tested in
//! `tests/tests/integration/egress_runsc.rs`.

mod credentials;
pub(crate) mod fakes;

use std::time::Duration;

use gvisor_hardened_forwarder::{Frame, INITIAL_WINDOW};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::audit::{EgressEvent, LookupSource, Verdict};
use super::proxy::Timeouts;
use super::supervisor::ForwarderState;
use fakes::*;

#[tokio::test]
async fn an_allowed_tunnel_carries_bytes_both_ways_and_is_audited() {
    let up = Upstream::echo_upper().await;
    let mut w = World::new(&policy(&[]), &up).await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    let head = f.read_until(1, b"\r\n\r\n").await;
    assert_eq!(head, b"HTTP/1.1 200 Connection established\r\n\r\n");
    f.data(1, &client_hello("api.example.test")).await;
    f.data(1, b"hello").await;
    f.eof(1).await;
    let (body, end) = f.read_to_end(1).await;
    assert_eq!(end, End::Eof);
    assert!(body.ends_with(b"HELLO"), "{body:?}");
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Allowed);
    assert_eq!(rec.rule, "api.example.test:443");
    assert_eq!(rec.sni.as_deref(), Some("api.example.test"));
    assert_eq!(rec.resolved, Some("203.0.113.10:443".parse().unwrap()));
    assert_eq!(rec.bytes_down, body.len() as u64);
    assert_eq!(w.dialed(), ["203.0.113.10:443".parse().unwrap()]);
    assert!(
        w.events().iter().any(|e| matches!(e,
        EgressEvent::Lookup { host, source: LookupSource::Dns, .. } if host == "api.example.test"))
    );
    w.stop().await;
}

#[tokio::test]
async fn refusals_say_why_and_never_dial() {
    let up = Upstream::echo_upper().await;
    let cases: &[(&str, u16, &str, &str)] = &[
        (
            "CONNECT evil.test:443",
            403,
            "not-allowed",
            "host evil.test is not in the allowlist of policy gvisor-hardened-agent",
        ),
        (
            "CONNECT api.example.test:80",
            403,
            "not-allowed",
            "allowed on port 443 only, not 80",
        ),
        (
            "CONNECT 203.0.113.10:443",
            403,
            "ip-literal",
            "is an IP address",
        ),
        (
            "CONNECT loop.example.test:443",
            403,
            "loopback",
            "resolves to 127.0.0.1, a loopback address",
        ),
        (
            "CONNECT meta.example.test:443",
            403,
            "link-local",
            "resolves to 169.254.169.254, a link-local address",
        ),
        (
            "CONNECT lan.example.test:443",
            403,
            "private",
            "resolves to 10.1.2.3, a private address",
        ),
        (
            "GET http://api.example.test/ HTTP/1.1\r\nX: y",
            403,
            "plain-http",
            "plain HTTP is off",
        ),
        (
            "CONNECT api.example.test",
            400,
            "bad-request",
            "has no port",
        ),
    ];
    for (line, status, rule, words) in cases {
        let mut w = World::new(&policy(&[]), &up).await;
        let mut f = w.forwarder().await;
        f.open(1).await;
        let head = if line.contains("HTTP/1.1") {
            format!("{line}\r\n\r\n")
        } else {
            format!("{line} HTTP/1.1\r\n\r\n")
        };
        f.data(1, head.as_bytes()).await;
        let (resp, _) = f.read_to_end(1).await;
        let resp = String::from_utf8(resp).unwrap();
        assert!(
            resp.starts_with(&format!("HTTP/1.1 {status} ")),
            "{line}: {resp}"
        );
        assert!(resp.contains(words), "{line}: {resp}");
        let rec = w.connection_record().await;
        assert_eq!(rec.verdict, Verdict::Denied, "{line}");
        assert_eq!(rec.rule, *rule, "{line}");
        assert!(w.dialed().is_empty(), "{line} dialed");
        w.stop().await;
    }
}

#[tokio::test]
async fn an_ip_literal_inside_allow_cidrs_is_allowed() {
    let up = Upstream::echo_upper().await;
    let mut w = World::new(&policy(&["allow_cidrs = [\"10.213.0.0/16\"]"]), &up).await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT 10.213.7.2:443 HTTP/1.1\r\n\r\n").await;
    assert!(f
        .read_until(1, b"\r\n\r\n")
        .await
        .starts_with(b"HTTP/1.1 200"));
    f.data(1, b"x").await;
    f.eof(1).await;
    let (body, _) = f.read_to_end(1).await;
    assert_eq!(body, b"X");
    assert_eq!(
        w.connection_record().await.rule,
        "allow_cidrs 10.213.0.0/16"
    );
    w.stop().await;
}

#[tokio::test]
async fn a_static_hosts_entry_is_used_without_dns_and_still_guarded() {
    let up = Upstream::echo_upper().await;
    let p = policy(&[
        "hosts = { \"api.example.test\" = \"10.213.7.2\" }",
        "allow_cidrs = [\"10.213.7.0/24\"]",
    ]);
    let mut w = World::new(&p, &up).await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    assert!(f
        .read_until(1, b"\r\n\r\n")
        .await
        .starts_with(b"HTTP/1.1 200"));
    f.reset(1).await;
    let rec = w.connection_record().await;
    assert_eq!(rec.resolved, Some("10.213.7.2:443".parse().unwrap()));
    assert!(w.events().iter().any(|e| matches!(
        e,
        EgressEvent::Lookup {
            source: LookupSource::Static,
            ..
        }
    )));
    assert!(w.resolved_names().is_empty(), "DNS was asked");
    w.stop().await;
    // Without allow_cidrs the same static entry is a private address: refused.
    let mut w = World::new(
        &policy(&["hosts = { \"api.example.test\" = \"10.213.7.2\" }"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    let (resp, _) = f.read_to_end(1).await;
    assert!(resp.starts_with(b"HTTP/1.1 403"));
    w.stop().await;
}

#[tokio::test]
async fn sni_missing_or_different_cuts_the_tunnel_before_upstream() {
    let up = Upstream::echo_upper().await;
    for (hello, rule) in [
        (client_hello("other.example.test"), "sni-mismatch"),
        (client_hello(""), "sni-missing"),
        (b"SSH-2.0-OpenSSH\r\n".to_vec(), "sni-missing"),
    ] {
        let mut w = World::new(&policy(&[]), &up).await;
        let mut f = w.forwarder().await;
        f.open(1).await;
        f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
            .await;
        assert!(f
            .read_until(1, b"\r\n\r\n")
            .await
            .starts_with(b"HTTP/1.1 200"));
        f.data(1, &hello).await;
        let (_, end) = f.read_to_end(1).await;
        assert_eq!(end, End::Close, "{rule}");
        let rec = w.connection_record().await;
        assert_eq!((rec.verdict, rec.rule.as_str()), (Verdict::Denied, rule));
        assert!(w.dialed().is_empty(), "{rule}: dialed");
        w.stop().await;
    }
}

#[tokio::test]
async fn plain_http_goes_out_in_origin_form_when_enabled() {
    let up = Upstream::recorder().await;
    let mut w = World::new(
        &policy(&["plain_http = true", "allow = [\"api.example.test:80\"]"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"GET http://api.example.test/v1?q=1 HTTP/1.1\r\nHost: api.example.test\r\nProxy-Connection: keep-alive\r\n\r\n").await;
    let (resp, _) = f.read_to_end(1).await;
    assert!(
        resp.starts_with(b"HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    f.eof(1).await;
    assert_eq!(
        up.received().await,
        b"GET /v1?q=1 HTTP/1.1\r\nHost: api.example.test\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(w.connection_record().await.method, "GET");
    w.stop().await;
}

/// A recording upstream, a world allowing plain HTTP to `api.example.test:80`, stream 1 open.
async fn plain_http_stream() -> (Upstream, World, Fwd) {
    let up = Upstream::recorder().await;
    let mut w = World::new(
        &policy(&["plain_http = true", "allow = [\"api.example.test:80\"]"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    (up, w, f)
}

#[tokio::test]
async fn a_pipelined_second_request_is_never_forwarded() {
    let (up, mut w, mut f) = plain_http_stream().await;
    // One write: a request with a 4-byte body, then a request for a host not on the list.
    f.data(
        1,
        b"POST http://api.example.test/a HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 4\r\n\r\nbodyGET http://other.test/b HTTP/1.1\r\nHost: other.test\r\n\r\n",
    )
    .await;
    let (resp, _) = f.read_to_end(1).await;
    assert!(
        resp.starts_with(b"HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    f.eof(1).await;
    assert_eq!(
        up.received().await,
        b"POST /a HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody"
    );
    let rec = w.connection_record().await;
    assert_eq!(rec.bytes_up, 86, "{rec:?}");
    let why = rec.reason.unwrap_or_default();
    assert!(
        why.contains("54 bytes after the request were not forwarded"),
        "{why}"
    );
    w.stop().await;
}

#[tokio::test]
async fn a_chunked_plain_request_is_refused_with_411() {
    let (up, w, mut f) = plain_http_stream().await;
    f.data(
        1,
        b"POST http://api.example.test/a HTTP/1.1\r\nHost: api.example.test\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await;
    let (resp, _) = f.read_to_end(1).await;
    assert!(
        resp.starts_with(b"HTTP/1.1 411 "),
        "{}",
        String::from_utf8_lossy(&resp)
    );
    assert!(up.received().await.is_empty());
    w.stop().await;
}

/// A tunnel to an upstream that accepts and never reads, with 256 KiB (the window) sent into it.
async fn stalled_upload(timeouts: Timeouts) -> (World, Fwd, Upstream) {
    let up = Upstream::stall().await;
    let mut w = World::with_timeouts(&policy(&["require_sni = false"]), &up, timeouts).await;
    let mut f = connect_tunnel(&mut w).await;
    for _ in 0..4 {
        f.data(1, &[b'u'; 64 * 1024]).await;
    }
    (w, f, up)
}

#[tokio::test]
async fn a_workload_reset_ends_an_upload_stuck_on_a_stalled_upstream_at_once() {
    // Deadlines far away: only the reset may end it.
    let timeouts = Timeouts {
        write: Duration::from_secs(3600),
        idle: Duration::from_secs(3600),
        ..Timeouts::default()
    };
    let (mut w, mut f, _up) = stalled_upload(timeouts).await;
    f.reset(1).await;
    let rec = w.connection_record().await;
    assert_eq!(rec.host, "api.example.test");
    assert!(
        rec.bytes_up < 256 * 1024,
        "the upload never finished: {rec:?}"
    );
    w.stop().await;
}

#[tokio::test]
async fn an_upstream_that_stops_reading_is_cut_after_the_write_deadline() {
    let timeouts = Timeouts {
        write: Duration::from_millis(300),
        ..Timeouts::default()
    };
    let (mut w, _f, _up) = stalled_upload(timeouts).await;
    let rec = w.connection_record().await;
    let why = rec.reason.clone().unwrap_or_default();
    assert_eq!(rec.verdict, Verdict::Cut, "{rec:?}");
    assert!(why.contains("the upstream took no data"), "{rec:?}");
    w.stop().await;
}

#[tokio::test]
async fn a_silent_upstream_is_cut_after_the_idle_deadline() {
    let up = Upstream::hold().await;
    let timeouts = Timeouts {
        idle: Duration::from_millis(300),
        ..Timeouts::default()
    };
    let mut w = World::with_timeouts(&policy(&["require_sni = false"]), &up, timeouts).await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(
        1,
        b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n",
    )
    .await;
    let rec = w.connection_record().await;
    assert_eq!(rec.rule, "idle", "{rec:?}");
    up.wait_closed().await;
    w.stop().await;
}

/// A forwarder with stream 1 tunnelled (CONNECT answered 200) to `api.example.test:443`.
async fn connect_tunnel(w: &mut World) -> Fwd {
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(
        1,
        b"CONNECT api.example.test:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n",
    )
    .await;
    let head = f.read_until(1, b"\r\n\r\n").await;
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    f
}

#[tokio::test]
async fn a_workload_that_sent_and_closed_releases_an_upstream_that_never_answers() {
    // The upstream accepts and never reads or answers; only the workload's close may end
    // the connection (the idle deadline is an hour away), and the record follows at once.
    let up = Upstream::stall().await;
    let timeouts = Timeouts {
        idle: Duration::from_secs(3600),
        after_close: Duration::from_millis(200),
        ..Timeouts::default()
    };
    let mut w = World::with_timeouts(&policy(&["require_sni = false"]), &up, timeouts).await;
    let mut f = connect_tunnel(&mut w).await;
    f.data(1, b"a request the upstream never reads").await;
    f.eof(1).await;
    let (_, end) = f.read_to_end(1).await;
    assert_eq!(end, End::Eof);
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Allowed, "{rec:?}");
    assert_eq!(rec.bytes_up, 34, "{rec:?}");
    w.stop().await;
}

#[tokio::test]
async fn an_upstream_answering_after_the_workloads_close_still_delivers() {
    // The control: a half-closed workload waiting for its answer gets all of it.
    let up = Upstream::echo_upper().await;
    let timeouts = Timeouts {
        after_close: Duration::from_secs(3600),
        ..Timeouts::default()
    };
    let mut w = World::with_timeouts(&policy(&["require_sni = false"]), &up, timeouts).await;
    let mut f = connect_tunnel(&mut w).await;
    f.data(1, b"hello").await;
    f.eof(1).await;
    let (body, end) = f.read_to_end(1).await;
    assert_eq!(body, b"HELLO");
    assert_eq!(end, End::Eof);
    assert_eq!(w.connection_record().await.verdict, Verdict::Allowed);
    w.stop().await;
}

#[tokio::test]
async fn crossing_the_byte_cap_cuts_and_refuses_afterwards() {
    let up = Upstream::flood(64 * 1024).await;
    let mut w = World::new(
        &policy(&["max_bytes = \"16Ki\"", "require_sni = false"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    f.read_until(1, b"\r\n\r\n").await;
    let (body, end) = f.read_to_end(1).await;
    assert_eq!(end, End::Close);
    assert!(body.len() <= 16 * 1024, "{} bytes got through", body.len());
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Cut);
    assert!(w.events().iter().any(|e| matches!(
        e,
        EgressEvent::ByteCapCrossed {
            max_bytes: 16384,
            ..
        }
    )));
    f.open(3).await;
    f.data(3, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    let (resp, _) = f.read_to_end(3).await;
    assert!(String::from_utf8_lossy(&resp).contains("byte cap of 16384 bytes"));
    w.stop().await;
}

#[tokio::test]
async fn a_slow_consumer_stalls_only_its_own_stream() {
    let up = Upstream::flood(4 * INITIAL_WINDOW as usize).await;
    let mut w = World::new(&policy(&["require_sni = false"]), &up).await;
    let mut f = w.forwarder().await;
    // Stream 1 floods and is never credited.
    f.open(1).await;
    f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    f.auto_credit = false;
    f.read_until(1, b"\r\n\r\n").await;
    // The host used its whole window on stream 1 (the 200 line took 39 bytes of it).
    let window = INITIAL_WINDOW as usize;
    f.wait_pending(1, window - 39).await;
    // Stream 3 still gets a whole exchange while stream 1 is stuck.
    f.open(3).await;
    f.data(3, b"CONNECT api.example.test:80 HTTP/1.1\r\n\r\n")
        .await;
    let (resp, _) = f.read_to_end(3).await;
    assert!(resp.starts_with(b"HTTP/1.1 403"));
    // Nothing more came on stream 1 (the fake also asserts no frame ever overruns a window).
    let stuck = f.pending(1);
    assert_eq!(stuck, window - 39);
    f.auto_credit = true;
    f.grant(1, INITIAL_WINDOW).await;
    let (rest, end) = f.read_to_end(1).await;
    assert_eq!(end, End::Eof);
    assert_eq!(rest.len(), 4 * window, "the stuck bytes and the rest");
    w.stop().await;
}

#[tokio::test]
async fn a_forwarder_that_dies_is_audited_and_restarted() {
    let up = Upstream::hold().await;
    let mut w = World::new(&policy(&["require_sni = false"]), &up).await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    f.read_until(1, b"\r\n\r\n").await;
    f.die("killed by the test").await;
    let down = w
        .sup()
        .wait_for(Duration::from_secs(10), |s| {
            matches!(s, ForwarderState::Down { .. })
        })
        .await
        .unwrap();
    assert!(
        matches!(down, ForwarderState::Down { attempt: 1, .. }),
        "{down:?}"
    );
    // The open connection was reset: its upstream sees the end.
    up.wait_closed().await;
    let mut f2 = w.forwarder().await;
    assert_eq!(
        w.sup().wait_ready(Duration::from_secs(10)).await.unwrap(),
        "127.0.0.1:3128"
    );
    f2.open(1).await;
    f2.data(1, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n").await;
    let (resp, _) = f2.read_to_end(1).await;
    assert!(resp.starts_with(b"HTTP/1.1 403"));
    let events = w.events();
    assert!(events
        .iter()
        .any(|e| matches!(e, EgressEvent::ForwarderDied { attempt: 1, .. })));
    assert!(events
        .iter()
        .any(|e| matches!(e, EgressEvent::ForwarderReady { attempt: 2, .. })));
    w.stop().await;
}

#[tokio::test]
async fn a_forwarder_that_ends_with_its_sandbox_is_no_death_and_is_not_restarted() {
    let up = Upstream::hold().await;
    let mut w = World::new(&policy(&["require_sni = false"]), &up).await;
    let mut f = w.forwarder().await;
    w.end_sandbox();
    f.die("the sandbox exited").await;
    w.sup()
        .wait_for(Duration::from_secs(10), |s| {
            matches!(s, ForwarderState::Down { .. })
        })
        .await
        .unwrap();
    // Its process had exited: nothing to kill, no runsc command left behind.
    assert_eq!(w.kills_done(), 0);
    let events = w.stop_keep_events().await;
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, EgressEvent::ForwarderDied { .. })),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, EgressEvent::ForwarderReady { attempt: 2, .. })),
        "{events:?}"
    );
    assert!(events
        .iter()
        .any(|e| matches!(e, EgressEvent::ProxyStopped)));
}

#[tokio::test]
async fn a_forwarder_that_cannot_listen_is_a_death_with_its_reason() {
    let up = Upstream::hold().await;
    let mut w = World::new(&policy(&[]), &up).await;
    let mut f = w.forwarder_raw().await;
    f.send(Frame::Fatal {
        message: "cannot listen on 127.0.0.1:3128: Address in use".into(),
    })
    .await;
    let down = w
        .sup()
        .wait_for(Duration::from_secs(10), |s| {
            matches!(s, ForwarderState::Down { .. })
        })
        .await
        .unwrap();
    let ForwarderState::Down { reason, .. } = down else {
        unreachable!()
    };
    assert!(reason.contains("Address in use"), "{reason}");
    // Its process still ran: it was killed, and the kill had ended before the supervisor
    // went on (a `runsc kill` left running races the sandbox's `runsc delete`).
    assert_eq!(w.kills_done(), 1);
    drop(f);
    w.stop().await;
}

#[tokio::test]
async fn data_beyond_the_window_ends_the_session() {
    let up = Upstream::hold().await;
    let mut w = World::new(&policy(&[]), &up).await;
    let mut f = w.forwarder().await;
    f.open(1).await;
    f.data(1, b"CONNECT slow.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    for _ in 0..(INITIAL_WINDOW as usize / 65536) + 1 {
        f.send(Frame::Data {
            stream: 1,
            data: vec![b'x'; 65536],
        })
        .await;
    }
    let down = w
        .sup()
        .wait_for(Duration::from_secs(10), |s| {
            matches!(s, ForwarderState::Down { .. })
        })
        .await
        .unwrap();
    assert!(format!("{down:?}").contains("window"), "{down:?}");
    w.stop().await;
}

#[tokio::test]
async fn stop_closes_the_forwarders_stdin() {
    let up = Upstream::hold().await;
    let mut w = World::new(&policy(&[]), &up).await;
    let mut f = w.forwarder().await;
    let events = w.stop_keep_events().await;
    let mut rest = Vec::new();
    let n = tokio::time::timeout(Duration::from_secs(10), f.r.read_to_end(&mut rest))
        .await
        .expect("stdin closed")
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(events.last(), Some(&EgressEvent::ProxyStopped));
    let _ = f.w.shutdown().await;
}

/// Opens stream `id` as a tunnel to api.example.test:443; returns the status line.
async fn tunnel(f: &mut Fwd, id: u32) -> String {
    f.open(id).await;
    f.data(id, b"CONNECT api.example.test:443 HTTP/1.1\r\n\r\n")
        .await;
    let head = f.read_until(id, b"\r\n").await;
    String::from_utf8(head).unwrap()
}

#[tokio::test]
async fn connections_past_the_open_cap_are_answered_503_with_the_reason_until_one_ends() {
    let up = Upstream::hold().await;
    let mut w = World::new(
        &policy(&["max_connections = 2", "require_sni = false"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    for id in [1, 3] {
        assert!(tunnel(&mut f, id).await.starts_with("HTTP/1.1 200 "));
    }
    let status = tunnel(&mut f, 5).await;
    assert!(
        status.starts_with("HTTP/1.1 503 egress refused: 2 connections are open")
            && status.contains("policy gvisor-hardened-agent allows (max_connections)"),
        "{status}"
    );
    let (_, end) = f.read_to_end(5).await;
    assert_eq!(end, End::Eof);
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Denied);
    assert_eq!(rec.rule, "max-connections");
    assert!(w.dialed().len() == 2, "the refused one dialed");
    // One tunnel ends: its slot is free again.
    f.reset(1).await;
    assert_eq!(w.connection_record().await.rule, "api.example.test:443");
    assert!(tunnel(&mut f, 7).await.starts_with("HTTP/1.1 200 "));
    w.stop().await;
}

#[tokio::test]
async fn connections_past_the_rate_are_answered_429_with_the_reason() {
    let up = Upstream::hold().await;
    let mut w = World::new(
        &policy(&["max_connection_rate = 2", "require_sni = false"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    // A burst of one second's worth goes through; the third within the second does not.
    for id in [1, 3] {
        assert!(tunnel(&mut f, id).await.starts_with("HTTP/1.1 200 "));
    }
    let status = tunnel(&mut f, 5).await;
    assert!(
        status.starts_with("HTTP/1.1 429 egress refused: more than 2 new connections per second"),
        "{status}"
    );
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Denied);
    assert_eq!(rec.rule, "connection-rate");
    assert_eq!(w.dialed().len(), 2);
    w.stop().await;
}

#[tokio::test]
async fn a_connection_the_forwarder_refused_has_its_record() {
    let up = Upstream::hold().await;
    let mut w = World::new(&policy(&["max_connections = 3"]), &up).await;
    let mut f = w.forwarder().await;
    f.send(Frame::Refused {
        peer: "127.0.0.1:40999".into(),
    })
    .await;
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Denied);
    assert_eq!(rec.rule, "forwarder-limit");
    assert_eq!(rec.peer, "127.0.0.1:40999");
    let reason = rec.reason.unwrap();
    assert!(reason.contains("holds 6 connections"), "{reason}");
    // The session goes on: a REFUSED is no protocol error.
    assert!(tunnel(&mut f, 1).await.starts_with("HTTP/1.1 200 "));
    w.stop().await;
}

#[tokio::test]
async fn max_rate_slows_a_download_to_the_cap_and_cuts_nothing() {
    const SIZE: usize = 256 * 1024;
    let up = Upstream::flood(SIZE).await;
    let mut w = World::new(
        &policy(&["max_rate = \"64Ki\"", "require_sni = false"]),
        &up,
    )
    .await;
    let mut f = w.forwarder().await;
    assert!(tunnel(&mut f, 1).await.starts_with("HTTP/1.1 200 "));
    f.read_until(1, b"\r\n").await;
    let started = std::time::Instant::now();
    let (body, end) = f.read_to_end(1).await;
    let took = started.elapsed();
    assert_eq!(end, End::Eof);
    assert_eq!(body.len(), SIZE);
    // One second's worth at once, the other 192 KiB at 64 KiB/s: 3 s at the least (a lower
    // bound: a loaded machine only makes it longer; without the cap it takes milliseconds).
    assert!(
        took >= Duration::from_millis(2900),
        "256 KiB at 64 KiB/s took {took:?}"
    );
    let rec = w.connection_record().await;
    assert_eq!(rec.verdict, Verdict::Allowed);
    assert_eq!(rec.bytes_down, SIZE as u64);
    w.stop().await;
}

/// A client of a published port, on the host's loopback: sends `what`, half-closes, reads the
/// answer to its end (empty when reset).
async fn ask_published(addr: std::net::SocketAddr, what: &[u8]) -> Vec<u8> {
    let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
    c.write_all(what).await.unwrap();
    c.shutdown().await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut answer))
        .await
        .expect("an answer or a reset, not a hang");
    answer
}

#[tokio::test]
async fn a_published_port_uses_the_running_forwarder_and_after_its_death_waits_for_the_next() {
    use crate::ingress::{Ingress, IngressLimits};
    let up = Upstream::echo_upper().await;
    let mut w = World::new(&policy(&[]), &up).await;
    let mut f = w.forwarder().await;
    let ingress = std::sync::Arc::new(Ingress::new(
        super::SandboxRef {
            sandbox_id: "sb".into(),
            container_id: "sb".into(),
            policy: "gvisor-hardened-agent".into(),
        },
        w.sink(),
        IngressLimits {
            max_connections: 8,
            max_connection_rate: 100,
            max_bytes: 1 << 20,
            idle: Duration::from_secs(300),
        },
        w.sup().connector(),
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(ingress.serve(listener, 8080));

    let client = tokio::spawn(ask_published(addr, b"ping"));
    let (id, port) = f.next_connect().await;
    assert_eq!(port, 8080);
    f.send(Frame::Accepted { stream: id }).await;
    assert_eq!(f.read_until(id, b"ping").await, b"ping");
    f.data(id, b"PONG").await;
    f.eof(id).await;
    assert_eq!(client.await.unwrap(), b"PONG");

    // Between a death and the next HELLO nothing carries connections in: refused, recorded.
    f.die("gone").await;
    let mut connector = w.sup().connector();
    tokio::time::timeout(Duration::from_secs(10), connector.wait_for(Option::is_none))
        .await
        .unwrap()
        .unwrap();
    drop(connector);
    assert_eq!(ask_published(addr, b"anyone?").await, b"");
    let refused = poll(|| {
        w.events().into_iter().find_map(|e| match e {
            EgressEvent::IngressConnection(r) if r.rule == "forwarder" => Some(r),
            _ => None,
        })
    })
    .await;
    assert_eq!(refused.verdict, Verdict::Denied);

    // The next forwarder carries them again.
    let mut f2 = w.forwarder().await;
    let client = tokio::spawn(ask_published(addr, b"again"));
    let (id, _) = f2.next_connect().await;
    f2.send(Frame::Accepted { stream: id }).await;
    f2.read_until(id, b"again").await;
    f2.data(id, b"AGAIN").await;
    f2.eof(id).await;
    assert_eq!(client.await.unwrap(), b"AGAIN");
    serving.abort();
    w.stop().await;
}
