//! The tamper-evident audit chain: the line format, building the next line, and verification.
//! Pure: bytes in, bytes or a verdict out; the shim's writer and the CLI do the file I/O.
//!
//! # Format
//!
//! A log is a sequence of files in rotation order (`audit.jsonl.N` oldest ... `audit.jsonl.1`,
//! then the live `audit.jsonl`). Each line is one JSON object ending in `\n` and beginning
//! `{"seq":N,"prev":"<64 hex>",`:
//!
//! - the **hash of a line** is the sha256 of its bytes *without* the trailing newline (so a
//!   line reads the same to a hasher whether or not a tool kept its newline);
//! - `seq` grows by one per line across the whole log, rotations included;
//! - `prev` is the hash of the line before it in the log: for the first line of a rotated-in
//!   file, the last line of the previous file;
//! - every file begins with a **genesis** line (`"event":"genesis"`, the node name, the time, the
//!   writer's policy digest, and why the segment began). The genesis of a brand new log has
//!   `seq` 0 and `prev` = sha256 of [`GENESIS_SEED`].
//! - a sandbox's final record may carry `"sig":{...}` as its last member: an ed25519 signature
//!   over the hashes of all that sandbox's records (see [`sign`]).
//!
//! A writer that finds the end of the live file not to be a chained record (a log written
//! before the chain existed, or a line cut by a crash) never extends it: it starts a new
//! segment in place with a genesis whose `prev` is the hash of that last line, and
//! verification still reports the damage where it is.

mod report;
pub mod sign;
pub mod verify;
mod verify_trails;

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

pub use sign::{SealInput, SigFailure, Signature, SigningError};
pub use verify::{Break, BreakKind, Location, Summary, Verifier};

/// What the genesis of a brand new log links to: `prev` = sha256 of these bytes.
pub const GENESIS_SEED: &[u8] = b"gvisor-hardened audit log genesis v1";

/// The `event` of a genesis line.
pub const GENESIS_EVENT: &str = "genesis";

/// A sha256 digest, written as 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(Sha256::digest(bytes).into())
    }

    pub fn from_hex(s: &str) -> Option<Digest> {
        let bytes = s.as_bytes();
        if bytes.len() != 64 {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            if pair.iter().any(u8::is_ascii_uppercase) {
                // One spelling per digest: a hash compared as text must not have two.
                return None;
            }
            out[i] = (hi << 4 | lo) as u8;
        }
        Some(Digest(out))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// The hash of one line: sha256 of its bytes, a trailing newline excluded.
pub fn hash_line(line: &[u8]) -> Digest {
    Digest::of(line.strip_suffix(b"\n").unwrap_or(line))
}

/// The chain fields a new line carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub seq: u64,
    pub prev: Digest,
}

impl Link {
    /// The genesis of a brand new log.
    pub fn origin() -> Link {
        Link {
            seq: 0,
            prev: Digest::of(GENESIS_SEED),
        }
    }

    /// The link of the line that follows `line`, or `None` when `line` is not a chained record.
    pub fn after(line: &[u8]) -> Option<Link> {
        let head = Head::parse(line)?;
        Some(Link {
            seq: head.seq.checked_add(1)?,
            prev: hash_line(line),
        })
    }
}

/// The chain fields of a line, as far as the writer needs them.
#[derive(Deserialize)]
struct Head {
    seq: u64,
    prev: String,
}

impl Head {
    fn parse(line: &[u8]) -> Option<Head> {
        let head: Head = serde_json::from_slice(line).ok()?;
        Digest::from_hex(&head.prev)?;
        Some(head)
    }
}

/// Why a file begins a new chain segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GenesisReason {
    /// A brand new log: `prev` is the hash of [`GENESIS_SEED`].
    New,
    /// The file after a rotation: `prev` is the hash of the last line of the previous file.
    Rotated,
    /// The file ended in a line that is not a chained record (a log from before the chain, or
    /// an edited line): `prev` is that line's hash.
    AfterUnchainedLine,
    /// The file ended in a line without its newline (cut mid-line): a newline ends it, then the
    /// genesis, whose `prev` is the hash of the cut line.
    AfterCutLine,
}

/// Who wrote a genesis and under which policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin<'a> {
    /// RFC 3339 time of the write.
    pub time: &'a str,
    /// The node's host name.
    pub node: &'a str,
    /// sha256 of the writer's policy file.
    pub policy_sha256: &'a str,
}

/// How the end of the live file looks to the next writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail<'a> {
    /// Nothing written yet.
    Empty,
    /// The last line, whole (its newline not included).
    Line(&'a [u8]),
    /// Bytes after the last newline: the file was cut mid-line.
    Cut(&'a [u8]),
}

/// What must be written before the next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Extend the chain: the record gets this link.
    Record(Link),
    /// Begin a segment: a genesis with this link, then the record linked to the genesis.
    Genesis { link: Link, reason: GenesisReason },
}

/// Decides how the next record joins the log, from the end of the live file and, when the live
/// file is empty, the last line of the newest rotated file (`None` when there is none).
pub fn next(live: Tail<'_>, rotated_last_line: Option<&[u8]>) -> Next {
    match live {
        Tail::Line(line) => match Link::after(line) {
            Some(link) => Next::Record(link),
            None => Next::Genesis {
                link: Link {
                    seq: 0,
                    prev: hash_line(line),
                },
                reason: GenesisReason::AfterUnchainedLine,
            },
        },
        Tail::Cut(bytes) => Next::Genesis {
            link: Link {
                seq: 0,
                prev: Digest::of(bytes),
            },
            reason: GenesisReason::AfterCutLine,
        },
        Tail::Empty => match rotated_last_line {
            Some(line) => Next::Genesis {
                link: Link::after(line).unwrap_or(Link {
                    seq: 0,
                    prev: hash_line(line),
                }),
                reason: GenesisReason::Rotated,
            },
            None => Next::Genesis {
                link: Link::origin(),
                reason: GenesisReason::New,
            },
        },
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    #[error("an audit record must serialise to a JSON object")]
    NotAnObject,
    #[error(transparent)]
    Signing(#[from] SigningError),
}

/// Bytes to append (one or two whole lines, each ending in `\n`) and the new record's hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appendix {
    pub bytes: Vec<u8>,
    /// The hash of the record's line (the genesis, if any, is not it).
    pub record: Digest,
}

/// Builds what the writer appends: a newline if the live file was cut, a genesis if `next`
/// asks for one, then `record` (a serialised JSON object without chain fields) with its link,
/// and signed as a sandbox's final record when `seal` is given.
pub fn compose(
    live: Tail<'_>,
    next: Next,
    origin: &Origin<'_>,
    record: &[u8],
    seal: Option<&SealInput<'_>>,
) -> Result<Appendix, ChainError> {
    let mut bytes = Vec::with_capacity(record.len() + 512);
    if matches!(live, Tail::Cut(_)) {
        bytes.push(b'\n');
    }
    let link = match next {
        Next::Record(link) => link,
        Next::Genesis { link, reason } => {
            let genesis = genesis_line(link, reason, origin);
            let after = Link::after(&genesis).expect("a genesis line is a chained record");
            bytes.extend_from_slice(&genesis);
            bytes.push(b'\n');
            after
        }
    };
    let mut line = with_link(link, record)?;
    if let Some(seal) = seal {
        line = sign::seal(seal, &line)?;
    }
    let hash = hash_line(&line);
    bytes.extend_from_slice(&line);
    bytes.push(b'\n');
    Ok(Appendix {
        bytes,
        record: hash,
    })
}

/// `record` with `"seq"` and `"prev"` as its first members.
pub fn with_link(link: Link, record: &[u8]) -> Result<Vec<u8>, ChainError> {
    let body = record
        .strip_prefix(b"{")
        .filter(|_| record.ends_with(b"}"))
        .ok_or(ChainError::NotAnObject)?;
    let mut out = format!("{{\"seq\":{},\"prev\":\"{}\"", link.seq, link.prev).into_bytes();
    let empty = body
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'}');
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(body);
    Ok(out)
}

#[derive(Serialize)]
struct GenesisBody<'a> {
    time: &'a str,
    event: &'static str,
    node: &'a str,
    policy_sha256: &'a str,
    reason: GenesisReason,
}

/// A genesis line (no newline).
pub fn genesis_line(link: Link, reason: GenesisReason, origin: &Origin<'_>) -> Vec<u8> {
    let body = serde_json::to_vec(&GenesisBody {
        time: origin.time,
        event: GENESIS_EVENT,
        node: origin.node,
        policy_sha256: origin.policy_sha256,
        reason,
    })
    .expect("a genesis serialises");
    with_link(link, &body).expect("a genesis is an object")
}

#[cfg(test)]
mod sign_tests;
#[cfg(test)]
mod tests;
