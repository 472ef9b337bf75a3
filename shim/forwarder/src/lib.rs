//! The framing protocol between the in-sandbox forwarder and the shim's egress proxy.
//!
//! The forwarder is started with `runsc exec` and its stdin/stdout are pipes to the shim. Every
//! TCP connection the workload makes to the forwarder's listen address becomes a *stream* on
//! those pipes. runsc 20221219 gives the host no EOF when a process inside closes its stdout
//! (the host `runsc exec` process holds the pipe too), so nothing is signalled by closing a
//! pipe: every event is a frame.
//!
//! A frame is a 9-byte header and a payload:
//!
//! ```text
//! +------+-----------+-----------+-------------+
//! | type | stream    | length    | payload     |
//! | u8   | u32 BE    | u32 BE    | length bytes|
//! +------+-----------+-----------+-------------+
//! ```
//!
//! | type | name   | direction | stream | payload |
//! |------|--------|-----------|--------|---------|
//! | 1    | HELLO  | fwd→host  | 0      | `GVHF`, version u16 BE, listen address (UTF-8) |
//! | 2    | OPEN   | fwd→host  | new id | the workload's address (UTF-8), for the audit |
//! | 3    | DATA   | both      | id     | bytes (1..=[`MAX_PAYLOAD`]) |
//! | 4    | EOF    | both      | id     | none: the sender sends no more DATA (half-close) |
//! | 5    | CLOSE  | both      | id     | none: reset, both directions are gone |
//! | 6    | CREDIT | both      | id     | u32 BE: the receiver consumed this many bytes |
//! | 7    | FATAL  | fwd→host  | 0      | why the forwarder stops (UTF-8) |
//! | 8    | REFUSED| fwd→host  | 0      | the workload's address (UTF-8): a connection the forwarder closed unanswered, past its `--max-connections` |
//! | 9    | CONNECT| host→fwd  | new id | the port (u16 BE) to dial on the sandbox's loopback: a connection to a published port |
//! | 10   |ACCEPTED| fwd→host  | id     | none: the CONNECT's dial succeeded, DATA may flow |
//!
//! HELLO is the first frame and is sent only once the listening socket is bound (or, with no
//! egress listener, once the forwarder runs): it is the readiness signal. Each side opens
//! streams in its own half of the ids, so the two never collide: the forwarder's (OPEN, a
//! workload's outbound connection) are below [`HOST_STREAM`], the shim's (CONNECT, a client's
//! connection to a published port) have that bit set. Ids are not reused while open. The shim
//! sends nothing on a CONNECT's stream before ACCEPTED; a dial that fails, or a port the
//! forwarder was not told to serve, is answered with CLOSE. A stream is gone for a side once it has both sent and received EOF or CLOSE,
//! or sent or received a CLOSE. Frames for an unknown stream are dropped: they are stragglers
//! from a stream one side already reset.
//!
//! Flow control: each side may have at most [`INITIAL_WINDOW`] bytes of DATA per stream that
//! the other side has not yet acknowledged with CREDIT. A receiver sends CREDIT only once the
//! bytes left its buffer (were written to the socket), so a slow reader stalls only its own
//! stream and neither side ever buffers more than the window per stream. Sending more than
//! the window is a protocol error that ends the session.

use std::fmt;
use std::io::{self, Read};

/// The first bytes of a HELLO payload.
pub const MAGIC: [u8; 4] = *b"GVHF";
/// The protocol version this crate speaks.
/// 2: REFUSED (a shim speaking 1 would take it for garbage, so the two must match).
/// 3: CONNECT and ACCEPTED, streams the shim opens.
pub const VERSION: u16 = 3;
/// The bit set in every stream id the shim opens (CONNECT), clear in the forwarder's (OPEN).
pub const HOST_STREAM: u32 = 0x8000_0000;
/// Bytes of a frame header.
pub const HEADER_LEN: usize = 9;
/// The largest DATA payload; larger frames are refused by the decoder.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Unacknowledged DATA bytes a side may send on one stream.
pub const INITIAL_WINDOW: u32 = 256 * 1024;
/// Where the forwarder listens when not told otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:3128";
/// Where the hardened spec mounts the forwarder binary inside the sandbox.
pub const IN_SANDBOX_PATH: &str = "/.gvisor-hardened/forwarder";

/// Frame type codes.
mod kind {
    pub const HELLO: u8 = 1;
    pub const OPEN: u8 = 2;
    pub const DATA: u8 = 3;
    pub const EOF: u8 = 4;
    pub const CLOSE: u8 = 5;
    pub const CREDIT: u8 = 6;
    pub const FATAL: u8 = 7;
    pub const REFUSED: u8 = 8;
    pub const CONNECT: u8 = 9;
    pub const ACCEPTED: u8 = 10;
}

/// One decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello { version: u16, listen: String },
    Open { stream: u32, peer: String },
    Data { stream: u32, data: Vec<u8> },
    Eof { stream: u32 },
    Close { stream: u32 },
    Credit { stream: u32, bytes: u32 },
    Fatal { message: String },
    Refused { peer: String },
    Connect { stream: u32, port: u16 },
    Accepted { stream: u32 },
}

/// Why bytes are not a valid frame. Any of these ends the session: the two sides no longer
/// agree on where frames begin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    UnknownType(u8),
    TooLong { kind: u8, len: u32 },
    BadHello(&'static str),
    BadPayload { kind: u8, reason: &'static str },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::UnknownType(t) => write!(f, "unknown frame type {t}"),
            DecodeError::TooLong { kind, len } => {
                write!(
                    f,
                    "frame type {kind} with {len} payload bytes (max {MAX_PAYLOAD})"
                )
            }
            DecodeError::BadHello(why) => write!(f, "bad HELLO: {why}"),
            DecodeError::BadPayload { kind, reason } => {
                write!(f, "bad payload for frame type {kind}: {reason}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

impl From<DecodeError> for io::Error {
    fn from(e: DecodeError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

fn put_header(out: &mut Vec<u8>, kind: u8, stream: u32, len: usize) {
    out.push(kind);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&(len as u32).to_be_bytes());
}

/// Writes the header of a DATA frame into `buf[..HEADER_LEN]`, for senders that read the
/// payload straight into `buf[HEADER_LEN..]`.
pub fn data_header(buf: &mut [u8], stream: u32, len: usize) {
    debug_assert!(len <= MAX_PAYLOAD);
    buf[0] = kind::DATA;
    buf[1..5].copy_from_slice(&stream.to_be_bytes());
    buf[5..9].copy_from_slice(&(len as u32).to_be_bytes());
}

impl Frame {
    /// Appends the frame's bytes to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Hello { version, listen } => {
                put_header(out, kind::HELLO, 0, 6 + listen.len());
                out.extend_from_slice(&MAGIC);
                out.extend_from_slice(&version.to_be_bytes());
                out.extend_from_slice(listen.as_bytes());
            }
            Frame::Open { stream, peer } => {
                put_header(out, kind::OPEN, *stream, peer.len());
                out.extend_from_slice(peer.as_bytes());
            }
            Frame::Data { stream, data } => {
                put_header(out, kind::DATA, *stream, data.len());
                out.extend_from_slice(data);
            }
            Frame::Eof { stream } => put_header(out, kind::EOF, *stream, 0),
            Frame::Close { stream } => put_header(out, kind::CLOSE, *stream, 0),
            Frame::Credit { stream, bytes } => {
                put_header(out, kind::CREDIT, *stream, 4);
                out.extend_from_slice(&bytes.to_be_bytes());
            }
            Frame::Fatal { message } => {
                let m = &message.as_bytes()[..message.len().min(MAX_PAYLOAD)];
                put_header(out, kind::FATAL, 0, m.len());
                out.extend_from_slice(m);
            }
            Frame::Refused { peer } => {
                put_header(out, kind::REFUSED, 0, peer.len());
                out.extend_from_slice(peer.as_bytes());
            }
            Frame::Connect { stream, port } => {
                put_header(out, kind::CONNECT, *stream, 2);
                out.extend_from_slice(&port.to_be_bytes());
            }
            Frame::Accepted { stream } => put_header(out, kind::ACCEPTED, *stream, 0),
        }
    }

    /// The frame's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// The stream a frame belongs to (0 for session frames).
    pub fn stream(&self) -> u32 {
        match self {
            Frame::Hello { .. } | Frame::Fatal { .. } | Frame::Refused { .. } => 0,
            Frame::Open { stream, .. }
            | Frame::Data { stream, .. }
            | Frame::Eof { stream }
            | Frame::Close { stream }
            | Frame::Credit { stream, .. }
            | Frame::Connect { stream, .. }
            | Frame::Accepted { stream } => *stream,
        }
    }
}

/// A parsed header: what follows and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub stream: u32,
    pub len: u32,
}

/// Parses and checks a header (type known, length within bounds for the type).
pub fn parse_header(h: &[u8; HEADER_LEN]) -> Result<Header, DecodeError> {
    let kind = h[0];
    let stream = u32::from_be_bytes([h[1], h[2], h[3], h[4]]);
    let len = u32::from_be_bytes([h[5], h[6], h[7], h[8]]);
    let max = match kind {
        kind::EOF | kind::CLOSE | kind::ACCEPTED => 0,
        kind::CREDIT => 4,
        kind::CONNECT => 2,
        kind::HELLO | kind::OPEN | kind::DATA | kind::FATAL | kind::REFUSED => MAX_PAYLOAD as u32,
        other => return Err(DecodeError::UnknownType(other)),
    };
    if len > max {
        return Err(DecodeError::TooLong { kind, len });
    }
    Ok(Header { kind, stream, len })
}

/// Builds a frame from a checked header and exactly `header.len` payload bytes.
pub fn frame_from_parts(h: Header, payload: Vec<u8>) -> Result<Frame, DecodeError> {
    let text = |p: Vec<u8>, kind: u8| {
        String::from_utf8(p).map_err(|_| DecodeError::BadPayload {
            kind,
            reason: "not UTF-8",
        })
    };
    let needs_stream = |kind: u8| {
        if h.stream == 0 {
            Err(DecodeError::BadPayload {
                kind,
                reason: "stream 0 is the session",
            })
        } else {
            Ok(h.stream)
        }
    };
    // A stream only the shim opens: its id carries HOST_STREAM.
    let host_stream = |kind: u8| {
        if h.stream & HOST_STREAM == 0 {
            Err(DecodeError::BadPayload {
                kind,
                reason: "not a stream the shim opened",
            })
        } else {
            Ok(h.stream)
        }
    };
    Ok(match h.kind {
        kind::HELLO => {
            if payload.len() < 6 || payload[..4] != MAGIC {
                return Err(DecodeError::BadHello("no GVHF magic"));
            }
            let version = u16::from_be_bytes([payload[4], payload[5]]);
            let listen = String::from_utf8(payload[6..].to_vec())
                .map_err(|_| DecodeError::BadHello("listen address is not UTF-8"))?;
            Frame::Hello { version, listen }
        }
        kind::OPEN => {
            if h.stream & HOST_STREAM != 0 {
                return Err(DecodeError::BadPayload {
                    kind: h.kind,
                    reason: "OPEN of a stream id in the shim's half",
                });
            }
            Frame::Open {
                stream: needs_stream(h.kind)?,
                peer: text(payload, h.kind)?,
            }
        }
        kind::DATA => {
            if payload.is_empty() {
                return Err(DecodeError::BadPayload {
                    kind: h.kind,
                    reason: "empty DATA",
                });
            }
            Frame::Data {
                stream: needs_stream(h.kind)?,
                data: payload,
            }
        }
        kind::EOF => Frame::Eof {
            stream: needs_stream(h.kind)?,
        },
        kind::CLOSE => Frame::Close {
            stream: needs_stream(h.kind)?,
        },
        kind::CREDIT => {
            let b: [u8; 4] =
                payload
                    .as_slice()
                    .try_into()
                    .map_err(|_| DecodeError::BadPayload {
                        kind: h.kind,
                        reason: "CREDIT carries 4 bytes",
                    })?;
            Frame::Credit {
                stream: needs_stream(h.kind)?,
                bytes: u32::from_be_bytes(b),
            }
        }
        kind::FATAL => Frame::Fatal {
            message: String::from_utf8_lossy(&payload).into_owned(),
        },
        kind::REFUSED => Frame::Refused {
            peer: text(payload, h.kind)?,
        },
        kind::CONNECT => {
            let port = match payload.as_slice() {
                [hi, lo] => u16::from_be_bytes([*hi, *lo]),
                _ => {
                    return Err(DecodeError::BadPayload {
                        kind: h.kind,
                        reason: "CONNECT carries a 2-byte port",
                    })
                }
            };
            if port == 0 {
                return Err(DecodeError::BadPayload {
                    kind: h.kind,
                    reason: "CONNECT to port 0",
                });
            }
            Frame::Connect {
                stream: host_stream(h.kind)?,
                port,
            }
        }
        kind::ACCEPTED => Frame::Accepted {
            stream: host_stream(h.kind)?,
        },
        other => return Err(DecodeError::UnknownType(other)),
    })
}

/// Decodes one frame from the front of `buf`: `Ok(None)` when more bytes are needed,
/// else the frame and how many bytes it used.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame, usize)>, DecodeError> {
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let h = parse_header(head)?;
    let end = HEADER_LEN + h.len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let frame = frame_from_parts(h, buf[HEADER_LEN..end].to_vec())?;
    Ok(Some((frame, end)))
}

/// Reads one frame from a blocking reader: `Ok(None)` on a clean end of input between frames.
pub fn read_frame<R: Read>(r: &mut R) -> io::Result<Option<Frame>> {
    let mut head = [0u8; HEADER_LEN];
    let mut got = 0;
    while got < HEADER_LEN {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let h = parse_header(&head)?;
    let mut payload = vec![0u8; h.len as usize];
    r.read_exact(&mut payload)?;
    Ok(Some(frame_from_parts(h, payload)?))
}

/// A receiver's side of one stream's window: counts bytes received but not yet credited back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecvWindow {
    outstanding: u32,
    consumed: u32,
}

impl RecvWindow {
    /// Accounts for `n` received bytes; an error if the sender overran its window.
    pub fn receive(&mut self, n: usize) -> Result<(), DecodeError> {
        let total = self.outstanding as usize + n;
        if total > INITIAL_WINDOW as usize {
            return Err(DecodeError::BadPayload {
                kind: kind::DATA,
                reason: "DATA beyond the flow-control window",
            });
        }
        self.outstanding = total as u32;
        Ok(())
    }

    /// Accounts for `n` bytes that left the buffer; returns the CREDIT to send now, if any.
    /// Credit is batched (a quarter window) so a busy stream is not one CREDIT per DATA.
    pub fn consume(&mut self, n: usize, idle: bool) -> Option<u32> {
        self.consumed += n as u32;
        if self.consumed > 0 && (idle || self.consumed >= INITIAL_WINDOW / 4) {
            let c = self.consumed;
            self.consumed = 0;
            self.outstanding -= c;
            Some(c)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests;

/// Whether `/proc/net/tcp` (or `tcp6`) text shows a socket listening on `addr`. Addresses there
/// are the kernel's in-memory words in hex (IPv4: one little-endian u32; IPv6: four of them),
/// ports big-endian hex; state `0A` is LISTEN.
pub fn listening(table: &str, addr: std::net::SocketAddr) -> bool {
    let local = match addr.ip() {
        std::net::IpAddr::V4(ip) => format!("{:08X}", u32::from_le_bytes(ip.octets())),
        std::net::IpAddr::V6(ip) => ip
            .octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_le_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    let want = format!("{local}:{:04X}", addr.port());
    table.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let (_slot, local, _remote, state) =
            (fields.next(), fields.next(), fields.next(), fields.next());
        local.is_some_and(|l| l.eq_ignore_ascii_case(&want)) && state == Some("0A")
    })
}

#[cfg(test)]
mod listening_tests {
    use super::listening;

    // Lines as Linux and gVisor print them: 127.0.0.1:3128 listening, 127.0.0.1:8080 connected.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0C38 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65532        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000 65534        0 2 1 0000000000000000 100 0 0 10 0
";

    #[test]
    fn a_listening_socket_on_the_address_is_found() {
        assert!(listening(TCP, "127.0.0.1:3128".parse().unwrap()));
    }

    #[test]
    fn a_connected_socket_or_another_port_is_not_a_listener() {
        assert!(!listening(TCP, "127.0.0.1:8080".parse().unwrap()));
        assert!(!listening(TCP, "127.0.0.1:3129".parse().unwrap()));
        assert!(!listening(TCP, "127.0.0.2:3128".parse().unwrap()));
        assert!(!listening("", "127.0.0.1:3128".parse().unwrap()));
    }

    #[test]
    fn ipv6_loopback_is_encoded_word_by_word() {
        let tcp6 =
            "  sl  local_address                         remote_address                        st
   0: 00000000000000000000000001000000:0C38 00000000000000000000000000000000:0000 0A
";
        assert!(listening(tcp6, "[::1]:3128".parse().unwrap()));
    }
}
