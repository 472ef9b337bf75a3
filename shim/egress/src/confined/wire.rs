//! What the shim and a sandbox's proxy process say to each other over their socket: one JSON
//! object per line, each side's lines bounded. The proxy process is the side facing the
//! sandbox, so the shim reads its lines as it reads the sandbox's bytes: bounded, typed, and
//! anything it does not know is an error that ends the process.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

use policy_injector::EgressPlan;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use crate::audit::{EgressEvent, SandboxRef};
use crate::credentials::CaMaterial;

/// The longest line the shim reads from a proxy process (an audit record with a long reason).
pub const MAX_FROM_PROXY: usize = 64 * 1024;
/// The longest line a proxy process reads from the shim (the configuration with its plan).
pub const MAX_TO_PROXY: usize = 4 * 1024 * 1024;

/// Everything the proxy process knows about its sandbox, sent once at its start.
#[derive(Debug, Serialize, Deserialize)]
pub struct Config {
    pub plan: EgressPlan,
    pub sandbox: SandboxRef,
    pub node_addresses: Vec<IpAddr>,
    /// The pod's network namespace, entered before the process gives up its privileges.
    pub netns: Option<PathBuf>,
    /// The uid and gid the process runs as from then on.
    pub uid: u32,
    pub hello_timeout_ms: u64,
    /// Which start of the forwarder this is (for its ready record).
    pub attempt: u32,
    /// The sandbox's CA, when its plan has credentials and one was made at create.
    pub ca: Option<CaMaterial>,
    /// The upstream trust anchors' text (read by the shim), or why there is none.
    pub anchors: Option<Result<String, String>>,
}

/// From the shim to the proxy process, after the configuration.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ToProxy {
    Resolved {
        id: u64,
        answer: Result<Vec<IpAddr>, String>,
    },
    /// A credential's value; its `Debug` is the enum's, so it is never logged (see `Value`).
    Value {
        id: u64,
        answer: Result<Value, String>,
    },
}

/// A credential's value in transit. Prints nothing of itself.
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
pub struct Value(pub String);

impl std::fmt::Debug for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Value(..)")
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.0);
    }
}

/// From the proxy process to the shim.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum FromProxy {
    /// An audit record's event; the shim adds who it is about itself.
    Event { event: EgressEvent },
    /// The forwarder opened a stream for the workload's connection from `peer`: its record
    /// is owed. The shim writes one itself for every stream still owed when the process ends
    /// without writing it (killed, crashed), so the trail stays whole.
    Opened { peer: String },
    /// A name on the allowlist to resolve (the shim resolves in the host's namespace, as the
    /// in-shim proxy did).
    Resolve { id: u64, host: String },
    /// The value of the credential the plan has for `host:port`.
    Value { id: u64, host: String, port: u16 },
    /// The session with the forwarder is over, and why; the process exits next.
    Ended { reason: String },
}

/// One line of at most `max` bytes, without its newline; `None` at the end of the stream. A
/// longer line is an error (nothing of it is kept past the bound).
pub async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    max: usize,
) -> io::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the stream ended inside a line",
                ))
            };
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a line longer than {max} bytes"),
            ));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take + usize::from(done));
        if done {
            return Ok(Some(line));
        }
    }
}

/// A message as one line.
pub fn line<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut v = serde_json::to_vec(msg).expect("wire messages serialise");
    v.push(b'\n');
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_whole_and_a_long_one_is_refused() {
        let mut r = tokio::io::BufReader::with_capacity(4, &b"ab\ncdefgh\nlast"[..]);
        assert_eq!(read_line(&mut r, 8).await.unwrap(), Some(b"ab".to_vec()));
        assert_eq!(
            read_line(&mut r, 8).await.unwrap(),
            Some(b"cdefgh".to_vec())
        );
        assert!(
            read_line(&mut r, 8).await.is_err(),
            "unterminated last line"
        );
        let mut r = &b"0123456789\n"[..];
        let e = read_line(&mut r, 8).await.unwrap_err();
        assert!(e.to_string().contains("longer than 8"), "{e}");
        let mut r = &b""[..];
        assert_eq!(read_line(&mut r, 8).await.unwrap(), None);
    }

    #[test]
    fn an_unknown_message_or_field_from_the_proxy_is_refused() {
        for text in [
            r#"{"kind":"exit","code":0}"#,
            r#"{"kind":"ended","reason":"x","extra":1}"#,
            r#"{"kind":"event","event":{"event":"exit"}}"#,
        ] {
            assert!(serde_json::from_str::<FromProxy>(text).is_err(), "{text}");
        }
        let ok: FromProxy = serde_json::from_str(
            r#"{"kind":"event","event":{"event":"egress-lookup","host":"h","source":"dns","answers":[]}}"#,
        )
        .unwrap();
        assert!(matches!(ok, FromProxy::Event { .. }));
    }

    #[test]
    fn a_value_in_transit_prints_nothing_of_itself() {
        let m = ToProxy::Value {
            id: 1,
            answer: Ok(Value("sk-planted".into())),
        };
        assert!(!format!("{m:?}").contains("planted"));
    }
}
