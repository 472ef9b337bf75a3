//! A failed policy check and the ways to make one: the leaf every section's checks
//! (`validate.rs`, `egress.rs`, `evidence.rs`, `runsc_flags.rs`, `workspace.rs`) builds on, so
//! none of them depends on another to report a problem.

use super::locate;
use crate::error::PolicyError;
use crate::glob::{join, normalize};

/// A failed check, before its line is looked up.
pub(crate) struct Issue {
    keys: Vec<String>,
    reason: String,
    contradiction: bool,
}

impl Issue {
    pub(crate) fn into_error(self, src: Option<&str>) -> PolicyError {
        let line = src.and_then(|s| self.keys.iter().find_map(|k| locate::line_of(s, k)));
        if self.contradiction {
            PolicyError::Contradiction {
                keys: self.keys,
                line,
                reason: self.reason,
            }
        } else {
            PolicyError::Invalid {
                key: self.keys.into_iter().next().unwrap_or_default(),
                line,
                reason: self.reason,
            }
        }
    }
}

pub(super) fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Issue {
    Issue {
        keys: vec![key.into()],
        reason: reason.into(),
        contradiction: false,
    }
}

pub(super) fn contradiction(keys: &[&str], reason: impl Into<String>) -> Issue {
    Issue {
        keys: keys.iter().map(|k| k.to_string()).collect(),
        reason: reason.into(),
        contradiction: true,
    }
}

/// An absolute path already in normal form (no `.`, `..`, `//` or trailing `/`).
pub(super) fn check_abs_path(key: &str, path: &str) -> Result<(), Issue> {
    match normalize(path) {
        Some(segs) if join(&segs) == path => Ok(()),
        Some(segs) => Err(invalid(
            key,
            format!("{path:?} is not in normal form (write {:?})", join(&segs)),
        )),
        None => Err(invalid(key, format!("{path:?} is not an absolute path"))),
    }
}
