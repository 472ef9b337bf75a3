//! The config of a repository the sandbox created, cut down to allowed keys.

use super::keys::{allowed, KeyClass, Refusal};
use super::parse::{parse, ParseError};
use super::write::write_grouped;
use super::KeyRef;

/// A sanitized config and what became of each entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sanitized {
    /// Canonical text: no comments, no includes, one header per section.
    pub bytes: Vec<u8>,
    /// The keys of the entries written, in file order (a multi-valued key once per value).
    pub kept: Vec<KeyRef>,
    /// Every entry left out, with why, in file order.
    pub removed: Vec<Refusal>,
}

/// Keeps the entries of `src` that `class` allows and writes them anew. Nothing of the source
/// text is copied: comments and odd layouts could hide what a reader of the new file expects,
/// and rewriting means git reads exactly the values that were checked. An unparseable `src`
/// is an error; the caller then writes no config at all.
///
/// Each entry is judged alone: a multi-valued key keeps its good values. Sections are written
/// in the order they first appear; within a key, values keep their order, which is all git
/// looks at (the last value wins for single-valued keys, `--get-all` order for the others).
pub fn sanitize(src: &[u8], class: KeyClass) -> Result<Sanitized, ParseError> {
    let config = parse(src)?;
    let mut kept = Vec::new();
    let mut removed = Vec::new();
    for entry in &config.entries {
        match allowed(class, entry) {
            Ok(()) => kept.push(entry),
            Err(refusal) => removed.push(refusal),
        }
    }
    let bytes = write_grouped(kept.iter().map(|e| (&e.key, e.value.as_deref())).collect());
    Ok(Sanitized {
        bytes,
        kept: kept.into_iter().map(|e| e.key.clone()).collect(),
        removed,
    })
}
