//! A minimal HTTP/1.1 server for one resource, `GET /metrics`: one short-lived thread per
//! connection, at most [`MAX_CONNECTIONS`] at once, each with read and write deadlines, one
//! request per connection (`Connection: close`), a bounded request head. What it answers is
//! decided by [`route`], which does no I/O.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Prometheus scrapes one target with one connection at a time; a few operators with curl on
/// top fit easily. More than this at once are answered 503 and closed.
const MAX_CONNECTIONS: usize = 32;

/// A request head larger than this is refused (431): a scraper sends a few hundred bytes.
const MAX_HEAD: usize = 8 << 10;

/// How long a client may take to send its whole request head, and to take the response.
const DEADLINE: Duration = Duration::from_secs(10);

/// The content type of the text exposition format, version 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics` (with any query): the exposition; `head` for `HEAD`, without the body.
    Metrics {
        head: bool,
    },
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// What a request head (the bytes before the blank line) asks for.
pub fn route(head: &[u8]) -> Route {
    let Ok(head) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let request_line = head.split("\r\n").next().unwrap_or("");
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
    match (method, path) {
        ("GET", "/metrics") => Route::Metrics { head: false },
        ("HEAD", "/metrics") => Route::Metrics { head: true },
        (_, "/metrics") => Route::MethodNotAllowed,
        _ => Route::NotFound,
    }
}

/// The whole response to `route`; `body` renders the exposition when asked for.
pub fn response(route: Route, body: impl FnOnce() -> String) -> Vec<u8> {
    let (status, content_type, body, send_body) = match route {
        Route::Metrics { head } => ("200 OK", CONTENT_TYPE, body(), !head),
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
        if route == Route::MethodNotAllowed {
            "Allow: GET, HEAD\r\n"
        } else {
            ""
        }
    )
    .into_bytes();
    if send_body {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// Accepts connections for ever; `render` makes the exposition for each scrape.
pub fn serve(
    listener: TcpListener,
    render: Arc<dyn Fn() -> String + Send + Sync>,
) -> std::io::Result<std::convert::Infallible> {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let (mut stream, _) = match listener.accept() {
            Ok(c) => c,
            // A client that went away between SYN and accept, or a full fd table for a moment:
            // not a reason to stop serving.
            Err(e) => {
                eprintln!("audit metrics: accept: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
            let _ = stream.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
            continue;
        }
        let (active, render) = (active.clone(), render.clone());
        std::thread::spawn(move || {
            let _ = handle(stream, &*render);
            active.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn handle(
    mut stream: TcpStream,
    render: &(dyn Fn() -> String + Send + Sync),
) -> std::io::Result<()> {
    // One deadline for the whole head, not per read: a client dripping a byte at a time must
    // not hold one of the few connection slots for long.
    let deadline = Instant::now() + DEADLINE;
    stream.set_write_timeout(Some(DEADLINE))?;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let route = loop {
        if let Some(end) = find(&head, b"\r\n\r\n") {
            break route(&head[..end]);
        }
        if head.len() > MAX_HEAD {
            stream.write_all(
                b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )?;
            lingering_close(stream);
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        let n = stream.read(&mut buf)?;
        if n == 0 {
            // Closed before a whole head: nothing to answer.
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    stream.write_all(&response(route, render))?;
    lingering_close(stream);
    Ok(())
}

/// Closing a socket with unread input makes the kernel send a reset, which can destroy the
/// response before the client reads it. So: end our side, then discard what the client still
/// sends until it closes, for at most a second or two and a bounded amount.
fn lingering_close(mut stream: TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut buf = [0u8; 8192];
    let mut left: usize = 1 << 20;
    while left > 0 {
        let wait = deadline.saturating_duration_since(Instant::now());
        if wait.is_zero() || stream.set_read_timeout(Some(wait)).is_err() {
            break;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_metrics_with_or_without_a_query_is_the_exposition() {
        let head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*";
        assert_eq!(route(head), Route::Metrics { head: false });
        assert_eq!(
            route(b"GET /metrics?x=1 HTTP/1.0"),
            Route::Metrics { head: false }
        );
        assert_eq!(
            route(b"HEAD /metrics HTTP/1.1"),
            Route::Metrics { head: true }
        );
    }

    #[test]
    fn other_paths_methods_and_garbage_are_refused() {
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b"POST /metrics HTTP/1.1"), Route::MethodNotAllowed);
        assert_eq!(route(b"GET /metrics"), Route::BadRequest);
        assert_eq!(route(b"GET /metrics HTTP/1.1 extra"), Route::BadRequest);
        assert_eq!(route(b"GET metrics HTTP/1.1"), Route::BadRequest);
        assert_eq!(route(b"\xff\xfe"), Route::BadRequest);
        assert_eq!(route(b""), Route::BadRequest);
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
}
