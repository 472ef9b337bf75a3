//! Signed run attestations: per sandbox, an in-toto Statement v1 in a DSSE envelope, signed
//! with the audit signing key. The subjects are the files the sandbox wrote (the exit
//! manifest's added and modified regular files, with their sha256); the predicate says what
//! ran ([`RunPredicate`], predicateType [`PREDICATE_TYPE`]). Pure: the records and the manifest
//! bytes in, an envelope or a verdict out; `policy-injector audit attest` and
//! `audit verify-attestation` do the file I/O.
//!
//! The statement is built only from records the caller verified (chain and the sandbox's
//! signed trail, with the public half of the same key), so signing it adds no claim the log
//! does not already make: it carries the claim to whoever holds the artifacts and not the log.

pub mod dsse;
pub mod manifest;
pub mod run;
pub mod statement;

pub use dsse::{DsseError, Envelope};
pub use manifest::{written_files, ManifestError, Written};
pub use run::{RunError, RunFold, RunPredicate};
pub use statement::{ResourceDescriptor, Statement};

use crate::audit_chain::sign::{SigningKey, VerifyingKey};

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// What a run predicate is; documented in policy-injector/README.md, "Run attestations".
pub const PREDICATE_TYPE: &str = "https://gvisor-hardened.dev/run/v1";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttestationError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error(transparent)]
    Dsse(#[from] DsseError),
    #[error("not a run statement: {0}")]
    Statement(String),
    #[error("container {0}: the sandbox wrote no file that can be attested (no exit manifest, or no regular file added or modified with a sha256): a statement needs a subject")]
    NoSubject(String),
}

/// The statement of a run: `written` (from its exit manifest) as subjects, `run` as predicate.
pub fn statement(mut run: RunPredicate, written: Written) -> Result<Statement, AttestationError> {
    if written.subjects.is_empty() {
        return Err(AttestationError::NoSubject(run.sandbox.container_id));
    }
    run.artifacts.exact = written.exact;
    run.artifacts.unattested = written.unattested;
    Ok(Statement {
        statement_type: STATEMENT_TYPE.to_string(),
        subject: written.subjects,
        predicate_type: PREDICATE_TYPE.to_string(),
        predicate: serde_json::to_value(&run).expect("a predicate serialises"),
    })
}

/// The statement signed with `key`, in a DSSE envelope.
pub fn sign(statement: &Statement, key: &SigningKey) -> Envelope {
    let payload = serde_json::to_vec(statement).expect("a statement serialises");
    dsse::sign(key, PAYLOAD_TYPE, &payload)
}

/// The statement of `envelope`, once its signature by `key` and its form check out.
pub fn verify(envelope: &Envelope, key: &VerifyingKey) -> Result<Statement, AttestationError> {
    let payload = dsse::open(envelope, PAYLOAD_TYPE, key)?;
    Statement::parse(&payload)
}

#[cfg(test)]
mod tests;
