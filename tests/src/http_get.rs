//! One HTTP/1.0 GET from a server the harness started or reaches on its own networks (an
//! exporter, a Prometheus): the whole body until the server closes. Also compiled into
//! policy-injector's own Prometheus test (`#[path]`), which cannot depend on this crate.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET `target` from `addr`, with `bearer` as the `Authorization: Bearer` token when given:
/// the status and the body.
pub fn get(addr: SocketAddr, target: &str, bearer: Option<&str>) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let auth = bearer
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {target} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_string()))
}

/// `q` percent-encoded for a query string (a PromQL expression in `?query=`).
pub fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
