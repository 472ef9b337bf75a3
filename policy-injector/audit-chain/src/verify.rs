//! Verification of a log, line by line, so a reader can stream files of any size through it.
//!
//! Feed the files in rotation order (oldest first): [`Verifier::begin_file`], then
//! [`Verifier::line`] for each line, then [`Verifier::finish`]. The verdict is the number of
//! records with the chain intact, or the first place where it breaks and what is wrong there.
//! Once [`Verifier::settled`] is true, reading further changes nothing.

use serde::Deserialize;
use serde_json::Value;

use super::report::sandbox_name;
pub use super::report::{Break, BreakKind, Location, SignatureSummary, Summary};
use super::sign::{SigFailure, Signature, VerifyingKey};
use super::verify_trails::{Rec, Trails};
use super::{hash_line, Digest, Link, GENESIS_EVENT};

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
