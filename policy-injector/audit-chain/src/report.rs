//! What verification reports: an intact log's summary, or the first place it breaks and why.
//! Shared by the chain check (`verify.rs`) and the signature check (`verify_trails.rs`).

use std::fmt;

use super::sign::SigFailure;

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

pub(super) fn sandbox_name(namespace: &Option<String>, id: &Option<String>) -> String {
    format!(
        "{}/{}",
        namespace.as_deref().unwrap_or("?"),
        id.as_deref().unwrap_or("?")
    )
}
