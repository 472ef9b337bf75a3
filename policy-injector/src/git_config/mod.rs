//! Git's config file format, as far as a sandbox's repositories need it: parsing it exactly
//! as git 2.39 does, deciding which keys cannot make a developer's git run code, writing a
//! sanitized config for a repository the sandbox created, and carrying the safe changes a
//! sandbox made to its private copy of `.git/config` back into the host's file. Pure: bytes in,
//! bytes and a list of decisions out; the runtime does the reading and writing.
//!
//! The sandbox gets a private copy of each repository's `.git/config` (so `git remote add`,
//! `git branch --track` work inside). Everything in that file is written by untrusted code, and
//! git reads several keys as commands to run (`core.fsmonitor`, `core.sshCommand`, filters,
//! aliases, `include.path`, `remote.*.uploadpack`, ...). So nothing is carried unless its key is
//! on an allowlist ([`KeyClass`]) and its value passes that key's check: a denylist would fail
//! open on the next key git adds.
//!
//! Where git is permissive in ways a developer never relies on (a variable before any section
//! header, an empty section name, a NUL byte, which git silently truncates), the parser
//! refuses the file instead of guessing: the caller then treats the whole file as unsafe.

mod carry;
mod edit;
mod keys;
mod parse;
mod sanitize;
mod values;
mod write;

#[cfg(test)]
mod carry_tests;
#[cfg(test)]
mod keys_tests;
#[cfg(test)]
mod parse_tests;
#[cfg(test)]
mod sanitize_tests;

use std::fmt;
use std::sync::Arc;

pub use carry::{carry, Carried, CarryError};
pub use edit::Change;
pub use keys::{allowed, allowed_key, allowed_value, KeyClass, Refusal, RefusalReason};
pub use parse::{
    parse, ConfigFile, Entry, Header, ParseError, Problem, MAX_CONFIG_BYTES, MAX_ENTRIES,
    MAX_HEADER_BYTES,
};
pub use sanitize::{sanitize, Sanitized};
pub use write::{serialize, Unwritable};

/// One value of a variable: `None` for a bare `name` line (git reads it as boolean true),
/// `Some(bytes)` for `name = ...` (`name =` alone is the empty string, which is false). Bytes,
/// not text: git stores whatever the file holds.
pub type Value = Option<Vec<u8>>;

/// A variable's identity as git compares it: section and name are ASCII and case-insensitive
/// (kept lowercased), the subsection is case-sensitive bytes. `[remote "origin"]` and the
/// deprecated `[remote.origin]` name the same key.
///
/// Section and subsection are shared by every entry under one header: a clone costs nothing
/// however long the header, so a file of many entries under one long header stays cheap.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyRef {
    section: Arc<str>,
    subsection: Option<Arc<[u8]>>,
    name: String,
}

impl KeyRef {
    /// A key git could have read from a file: section `[A-Za-z0-9-]+`, name
    /// `[A-Za-z][A-Za-z0-9-]*` (both lowercased here), a subsection without newline or NUL.
    pub fn new(section: &str, subsection: Option<&[u8]>, name: &str) -> Option<KeyRef> {
        let section_ok = !section.is_empty()
            && section
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let name_ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
        let sub_ok = subsection.is_none_or(|s| !s.contains(&b'\n') && !s.contains(&0));
        (section_ok && name_ok && sub_ok).then(|| KeyRef {
            section: section.to_ascii_lowercase().into(),
            subsection: subsection.map(Arc::from),
            name: name.to_ascii_lowercase(),
        })
    }

    pub fn section(&self) -> &str {
        &self.section
    }

    pub fn subsection(&self) -> Option<&[u8]> {
        self.subsection.as_deref()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key as `git config --list` prints it (`remote.origin.url`), as bytes because the
    /// subsection need not be UTF-8.
    pub fn to_git_bytes(&self) -> Vec<u8> {
        let mut out = self.section.as_bytes().to_vec();
        if let Some(sub) = &self.subsection {
            out.push(b'.');
            out.extend_from_slice(sub);
        }
        out.push(b'.');
        out.extend_from_slice(self.name.as_bytes());
        out
    }
}

/// `remote.origin.url`; a subsection's bytes that are not printable ASCII are shown as `\xNN`
/// so a message never carries a terminal escape from the sandbox.
impl fmt::Display for KeyRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.section)?;
        if let Some(sub) = &self.subsection {
            write!(f, ".{}", Shown(sub))?;
        }
        write!(f, ".{}", self.name)
    }
}

/// Bytes from an untrusted file, shown printable: `\xNN` for anything outside printable ASCII.
pub(crate) struct Shown<'a>(pub &'a [u8]);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in self.0 {
            if b.is_ascii_graphic() || b == b' ' {
                write!(f, "{}", b as char)?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}
