//! A bounded reader of the TLS ClientHello at the start of a CONNECT tunnel, for its server
//! name (SNI). Nothing is decrypted or terminated: the bytes go upstream unchanged.
//!
//! Handles a ClientHello split across reads and across several TLS records (a large hello,
//! e.g. with post-quantum key shares, spans two). Refuses anything ambiguous: two SNI
//! extensions, two host names, a record that is not a handshake.
//!
//! std only: the fuzz targets compile this file on its own.

use std::fmt;

/// The most bytes of TLS records read while looking for the ClientHello.
pub const MAX_HELLO_BYTES: usize = 32 * 1024;

const RECORD_HEADER: usize = 5;
const CONTENT_HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;

/// What the ClientHello says, as far as the proxy cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello {
    /// The host name, lower-case without a trailing dot; `None` when the extension is absent.
    pub sni: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SniError {
    /// The tunnel does not start with a TLS handshake record.
    NotTls,
    /// More than [`MAX_HELLO_BYTES`] without a whole ClientHello.
    TooLarge,
    Malformed(&'static str),
}

impl fmt::Display for SniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SniError::NotTls => f.write_str("the tunnel did not start with a TLS ClientHello"),
            SniError::TooLarge => write!(f, "no ClientHello within {MAX_HELLO_BYTES} bytes"),
            SniError::Malformed(why) => write!(f, "malformed ClientHello: {why}"),
        }
    }
}

/// A cursor over a byte slice that refuses to read past its end.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], SniError> {
        if self.b.len() < n {
            return Err(SniError::Malformed(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }

    fn u8(&mut self, what: &'static str) -> Result<usize, SniError> {
        Ok(self.take(1, what)?[0] as usize)
    }

    fn u16(&mut self, what: &'static str) -> Result<usize, SniError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]) as usize)
    }

    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], SniError> {
        let n = self.u8(what)?;
        self.take(n, what)
    }

    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], SniError> {
        let n = self.u16(what)?;
        self.take(n, what)
    }
}

/// Looks for a whole ClientHello at the start of `buf` (the tunnel's first bytes):
/// `Ok(None)` when more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<ClientHello>, SniError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf[0] != CONTENT_HANDSHAKE {
        return Err(SniError::NotTls);
    }
    // Reassemble handshake bytes from consecutive records until the message is whole.
    let mut handshake: Vec<u8> = Vec::new();
    let mut at = 0;
    loop {
        let Some(header) = buf.get(at..at + RECORD_HEADER) else {
            return more(buf);
        };
        if header[0] != CONTENT_HANDSHAKE {
            return Err(SniError::Malformed(
                "a non-handshake record inside the ClientHello",
            ));
        }
        if header[1] != 3 {
            return Err(SniError::NotTls);
        }
        let len = u16::from_be_bytes([header[3], header[4]]) as usize;
        if len == 0 || len > 16 * 1024 + 256 {
            return Err(SniError::Malformed("bad record length"));
        }
        let Some(fragment) = buf.get(at + RECORD_HEADER..at + RECORD_HEADER + len) else {
            return more(buf);
        };
        handshake.extend_from_slice(fragment);
        at += RECORD_HEADER + len;
        if handshake.len() >= 4 {
            if handshake[0] != CLIENT_HELLO {
                return Err(SniError::Malformed(
                    "first handshake message is not a ClientHello",
                ));
            }
            let body_len =
                u32::from_be_bytes([0, handshake[1], handshake[2], handshake[3]]) as usize;
            if body_len + 4 > MAX_HELLO_BYTES {
                return Err(SniError::TooLarge);
            }
            if handshake.len() >= 4 + body_len {
                return client_hello(&handshake[4..4 + body_len]).map(Some);
            }
        }
    }
}

fn more(buf: &[u8]) -> Result<Option<ClientHello>, SniError> {
    if buf.len() >= MAX_HELLO_BYTES {
        Err(SniError::TooLarge)
    } else {
        Ok(None)
    }
}

fn client_hello(body: &[u8]) -> Result<ClientHello, SniError> {
    let mut c = Cur { b: body };
    c.take(2, "version")?;
    c.take(32, "random")?;
    let session = c.vec8("session id")?;
    if session.len() > 32 {
        return Err(SniError::Malformed("session id longer than 32 bytes"));
    }
    let suites = c.vec16("cipher suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(SniError::Malformed("cipher suites"));
    }
    if c.vec8("compression methods")?.is_empty() {
        return Err(SniError::Malformed("no compression method"));
    }
    if c.b.is_empty() {
        return Ok(ClientHello { sni: None });
    }
    let mut exts = Cur {
        b: c.vec16("extensions")?,
    };
    if !c.b.is_empty() {
        return Err(SniError::Malformed("bytes after the extensions"));
    }
    let mut sni = None;
    let mut seen_sni = false;
    while !exts.b.is_empty() {
        let kind = exts.u16("extension type")? as u16;
        let data = exts.vec16("extension data")?;
        if kind != EXT_SERVER_NAME {
            continue;
        }
        if seen_sni {
            return Err(SniError::Malformed("two server_name extensions"));
        }
        seen_sni = true;
        sni = server_name(data)?;
    }
    Ok(ClientHello { sni })
}

fn server_name(data: &[u8]) -> Result<Option<String>, SniError> {
    let mut c = Cur { b: data };
    let mut list = Cur {
        b: c.vec16("server name list")?,
    };
    if !c.b.is_empty() {
        return Err(SniError::Malformed("bytes after the server name list"));
    }
    let mut name = None;
    while !list.b.is_empty() {
        let kind = list.u8("server name type")?;
        let value = list.vec16("server name")?;
        if kind != 0 {
            continue;
        }
        if name.is_some() {
            return Err(SniError::Malformed("two host names"));
        }
        // A trailing dot (the root) is dropped; what is left must still be a name ("." alone
        // is not one: found by the fuzzer).
        let text = std::str::from_utf8(value)
            .ok()
            .map(|s| s.strip_suffix('.').unwrap_or(s))
            .filter(|s| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
            })
            .ok_or(SniError::Malformed("host name is not a DNS name"))?;
        name = Some(text.to_ascii_lowercase());
    }
    Ok(name)
}

#[cfg(test)]
mod tests;
