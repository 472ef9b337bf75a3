//! Fuzz target: the egress proxy's request-head parsers on arbitrary bytes.
//!
//! The head comes from the sandbox: untrusted. The parsers must answer every input with a
//! request or an HTTP error, never a panic; what they accept must be sane (a host and a port;
//! for the origin-form head read inside a credential host's terminated TLS: a path, no
//! hop-by-hop header, a bounded body), the origin-form request sent upstream must itself be
//! exactly one well-formed head, and a credential rule admits only plain paths under it.
#![no_main]

// The parser is std only, so it is compiled here on its own (the shim's dependencies would
// otherwise all be built with coverage instrumentation).
#[path = "../../shim/egress/src/http.rs"]
mod http;

use libfuzzer_sys::fuzz_target;
use policy_injector::egress::{path_is_plain, CredentialRule};

/// The head as a credential host's terminated connection reads it: one origin-form request;
/// `rest`, what followed it, as its body.
fn origin(head: &[u8], rest: &[u8]) {
    match http::parse_origin_head(head, "api.example.test", 443) {
        Ok(req) => {
            assert!(!req.method.is_empty() && req.method.bytes().all(|b| b.is_ascii_uppercase()));
            assert!(req.target.starts_with('/'));
            assert!(req
                .target
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'#'));
            assert!(req.body_len < 1_000_000_000_000_000_000, "{}", req.body_len);
            let named = |name: &str| {
                req.headers
                    .iter()
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .count()
            };
            if req.chunked {
                assert_eq!(
                    (named("transfer-encoding"), named("content-length")),
                    (1, 0)
                );
                // The body's end does not depend on how its bytes arrive.
                let mut whole = http::ChunkedBody::default();
                let at_once = whole.feed(rest);
                let split = rest.len() / 2;
                let mut parts = http::ChunkedBody::default();
                let in_parts = parts.feed(&rest[..split]).and_then(|a| {
                    if a < split {
                        Ok(a)
                    } else {
                        parts.feed(&rest[split..]).map(|b| a + b)
                    }
                });
                match (at_once, in_parts) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a, b);
                        assert_eq!(whole.done(), parts.done());
                        assert!(a <= rest.len());
                        if whole.done() {
                            assert!(rest[..a].ends_with(b"0\r\n\r\n"));
                        }
                    }
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("whole {a:?}, in parts {b:?}"),
                }
            } else {
                assert_eq!(named("transfer-encoding"), 0);
            }
            for (n, v) in &req.headers {
                let n = n.to_ascii_lowercase();
                assert!(
                    !["connection", "keep-alive", "te", "upgrade", "trailer",]
                        .contains(&n.as_str()),
                    "{n}"
                );
                assert!(!n.starts_with("proxy-"), "{n}");
                assert!(!v.contains(['\r', '\n']), "{v:?}");
            }
            for rule in ["POST /v1/messages", "GET /v1/models", "GET /"] {
                let rule: CredentialRule = rule.parse().unwrap();
                if path_is_plain(&req.target) && rule.allows(&req.method, &req.target) {
                    let path = req.target.split('?').next().unwrap();
                    assert!(path.starts_with(&rule.path));
                    assert!(!path.split('/').any(|s| s == ".." || s == "."), "{path}");
                }
            }
        }
        Err(e) => {
            assert!(e.status >= 400 && e.status < 600);
            assert!(!e.reason.is_empty());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some(n) = http::head_len(data) else {
        return;
    };
    origin(&data[..n], &data[n..]);
    match http::parse_head(&data[..n]) {
        Ok(req) => {
            assert!(!req.host().is_empty());
            assert_ne!(req.port(), 0);
            // A plain request's body end is known from its head (one request per connection).
            if let Some(len) = req.body_len() {
                assert!(len < 1_000_000_000_000_000_000, "{len}");
            }
            if let Some(out) = http::origin_form(&req) {
                assert_eq!(
                    http::head_len(&out),
                    Some(out.len()),
                    "one head, nothing after"
                );
                let again = http::parse_head(&out);
                // Origin form is not a proxy request; it must still be a head the proxy's own
                // rules would read as one request line and headers (no injected CR/LF).
                assert!(again.is_err(), "origin form parsed as a proxy request");
                let text = String::from_utf8(out).expect("the head was UTF-8");
                assert!(!text.contains("\r\n\r\n\r\n"));
            }
        }
        Err(e) => {
            assert!(e.status >= 400 && e.status < 600);
            assert!(!e.reason.is_empty());
        }
    }
});
