//! The in-toto Statement v1 (<https://github.com/in-toto/attestation/blob/main/spec/v1/statement.md>):
//! `_type`, `subject` (name + digest), `predicateType`, `predicate`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{AttestationError, PREDICATE_TYPE, STATEMENT_TYPE};
use crate::audit_chain::Digest;

/// One subject: a file the sandbox wrote, by its path in the container and its sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceDescriptor {
    pub name: String,
    pub digest: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<ResourceDescriptor>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: Value,
}

impl Statement {
    /// Parses a payload and checks it is a run statement this tool writes: the v1 type, our
    /// predicate type, at least one subject, each with a well-formed sha256.
    pub fn parse(payload: &[u8]) -> Result<Statement, AttestationError> {
        let s: Statement = serde_json::from_slice(payload)
            .map_err(|e| AttestationError::Statement(e.to_string()))?;
        let bad = |why: String| Err(AttestationError::Statement(why));
        if s.statement_type != STATEMENT_TYPE {
            return bad(format!(
                "_type is {:?}, not {STATEMENT_TYPE:?}",
                s.statement_type
            ));
        }
        if s.predicate_type != PREDICATE_TYPE {
            return bad(format!(
                "predicateType is {:?}, not {PREDICATE_TYPE:?}",
                s.predicate_type
            ));
        }
        if s.subject.is_empty() {
            return bad("no subject".into());
        }
        for sub in &s.subject {
            match sub.digest.get("sha256") {
                Some(h) if Digest::from_hex(h).is_some() => {}
                _ => return bad(format!("subject {:?} has no valid sha256", sub.name)),
            }
        }
        Ok(s)
    }
}
