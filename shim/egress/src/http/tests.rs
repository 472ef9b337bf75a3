use super::*;

fn parse(s: &str) -> Result<Request, HeadError> {
    parse_head(s.as_bytes())
}

#[test]
fn connect_parses_host_and_port() {
    assert_eq!(
        parse("CONNECT API.Example.Test.:443 HTTP/1.1\r\nHost: api.example.test:443\r\n\r\n"),
        Ok(Request::Connect {
            host: "api.example.test".into(),
            port: 443
        })
    );
    assert_eq!(
        parse("CONNECT [2001:db8::1]:8443 HTTP/1.0\r\n\r\n"),
        Ok(Request::Connect {
            host: "2001:db8::1".into(),
            port: 8443
        })
    );
}

#[test]
fn plain_requests_parse_and_go_out_in_origin_form() {
    let req = parse(
        "GET http://files.example.test:8080/a/b?c=1 HTTP/1.1\r\nHost: files.example.test:8080\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nAccept: */*\r\n\r\n",
    )
    .unwrap();
    assert_eq!(req.host(), "files.example.test");
    assert_eq!(req.port(), 8080);
    let out = String::from_utf8(origin_form(&req).unwrap()).unwrap();
    assert_eq!(
        out,
        "GET /a/b?c=1 HTTP/1.1\r\nHost: files.example.test:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    let bare = parse("HEAD http://x.example.test HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(
        String::from_utf8(origin_form(&bare).unwrap()).unwrap(),
        "HEAD / HTTP/1.1\r\nHost: x.example.test\r\nConnection: close\r\n\r\n"
    );
    let query = parse("GET http://x.example.test?q HTTP/1.1\r\n\r\n").unwrap();
    assert!(matches!(query, Request::Plain { ref path, .. } if path == "/?q"));
}

#[test]
fn odd_heads_are_refused_with_a_reason() {
    let cases: &[(&str, u16, &str)] = &[
        ("CONNECT example.test HTTP/1.1\r\n\r\n", 400, "has no port"),
        ("CONNECT example.test:0 HTTP/1.1\r\n\r\n", 400, "bad port"),
        ("CONNECT example.test:99999 HTTP/1.1\r\n\r\n", 400, "bad port"),
        ("CONNECT example.test:+443 HTTP/1.1\r\n\r\n", 400, "bad port"),
        ("CONNECT ex_ample.test:443 HTTP/1.1\r\n\r\n", 400, "bad host"),
        ("CONNECT [::1:443 HTTP/1.1\r\n\r\n", 400, "unclosed"),
        ("CONNECT a.test:443 HTTP/2.0\r\n\r\n", 505, "unsupported version"),
        ("CONNECT  a.test:443 HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        ("connect a.test:443 HTTP/1.1\r\n\r\n", 400, "bad method"),
        ("GET /path HTTP/1.1\r\n\r\n", 400, "absolute http:// URL"),
        ("GET https://a.test/ HTTP/1.1\r\n\r\n", 400, "CONNECT"),
        ("GET http://u:p@a.test/ HTTP/1.1\r\n\r\n", 400, "credentials"),
        ("GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n\r\n", 400, "another host"),
        ("GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: a.test\r\n\r\n", 400, "more than one Host"),
        ("GET http://a.test/ HTTP/1.1\r\nX: a\r\n b\r\n\r\n", 400, "folded"),
        ("GET http://a.test/ HTTP/1.1\r\nX a\r\n\r\n", 400, "without a colon"),
        ("GET http://a.test/ HTTP/1.1\r\nX\x01: a\r\n\r\n", 400, "bad header name"),
        ("GET http://a.test/ HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400, "control characters"),
        ("GET http://a.test/ HTTP/1.1\nX: a\r\n\r\n", 400, "bare CR or LF"),
        ("POST http://a.test/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "both Content-Length"),
        ("GET http://a.test/a b HTTP/1.1\r\n\r\n", 400, "malformed request line"),
        ("GET http://a.test/\x7f HTTP/1.1\r\n\r\n", 400, "printable ASCII"),
        ("GET http://a.test/a#b HTTP/1.1\r\n\r\n", 400, "bad characters"),
        ("GET http://a.test/ HTTP/1.1\r\n", 400, "blank line"),
        // Found by the fuzzer: slicing the target at byte 8 split a character.
        ("GET http:lE\u{48d}es#44:=c HTTP/1.1\r\nHost: b*/*\r\n\r\n", 400, "printable ASCII"),
        ("GET http://\u{e9}.test/ HTTP/1.1\r\n\r\n", 400, "printable ASCII"),
    ];
    for (head, status, why) in cases {
        let e = parse(head).unwrap_err();
        assert_eq!(e.status, *status, "{head:?}: {e}");
        assert!(e.reason.contains(why), "{head:?}: {e}");
    }
}

#[test]
fn heads_are_bounded() {
    let long = format!(
        "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    assert_eq!(parse(&long).unwrap_err().status, 431);
    let many: String = (0..70).map(|i| format!("X{i}: y\r\n")).collect();
    let e = parse(&format!("GET http://a.test/ HTTP/1.1\r\n{many}\r\n")).unwrap_err();
    assert_eq!(e.status, 431, "{e}");
}

#[test]
fn head_len_finds_the_blank_line() {
    assert_eq!(head_len(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest"), Some(24));
    assert_eq!(head_len(b"CONNECT a:1 HTTP/1.1\r\n"), None);
}

#[test]
fn responses_carry_the_reason_as_the_body() {
    let r = String::from_utf8(response(
        403,
        "egress denied: host x.test is not in the allowlist",
    ))
    .unwrap();
    assert!(
        r.starts_with("HTTP/1.1 403 egress denied: host x.test is not in the allowlist\r\n"),
        "{r}"
    );
    assert!(
        r.ends_with("\r\n\r\negress denied: host x.test is not in the allowlist\n"),
        "{r}"
    );
    assert!(r.contains("Content-Length: 51\r\n"), "{r}");
}

#[test]
fn the_reason_phrase_is_one_printable_bounded_line() {
    let r = String::from_utf8(response(
        403,
        "denied: h\u{e9}\tx\r\nInjected: 1\nsecond line",
    ))
    .unwrap();
    let status = r.split("\r\n").next().unwrap();
    assert_eq!(status, "HTTP/1.1 403 denied: h??x", "{r}");
    let head = r.split("\r\n\r\n").next().unwrap();
    assert!(!head.contains("Injected"), "no header from the reason: {r}");
    let long = "x".repeat(1000);
    let r = String::from_utf8(response(403, &long)).unwrap();
    assert_eq!(
        r.split("\r\n").next().unwrap().len(),
        "HTTP/1.1 403 ".len() + 200
    );
    let r = String::from_utf8(response(502, "")).unwrap();
    assert!(r.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{r}");
}

#[test]
fn trace_is_refused_with_405() {
    let e = parse("TRACE http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n").unwrap_err();
    assert_eq!(e.status, 405);
    assert!(e.reason.contains("TRACE"), "{}", e.reason);
}

const CHUNKED: &[u8] = b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n";

#[test]
fn a_chunked_body_ends_after_its_last_chunk_however_it_arrives() {
    let mut data = CHUNKED.to_vec();
    data.extend_from_slice(b"GET /next HTTP/1.1\r\n\r\n");
    let mut whole = ChunkedBody::default();
    assert_eq!(whole.feed(&data).unwrap(), CHUNKED.len());
    assert!(whole.done());
    let mut bytewise = ChunkedBody::default();
    let taken: usize = data.chunks(1).map(|b| bytewise.feed(b).unwrap()).sum();
    assert_eq!(taken, CHUNKED.len());
    assert!(bytewise.done());
    let mut partial = ChunkedBody::default();
    assert_eq!(partial.feed(&CHUNKED[..7]).unwrap(), 7);
    assert!(!partial.done());
}

#[test]
fn chunked_bodies_read_two_ways_are_refused() {
    for bad in [
        &b"4;ext=1\r\nWiki\r\n0\r\n\r\n"[..],
        b"4\nWiki\r\n0\r\n\r\n",
        b"x\r\nWiki\r\n0\r\n\r\n",
        b"\r\nWiki\r\n0\r\n\r\n",
        b"4\r\nWikiX\r\n0\r\n\r\n",
        b"0\r\nX-Api-Key: mine\r\n\r\n",
        b"1000000000000000\r\n",
        b" 4\r\nWiki\r\n",
    ] {
        let mut c = ChunkedBody::default();
        assert!(c.feed(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn origin_heads_take_one_chunked_coding_and_nothing_else() {
    let head = |extra: &str| format!("POST /v1/messages HTTP/1.1\r\n{extra}\r\n");
    let req = parse_origin_head(
        head("Transfer-Encoding: chunked\r\n").as_bytes(),
        "api.example.test",
        443,
    )
    .unwrap();
    assert!(req.chunked);
    for (extra, status) in [
        ("Transfer-Encoding: gzip, chunked\r\n", 411),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
            411,
        ),
        ("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", 400),
        ("Host: other.example.test\r\n", 400),
    ] {
        let e = parse_origin_head(head(extra).as_bytes(), "api.example.test", 443).unwrap_err();
        assert_eq!(e.status, status, "{extra}: {e}");
    }
    let req = parse_origin_head(
        head("Content-Length: 4\r\nConnection: keep-alive\r\nUpgrade: h2c\r\n").as_bytes(),
        "api.example.test",
        443,
    )
    .unwrap();
    assert_eq!((req.body_len, req.chunked), (4, false));
    assert_eq!(
        req.headers,
        [("Content-Length".to_string(), "4".to_string())]
    );
}
