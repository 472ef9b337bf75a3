//! Verification of a log, line by line, so a reader can stream files of any size through it.
//!
//! Feed the files in rotation order (oldest first): [`Verifier::begin_file`], then
//! [`Verifier::line`] for each line, then [`Verifier::finish`]. The verdict is the number of
//! records with the chain intact, or the first place where it breaks and what is wrong there.
//! Once [`Verifier::settled`] is true, reading further changes nothing.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use super::sign::{SigFailure, Signature, VerifyingKey};
use super::verify_trails::{Rec, Trails};
use super::{hash_line, Digest, Link, GENESIS_EVENT};

/// A line in a file, 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} line {}", self.file, self.line)
    }
}

/// The first place where the log is not what the writer left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub at: Location,
    pub kind: BreakKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BreakKind {
    /// The file ends without a newline: cut in the middle of a line.
    Cut,
    /// The line is not a JSON object.
    NotJson(String),
    /// A JSON object without valid `seq` and `prev`: not written by the chained writer.
    NoChainFields,
    /// The record changed after it was written: the next record's `prev` is not its hash.
    Altered { detected_at: Location },
    /// `seq` jumped from `expected - 1` to `found`, and `expected` appears nowhere later.
    Missing { expected: u64, found: u64 },
    /// `seq` jumped to `found`; the record with `expected` appears later, at `expected_at`.
    Reordered {
        expected: u64,
        found: u64,
        expected_at: Location,
    },
    /// `seq` did not grow: a record inserted (or copied) where `expected` was due.
    Inserted { expected: u64, found: u64 },
    /// A file that does not begin with a genesis record: its beginning was cut.
    NoGenesis,
    /// A genesis record in the middle of a file.
    MisplacedGenesis,
    /// A file's genesis does not link to the last record of the file before it.
    FileLink {
        previous: Location,
        expected: u64,
        found: u64,
    },
    /// A signed final record whose signature does not hold.
    Signature {
        sandbox: String,
        failure: SigFailure,
    },
    /// A sandbox whose `create` is in the log but whose signed final record is not.
    Unsealed {
        sandbox: String,
        last_event: String,
        last_at: Location,
    },
    /// A record of no sandbox trail: after its sandbox's final record, or of one never created.
    Uncovered { sandbox: String, event: String },
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = &self.at;
        match &self.kind {
            BreakKind::Cut => write!(f, "{at}: the file ends in the middle of this line (cut)"),
            BreakKind::NotJson(e) => write!(f, "{at}: not a JSON record ({e})"),
            BreakKind::NoChainFields => write!(
                f,
                "{at}: no valid seq and prev: this line was not written by the chained writer \
                 (inserted or edited)"
            ),
            BreakKind::Altered { detected_at } => write!(
                f,
                "{at}: record altered: its hash no longer matches the prev of {detected_at} \
                 (or that record's prev was altered)"
            ),
            BreakKind::Missing { expected, found } => write!(
                f,
                "{at}: record(s) deleted before this line: seq {found} follows seq {}, \
                 {} record(s) missing",
                expected - 1,
                found - expected
            ),
            BreakKind::Reordered {
                expected,
                found,
                expected_at,
            } => write!(
                f,
                "{at}: records reordered: seq {found} where seq {expected} was due; seq \
                 {expected} is at {expected_at}"
            ),
            BreakKind::Inserted { expected, found } => write!(
                f,
                "{at}: record inserted: seq {found} where seq {expected} was due"
            ),
            BreakKind::NoGenesis => write!(
                f,
                "{at}: the file does not begin with a genesis record (its beginning was cut)"
            ),
            BreakKind::MisplacedGenesis => write!(
                f,
                "{at}: a genesis record in the middle of a file (inserted, or the line before \
                 it was damaged)"
            ),
            BreakKind::FileLink {
                previous,
                expected,
                found,
            } => write!(
                f,
                "{at}: the file does not link to the last record before it ({previous}; \
                 expected seq {expected}, found {found}): a file is missing, the files are out \
                 of order (give them oldest first), or the end of the previous file was cut"
            ),
            BreakKind::Signature { sandbox, failure } => match failure {
                SigFailure::Malformed(why) => {
                    write!(f, "{at}: sandbox {sandbox}: malformed signature: {why}")
                }
                SigFailure::WrongKey { signed_with, given } => write!(
                    f,
                    "{at}: sandbox {sandbox}: signed with key {signed_with}, not with the \
                     given public key ({given})"
                ),
                SigFailure::Count { signed, found } => write!(
                    f,
                    "{at}: sandbox {sandbox}: the signature covers {signed} record(s), the log \
                     holds {found}: a record of this sandbox was {}",
                    if signed > found { "removed" } else { "added" }
                ),
                SigFailure::Mismatch => write!(
                    f,
                    "{at}: sandbox {sandbox}: the signature does not match its records: a \
                     record of this sandbox was altered (or replaced)"
                ),
            },
            BreakKind::Unsealed {
                sandbox,
                last_event,
                last_at,
            } => write!(
                f,
                "{at}: sandbox {sandbox} was created here but has no signed final record (its \
                 last record is {last_event} at {last_at}): the log was cut after it, its shim \
                 died, or it is still running (these look the same)"
            ),
            BreakKind::Uncovered { sandbox, event } => write!(
                f,
                "{at}: {event} record of sandbox {sandbox} outside its signed trail (no create \
                 before it, or after its final record): inserted"
            ),
        }
    }
}

/// What an intact log holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Lines verified, genesis records included.
    pub records: u64,
    pub files: usize,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// The first file begins at the log's origin (seq 0, linked to the genesis seed). When
    /// false, older files were rotated away and the first link is taken on trust.
    pub from_origin: bool,
    /// Present when a public key was given.
    pub signatures: Option<SignatureSummary>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SignatureSummary {
    /// Sandboxes whose signed final record verified against all their records.
    pub sealed: u64,
    /// create-rejected / create-failed records of containers that never got a sandbox: no
    /// trail covers them.
    pub standalone: u64,
    /// Sandboxes whose `create` is older than the first file given: not checkable.
    pub partial: u64,
    /// Sandboxes created but without a signed final record yet (only with `allow_open`).
    pub open: Vec<String>,
}

#[derive(Debug)]
enum State {
    Intact,
    /// A `seq` jumped: looking for the missing one further on, to tell deleted from reordered.
    Hunting {
        tentative: Break,
        expected: u64,
    },
    Broken(Break),
}

/// The fields of a line the verifier reads; everything else only counts through the hash.
#[derive(Deserialize)]
struct Fields {
    seq: Option<u64>,
    prev: Option<String>,
    event: Option<String>,
    namespace: Option<String>,
    container_id: Option<String>,
    sig: Option<Value>,
}

struct Last {
    seq: u64,
    hash: Digest,
    at: Location,
}

pub struct Verifier {
    trails: Option<Trails>,
    file: String,
    files: usize,
    line_no: u64,
    at_file_start: bool,
    last: Option<Last>,
    records: u64,
    first_seq: Option<u64>,
    from_origin: bool,
    state: State,
}

impl Verifier {
    /// `key`: check each sandbox's signature; `allow_open`: accept sandboxes without a signed
    /// final record (a live log, where running sandboxes have none yet).
    pub fn new(key: Option<VerifyingKey>, allow_open: bool) -> Verifier {
        Verifier {
            trails: key.map(|k| Trails::new(k, allow_open)),
            file: String::new(),
            files: 0,
            line_no: 0,
            at_file_start: true,
            last: None,
            records: 0,
            first_seq: None,
            from_origin: false,
            state: State::Intact,
        }
    }

    pub fn begin_file(&mut self, name: &str) {
        self.file = name.to_string();
        self.files += 1;
        self.line_no = 0;
        self.at_file_start = true;
    }

    /// True once the verdict is known: later lines cannot change it.
    pub fn settled(&self) -> bool {
        matches!(self.state, State::Broken(_))
    }

    /// True while every line so far extends the chain. A `seq` jump turns it false at once
    /// (whether the missing record was deleted or comes later, the log is not what was
    /// written), which is what a live follower reports; [`Verifier::finish`] tells which.
    pub fn intact(&self) -> bool {
        matches!(self.state, State::Intact)
    }

    /// One line, without its newline; `terminated` is false for bytes after the file's last
    /// newline.
    pub fn line(&mut self, bytes: &[u8], terminated: bool) {
        self.line_no += 1;
        let at = Location {
            file: self.file.clone(),
            line: self.line_no,
        };
        match &self.state {
            State::Broken(_) => {}
            State::Hunting { expected, .. } => {
                let expected = *expected;
                let seq = serde_json::from_slice::<Fields>(bytes)
                    .ok()
                    .and_then(|f| f.seq);
                if seq == Some(expected) {
                    let State::Hunting { tentative, .. } =
                        std::mem::replace(&mut self.state, State::Intact)
                    else {
                        unreachable!()
                    };
                    let BreakKind::Missing { found, .. } = tentative.kind else {
                        unreachable!("hunting starts from a missing seq")
                    };
                    self.state = State::Broken(Break {
                        at: tentative.at,
                        kind: BreakKind::Reordered {
                            expected,
                            found,
                            expected_at: at,
                        },
                    });
                }
            }
            State::Intact => {
                if let Err(b) = self.accept(bytes, terminated, at) {
                    self.state = match b.kind {
                        BreakKind::Missing { expected, .. } => State::Hunting {
                            tentative: b,
                            expected,
                        },
                        _ => State::Broken(b),
                    };
                }
            }
        }
    }

    fn accept(&mut self, bytes: &[u8], terminated: bool, at: Location) -> Result<(), Break> {
        let brk = |kind| Break {
            at: at.clone(),
            kind,
        };
        if !terminated {
            return Err(brk(BreakKind::Cut));
        }
        let fields: Fields =
            serde_json::from_slice(bytes).map_err(|e| brk(BreakKind::NotJson(e.to_string())))?;
        let (Some(seq), Some(prev)) = (
            fields.seq,
            fields.prev.as_deref().and_then(Digest::from_hex),
        ) else {
            return Err(brk(BreakKind::NoChainFields));
        };
        let genesis = fields.event.as_deref() == Some(GENESIS_EVENT);
        let file_start = std::mem::replace(&mut self.at_file_start, false);
        match (&self.last, file_start) {
            (_, true) if !genesis => return Err(brk(BreakKind::NoGenesis)),
            (_, false) if genesis => return Err(brk(BreakKind::MisplacedGenesis)),
            (None, _) => {
                self.first_seq = Some(seq);
                self.from_origin = Link::origin() == Link { seq, prev };
            }
            (Some(last), true) => {
                if seq != last.seq + 1 || prev != last.hash {
                    return Err(brk(BreakKind::FileLink {
                        previous: last.at.clone(),
                        expected: last.seq + 1,
                        found: seq,
                    }));
                }
            }
            (Some(last), false) => {
                let expected = last.seq + 1;
                if seq > expected {
                    return Err(brk(BreakKind::Missing {
                        expected,
                        found: seq,
                    }));
                }
                if seq < expected {
                    return Err(brk(BreakKind::Inserted {
                        expected,
                        found: seq,
                    }));
                }
                if prev != last.hash {
                    return Err(Break {
                        at: last.at.clone(),
                        kind: BreakKind::Altered { detected_at: at },
                    });
                }
            }
        }
        if let Some(trails) = &mut self.trails {
            if !genesis {
                let sig = match fields.sig {
                    None => None,
                    Some(v) => Some(serde_json::from_value::<Signature>(v).map_err(|e| {
                        brk(BreakKind::Signature {
                            sandbox: sandbox_name(&fields.namespace, &fields.container_id),
                            failure: SigFailure::Malformed(e.to_string()),
                        })
                    })?),
                };
                let rec = Rec {
                    line: bytes,
                    at: &at,
                    event: fields.event.as_deref().unwrap_or(""),
                    namespace: fields.namespace.as_deref(),
                    container_id: fields.container_id.as_deref(),
                    sig: sig.as_ref(),
                };
                trails.record(rec, self.from_origin)?;
            }
        }
        self.last = Some(Last {
            seq,
            hash: hash_line(bytes),
            at,
        });
        self.records += 1;
        Ok(())
    }

    /// The verdict after the last line of the last file.
    pub fn finish(self) -> Result<Summary, Break> {
        let signatures = match self.state {
            State::Broken(b) => return Err(b),
            State::Hunting { tentative, .. } => return Err(tentative),
            State::Intact => match self.trails {
                Some(trails) => Some(trails.finish()?),
                None => None,
            },
        };
        Ok(Summary {
            records: self.records,
            files: self.files,
            first_seq: self.first_seq,
            last_seq: self.last.map(|l| l.seq),
            from_origin: self.from_origin,
            signatures,
        })
    }
}

pub(super) fn sandbox_name(namespace: &Option<String>, id: &Option<String>) -> String {
    format!(
        "{}/{}",
        namespace.as_deref().unwrap_or("?"),
        id.as_deref().unwrap_or("?")
    )
}

/// Verifies whole files held in memory: `(name, bytes)` in rotation order, oldest first.
pub fn verify_all(
    files: &[(&str, &[u8])],
    key: Option<VerifyingKey>,
    allow_open: bool,
) -> Result<Summary, Break> {
    let mut v = Verifier::new(key, allow_open);
    for (name, bytes) in files {
        v.begin_file(name);
        let mut rest = *bytes;
        while !rest.is_empty() {
            match rest.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    v.line(&rest[..i], true);
                    rest = &rest[i + 1..];
                }
                None => {
                    v.line(rest, false);
                    rest = &[];
                }
            }
        }
    }
    v.finish()
}
