//! Fuzz target: the egress proxy's request-head parser on arbitrary bytes.
//!
//! The head comes from the sandbox: untrusted. The parser must answer every input with a
//! request or an HTTP error, never a panic; what it accepts must be sane (a host and a port),
//! and the origin-form request sent upstream must itself be exactly one well-formed head.
#![no_main]

// The parser is std only, so it is compiled here on its own (the shim's dependencies would
// otherwise all be built with coverage instrumentation).
#[path = "../../shim/src/egress/http.rs"]
mod http;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(n) = http::head_len(data) else {
        return;
    };
    match http::parse_head(&data[..n]) {
        Ok(req) => {
            assert!(!req.host().is_empty());
            assert_ne!(req.port(), 0);
            // A plain request's body end is known from its head (one request per connection).
            if let Some(len) = req.body_len() {
                assert!(len < 1_000_000_000_000_000_000, "{len}");
            }
            if let Some(out) = http::origin_form(&req) {
                assert_eq!(http::head_len(&out), Some(out.len()), "one head, nothing after");
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
