//! A strict, bounded parser of a proxy request head, and the proxy's HTTP answers.
//!
//! Only what a forward proxy needs: `CONNECT host:port HTTP/1.x` and, when plain HTTP is on,
//! absolute-URI requests (`GET http://host[:port]/path HTTP/1.x`). Anything odd (bare LF,
//! folded or control-character headers, a Host header naming another host, both
//! Content-Length and Transfer-Encoding) is refused rather than interpreted: the request is
//! forwarded to a server whose parser may disagree with ours.
//!
//! std only: the fuzz targets compile this file on its own.

use std::fmt;

/// The most bytes a request head may take, terminator included.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most header lines.
const MAX_HEADERS: usize = 64;

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A tunnel to `host:port`. `host` is lower-case, without a trailing dot; an IPv6 literal
    /// is written without brackets.
    Connect { host: String, port: u16 },
    /// An absolute-URI request, to be sent on in origin form.
    Plain {
        method: String,
        host: String,
        port: u16,
        /// Path and query, starting with `/`.
        path: String,
        /// Header lines as received, minus hop-by-hop proxy headers.
        headers: Vec<(String, String)>,
    },
}

impl Request {
    /// The bytes of body that follow a plain request's head (its Content-Length, which
    /// [`parse_head`] checked; 0 without one). A tunnel has no such bound.
    pub fn body_len(&self) -> Option<u64> {
        match self {
            Request::Connect { .. } => None,
            Request::Plain { headers, .. } => Some(
                headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0),
            ),
        }
    }

    pub fn host(&self) -> &str {
        match self {
            Request::Connect { host, .. } | Request::Plain { host, .. } => host,
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            Request::Connect { port, .. } | Request::Plain { port, .. } => *port,
        }
    }
}

/// Why a head was refused; `status` is the HTTP status to answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadError {
    pub status: u16,
    pub reason: String,
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}

fn bad(reason: impl Into<String>) -> HeadError {
    HeadError {
        status: 400,
        reason: reason.into(),
    }
}

/// The length of the head (through the blank line) if `buf` holds a whole one.
pub fn head_len(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Splits `host:port` (`[v6]:port` for IPv6). `default_port` applies when there is no port.
pub fn split_authority(auth: &str, default_port: Option<u16>) -> Result<(String, u16), HeadError> {
    let (host, port) = if let Some(rest) = auth.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| bad(format!("unclosed IPv6 literal in {auth:?}")))?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad(format!("bad IPv6 literal [{h}]")));
        }
        let port = match after {
            "" => None,
            p => Some(
                p.strip_prefix(':')
                    .ok_or_else(|| bad(format!("junk after ] in {auth:?}")))?,
            ),
        };
        (h.to_string(), port)
    } else {
        match auth.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (auth.to_string(), None),
        }
    };
    let port = match (port, default_port) {
        (Some(p), _) => match p.parse::<u16>() {
            Ok(n) if n != 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => return Err(bad(format!("bad port {p:?}"))),
        },
        (None, Some(d)) => d,
        (None, None) => return Err(bad(format!("{auth:?} has no port (write host:port)"))),
    };
    let host = host.strip_suffix('.').unwrap_or(&host).to_ascii_lowercase();
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b':');
    if !ok {
        return Err(bad(format!("bad host {host:?}")));
    }
    Ok((host, port))
}

/// A request head split into its request line's parts and its header lines.
struct SplitHead<'a> {
    request_line: &'a str,
    method: &'a str,
    target: &'a str,
    version: &'a str,
    headers: Vec<(String, String)>,
}

/// The checks every request head gets, whatever form its target has: the size bound, UTF-8,
/// CRLF line ends only, the header count and each header line's form, three request-line
/// parts.
fn split_head(head: &[u8]) -> Result<SplitHead<'_>, HeadError> {
    if head.len() > MAX_HEAD {
        return Err(HeadError {
            status: 431,
            reason: format!("request head longer than {MAX_HEAD} bytes"),
        });
    }
    let text = std::str::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
    let body = text
        .strip_suffix("\r\n\r\n")
        .ok_or_else(|| bad("request head does not end with a blank line"))?;
    if body.split("\r\n").any(|l| l.contains(['\r', '\n'])) {
        return Err(bad("bare CR or LF in the request head"));
    }
    let mut lines = body.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut headers = Vec::new();
    for line in lines {
        if headers.len() == MAX_HEADERS {
            return Err(HeadError {
                status: 431,
                reason: format!("more than {MAX_HEADERS} header lines"),
            });
        }
        headers.push(parse_header_line(line)?);
    }
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad(format!("malformed request line {request_line:?}")));
    };
    Ok(SplitHead {
        request_line,
        method,
        target,
        version,
        headers,
    })
}

fn check_method_and_version(method: &str, version: &str) -> Result<(), HeadError> {
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(bad(format!("bad method {method:?}")));
    }
    if version != "HTTP/1.1" && version != "HTTP/1.0" {
        return Err(HeadError {
            status: 505,
            reason: format!("unsupported version {version:?} (HTTP/1.0 or 1.1)"),
        });
    }
    Ok(())
}

/// The values of every header named `name` (case-insensitive), in order.
fn values<'h>(headers: &'h [(String, String)], name: &str) -> Vec<&'h str> {
    headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Parses a whole head (as delimited by [`head_len`]).
pub fn parse_head(head: &[u8]) -> Result<Request, HeadError> {
    let SplitHead {
        request_line,
        method,
        target,
        version,
        headers,
    } = split_head(head)?;
    if !request_line
        .bytes()
        .all(|b| b.is_ascii_graphic() || b == b' ')
    {
        return Err(bad("the request line is not printable ASCII"));
    }
    check_method_and_version(method, version)?;
    let header = |name: &str| values(&headers, name);
    if !header("content-length").is_empty() && !header("transfer-encoding").is_empty() {
        return Err(bad("both Content-Length and Transfer-Encoding"));
    }
    if header("host").len() > 1 {
        return Err(bad("more than one Host header"));
    }
    if method == "TRACE" {
        // TRACE echoes the request back, headers included: across a proxy that adds or keeps
        // headers it is a way to read them (cross-site tracing). No agent needs it.
        return Err(HeadError {
            status: 405,
            reason: "TRACE is refused: it echoes the request's headers back".into(),
        });
    }
    if method == "CONNECT" {
        let (host, port) = split_authority(target, None)?;
        return Ok(Request::Connect { host, port });
    }
    let rest = if let Some(r) = target.strip_prefix("http://") {
        r
    } else if target
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("https://"))
    {
        return Err(bad(
            "an https:// URL must go through CONNECT (set HTTPS_PROXY, not HTTP_PROXY)",
        ));
    } else {
        return Err(bad(format!(
            "{target:?} is not an absolute http:// URL (a proxy needs the whole URL)"
        )));
    };
    let (auth, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if auth.contains('@') {
        return Err(bad("credentials in the URL are not forwarded"));
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'#') {
        return Err(bad("bad characters in the URL path"));
    }
    // The proxy forwards exactly one request per plain connection: its head and the body its
    // Content-Length announces, nothing after (a pipelined request for another host would go
    // to this host's upstream unchecked). So the body's end must be known from the head.
    if !header("transfer-encoding").is_empty() {
        return Err(HeadError {
            status: 411,
            reason: "a Transfer-Encoding body is not forwarded over plain HTTP: send Content-Length, or use https://".into(),
        });
    }
    let lengths = header("content-length");
    if lengths.len() > 1
        || lengths
            .first()
            .is_some_and(|v| v.is_empty() || v.len() > 18 || !v.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad("Content-Length must be one decimal number"));
    }
    let (host, port) = split_authority(auth, Some(80))?;
    if let Some(h) = header("host").first() {
        let (hh, hp) = split_authority(h, Some(80))?;
        if hh != host || hp != port {
            return Err(bad(format!(
                "Host header {h:?} names another host than the URL ({host}:{port})"
            )));
        }
    }
    let headers = headers
        .into_iter()
        .filter(|(n, _)| {
            let n = n.to_ascii_lowercase();
            !(n.starts_with("proxy-") || n == "connection" || n == "keep-alive")
        })
        .collect();
    Ok(Request::Plain {
        method: method.to_string(),
        host,
        port,
        path,
        headers,
    })
}

/// A request inside a TLS connection the proxy terminated (a credential host): origin form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginRequest {
    pub method: String,
    /// Path and query as sent, starting with `/`.
    pub target: String,
    /// Header lines as received.
    pub headers: Vec<(String, String)>,
    /// The body's length (its Content-Length; 0 without one, or when chunked).
    pub body_len: u64,
    /// The body is `Transfer-Encoding: chunked` (its end found by [`ChunkedBody`]).
    pub chunked: bool,
}

/// Where a request's body ends: after `Content-Length` bytes, or at the end of its chunked
/// encoding. Bytes past it are never forwarded.
#[derive(Debug, Clone)]
pub enum BodyFrame {
    Length(u64),
    Chunked(ChunkedBody),
}

impl BodyFrame {
    pub fn of(req: &OriginRequest) -> BodyFrame {
        if req.chunked {
            BodyFrame::Chunked(ChunkedBody::default())
        } else {
            BodyFrame::Length(req.body_len)
        }
    }

    /// How many of `data`'s first bytes belong to the body (the rest follow it).
    pub fn take(&mut self, data: &[u8]) -> Result<usize, HeadError> {
        match self {
            BodyFrame::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(data.len());
                *left -= n as u64;
                Ok(n)
            }
            BodyFrame::Chunked(c) => c.feed(data),
        }
    }

    pub fn done(&self) -> bool {
        match self {
            BodyFrame::Length(left) => *left == 0,
            BodyFrame::Chunked(c) => c.done(),
        }
    }

    /// The most bytes worth reading next (a length body: no more than it has left).
    pub fn wants(&self, room: usize) -> usize {
        match self {
            BodyFrame::Length(left) => usize::try_from(*left).unwrap_or(usize::MAX).min(room),
            BodyFrame::Chunked(_) => room,
        }
    }
}

/// The most bytes of a chunk-size line or a line after chunk data.
const MAX_CHUNK_LINE: usize = 32;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Chunk {
    /// A chunk-size line.
    #[default]
    Size,
    Data,
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The CRLF after the last (0) chunk: trailers are refused.
    Last,
    Done,
}

/// Finds the end of a `Transfer-Encoding: chunked` body as its bytes arrive, strictly: hex
/// sizes (at most 15 digits) with no extensions, CRLF line ends, data exactly as long as its
/// size, no trailers. Anything else is refused rather than read one way here and another way
/// upstream (the body's end is where the next request would start).
#[derive(Debug, Clone, Default)]
pub struct ChunkedBody {
    state: Chunk,
    line: Vec<u8>,
    left: u64,
}

impl ChunkedBody {
    /// Feeds the next bytes; returns how many of them belong to the body.
    pub fn feed(&mut self, data: &[u8]) -> Result<usize, HeadError> {
        let mut i = 0;
        while i < data.len() {
            match self.state {
                Chunk::Done => return Ok(i),
                Chunk::Data => {
                    let n = usize::try_from(self.left)
                        .unwrap_or(usize::MAX)
                        .min(data.len() - i);
                    i += n;
                    self.left -= n as u64;
                    if self.left == 0 {
                        self.state = Chunk::DataEnd;
                    }
                }
                Chunk::Size | Chunk::DataEnd | Chunk::Last => {
                    let b = data[i];
                    i += 1;
                    self.line.push(b);
                    if self.line.len() > MAX_CHUNK_LINE {
                        return Err(bad("a chunked body's line is too long"));
                    }
                    if b == b'\n' {
                        let line = std::mem::take(&mut self.line);
                        self.line_done(&line)?;
                    }
                }
            }
        }
        Ok(i)
    }

    fn line_done(&mut self, line: &[u8]) -> Result<(), HeadError> {
        let text = line
            .strip_suffix(b"\r\n")
            .ok_or_else(|| bad("a chunked body's line does not end with CRLF"))?;
        match self.state {
            Chunk::DataEnd if text.is_empty() => self.state = Chunk::Size,
            Chunk::DataEnd => return Err(bad("chunk data longer than its size")),
            Chunk::Last if text.is_empty() => self.state = Chunk::Done,
            Chunk::Last => {
                return Err(bad(
                    "trailers are not forwarded on a connection the proxy adds a credential to",
                ))
            }
            _ => {
                if text.is_empty() || text.len() > 15 || !text.iter().all(u8::is_ascii_hexdigit) {
                    return Err(bad(
                        "a chunk size must be 1 to 15 hex digits (no extensions)",
                    ));
                }
                let size = text.iter().fold(0u64, |n, &d| {
                    n * 16 + u64::from((d as char).to_digit(16).unwrap_or(0))
                });
                if size == 0 {
                    self.state = Chunk::Last;
                } else {
                    self.left = size;
                    self.state = Chunk::Data;
                }
            }
        }
        Ok(())
    }

    pub fn done(&self) -> bool {
        self.state == Chunk::Done
    }
}

/// Headers that concern one hop only; the proxy drops them and frames the request itself.
const HOP_BY_HOP: [&str; 5] = ["connection", "keep-alive", "te", "upgrade", "trailer"];

/// Parses an origin-form request head (`GET /path HTTP/1.1`) for `host:port`, as strictly as
/// [`parse_head`]: one request whose end the proxy can find (Content-Length, or one
/// `Transfer-Encoding: chunked` read by [`ChunkedBody`]: the proxy forwards exactly one request
/// per connection, and a second one must not reach the upstream unchecked), a Host header
/// naming `host` if there is one.
pub fn parse_origin_head(head: &[u8], host: &str, port: u16) -> Result<OriginRequest, HeadError> {
    let SplitHead {
        request_line: _,
        method,
        target,
        version,
        headers,
    } = split_head(head)?;
    check_method_and_version(method, version)?;
    if !target.starts_with('/') || target.bytes().any(|b| !b.is_ascii_graphic() || b == b'#') {
        return Err(bad(
            "the request target must be a path (origin form) of printable ASCII",
        ));
    }
    if method == "TRACE" || method == "CONNECT" {
        return Err(HeadError {
            status: 405,
            reason: format!("{method} is refused on a connection the proxy adds a credential to"),
        });
    }
    let named = |name: &str| values(&headers, name);
    let codings = named("transfer-encoding");
    let chunked = match codings.as_slice() {
        [] => false,
        [c] if c.eq_ignore_ascii_case("chunked") => true,
        _ => {
            return Err(HeadError {
                status: 411,
                reason: "a body in another Transfer-Encoding than one \"chunked\" is not forwarded with a credential: send Content-Length".into(),
            })
        }
    };
    let lengths = named("content-length");
    if chunked && !lengths.is_empty() {
        return Err(bad("both Content-Length and Transfer-Encoding"));
    }
    if lengths.len() > 1
        || lengths
            .first()
            .is_some_and(|v| v.is_empty() || v.len() > 18 || !v.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad("Content-Length must be one decimal number"));
    }
    let body_len = lengths
        .first()
        .map_or(Ok(0), |v| v.parse())
        .map_err(|_| bad("bad Content-Length"))?;
    let hosts = named("host");
    if hosts.len() > 1 {
        return Err(bad("more than one Host header"));
    }
    if let Some(h) = hosts.first() {
        let (hh, hp) = split_authority(h, Some(port))?;
        if hh != host || hp != port {
            return Err(bad(format!(
                "Host header {h:?} names another host than {host}:{port}"
            )));
        }
    }
    let headers = headers
        .into_iter()
        .filter(|(n, _)| {
            let n = n.to_ascii_lowercase();
            !(n.starts_with("proxy-") || HOP_BY_HOP.contains(&n.as_str()))
        })
        .collect();
    Ok(OriginRequest {
        method: method.to_string(),
        target: target.to_string(),
        headers,
        body_len,
        chunked,
    })
}

fn parse_header_line(line: &str) -> Result<(String, String), HeadError> {
    if line.starts_with([' ', '\t']) {
        return Err(bad("folded header lines are not accepted"));
    }
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| bad(format!("header line without a colon: {line:?}")))?;
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(bad(format!("bad header name {name:?}")));
    }
    let value = value.trim_matches([' ', '\t']);
    if value.bytes().any(|b| (b < b' ' && b != b'\t') || b == 0x7f) {
        return Err(bad(format!("control characters in header {name}")));
    }
    Ok((name.to_string(), value.to_string()))
}

/// The request as sent upstream: origin form, the proxy's hop-by-hop headers dropped, one
/// request per connection (`Connection: close`), so a client cannot queue a second request
/// for another host on a tunnel that was checked for this one.
pub fn origin_form(req: &Request) -> Option<Vec<u8>> {
    let Request::Plain {
        method,
        host,
        port,
        path,
        headers,
    } = req
    else {
        return None;
    };
    let mut out = format!("{method} {path} HTTP/1.1\r\n");
    let has_host = headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host"));
    if !has_host {
        let h = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        if *port == 80 {
            out.push_str(&format!("Host: {h}\r\n"));
        } else {
            out.push_str(&format!("Host: {h}:{port}\r\n"));
        }
    }
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("Connection: close\r\n\r\n");
    Some(out.into_bytes())
}

fn status_text(status: u16) -> &'static str {
    match status {
        200 => "Connection established",
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

/// The most of the reason a refusal's status line carries.
const MAX_REASON_PHRASE: usize = 200;

/// The status line's reason phrase: for a refusal, the reason itself. curl, pip and git show
/// the status line but not the body, so a bare "Forbidden" left the agent guessing (and pip
/// retrying). Only printable ASCII (a reason phrase must not carry CR/LF), bounded.
fn reason_phrase(status: u16, body: &str) -> String {
    let first = body.lines().next().unwrap_or("").trim();
    if status == 200 || first.is_empty() {
        return status_text(status).to_string();
    }
    first
        .chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .take(MAX_REASON_PHRASE)
        .collect()
}

/// A complete response that closes the connection, with `body` as text for the agent, whose
/// first line is also the status line's reason phrase.
pub fn response(status: u16, body: &str) -> Vec<u8> {
    let reason = reason_phrase(status, body);
    let body = format!("{}\n", body.trim_end());
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Gvisor-Hardened-Egress: {}\r\n\r\n{body}",
        body.len(),
        if status == 200 { "allowed" } else { "denied" },
    )
    .into_bytes()
}

/// The answer to an allowed CONNECT.
pub const CONNECT_OK: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

#[cfg(test)]
mod tests;
