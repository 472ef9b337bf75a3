//! What the exporter answers, decided without I/O: [`route`] reads a request head (and checks
//! its bearer token), [`response`] writes the whole reply. The connections themselves are
//! `conn.rs`'s.

/// The content type of the text exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics` (with any query): the exposition; `head` for `HEAD`, without the body.
    Metrics {
        head: bool,
    },
    /// `GET /healthz`: "ok", for the kubelet's probe, which cannot hold a secret. It goes
    /// through the same connection handling as a scrape, so a silenced exporter fails it.
    Health {
        head: bool,
    },
    /// `/metrics` without the token the exporter was given.
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// What a request head (the bytes before the blank line) asks for; with a `token`, `/metrics`
/// needs `Authorization: Bearer TOKEN`.
pub fn route(head: &[u8], token: Option<&[u8]>) -> Route {
    let Ok(head) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || !target.starts_with('/') {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or("");
    let head_only = match (method, path) {
        ("GET", "/metrics" | "/healthz") => false,
        ("HEAD", "/metrics" | "/healthz") => true,
        (_, "/metrics" | "/healthz") => return Route::MethodNotAllowed,
        _ => return Route::NotFound,
    };
    if path == "/healthz" {
        return Route::Health { head: head_only };
    }
    match token {
        Some(token) if !lines.any(|l| bearer_matches(l, token)) => Route::Unauthorized,
        _ => Route::Metrics { head: head_only },
    }
}

/// Whether a header line is `Authorization: Bearer TOKEN` with this token (name and scheme
/// case-insensitive, as RFC 9110 and RFC 6750 have them).
fn bearer_matches(line: &str, token: &[u8]) -> bool {
    let Some((name, value)) = line.split_once(':') else {
        return false;
    };
    if !name.trim().eq_ignore_ascii_case("authorization") {
        return false;
    }
    let value = value.trim();
    let Some((scheme, credentials)) = value.split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer") && same(credentials.trim().as_bytes(), token)
}

/// Equality whose time depends on the lengths only, not on where the first difference is: a
/// client timing its 401s learns nothing about the token's bytes.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i % b.len().max(1)).copied().unwrap_or(0));
    }
    diff == 0
}

/// The whole response to `route`; `body` renders the exposition when asked for.
pub fn response(route: Route, body: impl FnOnce() -> String) -> Vec<u8> {
    let (status, content_type, body, send_body) = match route {
        Route::Metrics { head } => ("200 OK", CONTENT_TYPE, body(), !head),
        Route::Health { head } => ("200 OK", "text/plain", "ok\n".into(), !head),
        Route::Unauthorized => (
            "401 Unauthorized",
            "text/plain",
            "a bearer token is needed\n".into(),
            true,
        ),
        Route::NotFound => ("404 Not Found", "text/plain", "try /metrics\n".into(), true),
        Route::MethodNotAllowed => (
            "405 Method Not Allowed",
            "text/plain",
            "GET or HEAD\n".into(),
            true,
        ),
        Route::BadRequest => (
            "400 Bad Request",
            "text/plain",
            "bad request\n".into(),
            true,
        ),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
        body.len(),
        match route {
            Route::MethodNotAllowed => "Allow: GET, HEAD\r\n",
            Route::Unauthorized => "WWW-Authenticate: Bearer\r\n",
            _ => "",
        }
    )
    .into_bytes();
    if send_body {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_metrics_with_or_without_a_query_is_the_exposition() {
        let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*";
        assert_eq!(route(head, None), Route::Metrics { head: false });
        assert_eq!(
            route(b"GET /metrics?x=1 HTTP/1.0", None),
            Route::Metrics { head: false }
        );
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.1", None),
            Route::Metrics { head: true }
        );
    }

    #[test]
    fn other_paths_methods_and_garbage_are_refused() {
        assert_eq!(route(b"GET / HTTP/1.1", None), Route::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1", None),
            Route::MethodNotAllowed
        );
        assert_eq!(route(b"GET /metrics", None), Route::BadRequest);
        assert_eq!(
            route(b"GET /metrics HTTP/1.1 extra", None),
            Route::BadRequest
        );
        assert_eq!(route(b"GET metrics HTTP/1.1", None), Route::BadRequest);
        assert_eq!(route(b"\xff\xfe", None), Route::BadRequest);
        assert_eq!(route(b"", None), Route::BadRequest);
    }

    #[test]
    fn the_response_carries_the_exposition_content_type_and_length() {
        let r =
            String::from_utf8(response(Route::Metrics { head: false }, || "a 1\n".into())).unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(
            r.contains(&format!("Content-Type: {CONTENT_TYPE}\r\n")),
            "{r}"
        );
        assert!(r.contains("Content-Length: 4\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\na 1\n"), "{r}");
    }

    #[test]
    fn head_gets_the_length_without_the_body() {
        let r =
            String::from_utf8(response(Route::Metrics { head: true }, || "a 1\n".into())).unwrap();
        assert!(r.contains("Content-Length: 4\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\n"), "{r}");
    }

    #[test]
    fn a_refusal_never_renders_the_metrics() {
        let r = response(Route::NotFound, || panic!("rendered for a 404"));
        assert!(r.starts_with(b"HTTP/1.1 404"));
        let r = String::from_utf8(response(Route::MethodNotAllowed, String::new)).unwrap();
        assert!(r.contains("Allow: GET, HEAD\r\n"), "{r}");
    }

    const TOKEN: &[u8] = b"s3cret-token";

    #[test]
    fn with_a_token_metrics_need_the_bearer_header() {
        let with = |auth: &str| {
            route(
                format!("GET /metrics HTTP/1.1\r\nHost: x{auth}").as_bytes(),
                Some(TOKEN),
            )
        };
        assert_eq!(with(""), Route::Unauthorized);
        assert_eq!(
            with("\r\nAuthorization: Bearer s3cret-tokeN"),
            Route::Unauthorized
        );
        assert_eq!(
            with("\r\nAuthorization: Bearer s3cret-token2"),
            Route::Unauthorized
        );
        assert_eq!(
            with("\r\nAuthorization: Basic s3cret-token"),
            Route::Unauthorized
        );
        assert_eq!(
            with("\r\nX-Authorization: Bearer s3cret-token"),
            Route::Unauthorized
        );
        assert_eq!(
            with("\r\nauthorization:  bearer s3cret-token "),
            Route::Metrics { head: false }
        );
        assert_eq!(
            with("\r\nAuthorization: Bearer s3cret-token"),
            Route::Metrics { head: false }
        );
    }

    #[test]
    fn healthz_needs_no_token_and_shows_no_metrics() {
        let route = route(b"GET /healthz HTTP/1.1\r\nHost: x", Some(TOKEN));
        assert_eq!(route, Route::Health { head: false });
        let r = String::from_utf8(response(route, || panic!("rendered for healthz"))).unwrap();
        assert!(
            r.starts_with("HTTP/1.1 200 OK\r\n") && r.ends_with("\r\n\r\nok\n"),
            "{r}"
        );
    }

    #[test]
    fn a_refused_scrape_is_told_the_scheme_and_never_rendered() {
        let r = String::from_utf8(response(Route::Unauthorized, || {
            panic!("rendered for a 401")
        }))
        .unwrap();
        assert!(r.starts_with("HTTP/1.1 401 "), "{r}");
        assert!(r.contains("WWW-Authenticate: Bearer\r\n"), "{r}");
    }

    #[test]
    fn tokens_are_the_same_only_byte_for_byte() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"ab", b"abc"));
        assert!(!same(b"", b"a"));
        assert!(same(b"", b""));
    }
}
