//! The config file parser. It follows git's own (config.c, `git_parse_source`): a byte-at-a-
//! time reader where CRLF reads as LF and the end of the file reads as one last LF, so every
//! quirk below is git's, checked against git 2.39 by `tests/git_config_oracle.rs`:
//!
//! - outside quotes, every whitespace byte (space, tab, CR) inside a value becomes one space
//!   (`a \t b` is `a   b`), leading ones are dropped while the value is still empty (so
//!   `"" x` is `x`) and trailing ones are dropped at the end of the line or at a comment;
//! - a backslash before the end of a line joins the next line, even inside quotes, and the
//!   whitespace pending before the backslash is kept;
//! - `name` alone is boolean true, `name =` is the empty string;
//! - a variable name ends at the first byte that is not alphanumeric or `-`: `name # c` and
//!   `name;c` without `=` are errors, not a bare `name` with a comment;
//! - a header may share its line with the first variable (`[core] bare = true`) or with another
//!   header (`[a][b]`);
//! - in `[section "sub"]` a backslash keeps the next byte whatever it is (`\t` is `t`), there is
//!   nothing but `]` after the closing quote, and `[a.B "c"]` is `a.b.c`.

use std::ops::Range;
use std::sync::Arc;

use super::KeyRef;

/// Larger configs are refused unread: a repository's `.git/config` is a few hundred bytes, and
/// the parse (and every diff over it) must stay bounded whatever the sandbox wrote.
pub const MAX_CONFIG_BYTES: usize = 4 << 20;

/// More entries are refused: every entry's key is hashed and compared when diffing, and each
/// costs its header's length, so entries times [`MAX_HEADER_BYTES`] bounds that work. A
/// repository tracking ten thousand branches has some thirty thousand entries.
pub const MAX_ENTRIES: usize = 100_000;

/// Longer section headers (between `[` and `]`) are refused: remote, branch and submodule
/// names, and `includeIf` patterns, are far shorter.
pub const MAX_HEADER_BYTES: usize = 1024;

const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// A parsed config file. Indexes into `headers` and `entries` follow the order in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    pub headers: Vec<Header>,
    pub entries: Vec<Entry>,
    /// The file ends inside the last entry's line(s): no newline closed it, or the last newline
    /// was eaten by a trailing backslash (`k = x\` then LF then nothing). Text appended
    /// directly would become part of that value.
    pub ends_in_value: bool,
}

/// One `[section]` or `[section "sub"]` line (an instance: a section may appear many times).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Lowercased, without the deprecated `.sub` part.
    pub section: String,
    pub subsection: Option<Vec<u8>>,
    /// From `[` through `]`.
    pub span: Range<usize>,
    /// 1-based.
    pub line: usize,
}

/// One variable assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub key: KeyRef,
    pub value: super::Value,
    /// The bytes to delete to remove this entry and nothing else: its whole line(s) with the
    /// final newline when it starts its line (the usual case), otherwise (`[core] bare = true`)
    /// from its name up to, not including, the newline, so the header stays on its line.
    pub span: Range<usize>,
    /// Index in [`ConfigFile::headers`] of the header it belongs to.
    pub header: usize,
    /// 1-based line of its name.
    pub line: usize,
}

/// Why a config file could not be read. The caller treats the whole file as unsafe.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("git config of {size} bytes is over the limit of {MAX_CONFIG_BYTES} bytes")]
    TooLarge { size: usize },
    #[error("git config with more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    #[error("bad git config line {line}: {problem}")]
    Malformed { line: usize, problem: Problem },
}

/// What was wrong on the line a [`ParseError::Malformed`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// Git would silently cut the value or subsection there; refused rather than guessed.
    #[error("a NUL byte")]
    NulByte,
    #[error("a variable before any section header")]
    VariableOutsideSection,
    #[error("a section header without a section name")]
    EmptySectionName,
    #[error("byte 0x{0:02x} in a section name")]
    BadSectionByte(u8),
    #[error("a section header not closed on its line")]
    UnterminatedHeader,
    #[error("a section header over {MAX_HEADER_BYTES} bytes")]
    HeaderTooLong,
    #[error("a subsection must be `\"quoted\"` and followed directly by `]`")]
    BadSubsection,
    #[error("byte 0x{0:02x} where a variable name or section header should start")]
    UnexpectedByte(u8),
    #[error("byte 0x{0:02x} after a variable name where `=` or the end of the line should be")]
    ExpectedEquals(u8),
    #[error("unknown escape `\\{}` in a value", *.0 as char)]
    UnknownEscape(u8),
    #[error("a quoted value not closed on its line")]
    UnterminatedQuote,
}

/// Parses a whole config file, or says on which line it stops making sense to git.
pub fn parse(src: &[u8]) -> Result<ConfigFile, ParseError> {
    if src.len() > MAX_CONFIG_BYTES {
        return Err(ParseError::TooLarge { size: src.len() });
    }
    if let Some(at) = src.iter().position(|&b| b == 0) {
        return Err(malformed(line_of(src, at), Problem::NulByte));
    }
    Parser::new(src).run()
}

fn malformed(line: usize, problem: Problem) -> ParseError {
    ParseError::Malformed { line, problem }
}

/// 1-based line number of byte `at`.
pub(crate) fn line_of(src: &[u8], at: usize) -> usize {
    1 + src[..at.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// Git's whitespace (its own ctype table, not C's): no vertical tab or form feed.
pub(crate) fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_key_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

/// Git's `get_next_char`: one byte, with CRLF read as LF and the end of input read as LF.
struct Cursor<'a> {
    src: &'a [u8],
    pos: usize,
    eof: bool,
    /// Where the newline most recently returned starts (2 bytes before `pos` for CRLF).
    newline_at: usize,
}

impl Cursor<'_> {
    fn next(&mut self) -> u8 {
        match self.src.get(self.pos) {
            None => {
                self.eof = true;
                self.newline_at = self.pos;
                b'\n'
            }
            Some(b'\r') if self.src.get(self.pos + 1) == Some(&b'\n') => {
                self.newline_at = self.pos;
                self.pos += 2;
                b'\n'
            }
            Some(&b) => {
                if b == b'\n' {
                    self.newline_at = self.pos;
                }
                self.pos += 1;
                b
            }
        }
    }
}

/// A header's section and subsection as its entries' keys hold them.
type KeyParts = (Arc<str>, Option<Arc<[u8]>>);

struct Parser<'a> {
    cur: Cursor<'a>,
    headers: Vec<Header>,
    entries: Vec<Entry>,
    /// The last header's section and subsection, shared by the keys of its entries.
    current: Option<KeyParts>,
    line: usize,
    line_start: usize,
    /// Nothing but whitespace so far on the current line.
    line_clean: bool,
}

impl<'a> Parser<'a> {
    fn new(src: &'a [u8]) -> Parser<'a> {
        // Git skips a UTF-8 byte order mark at the very start (Windows editors write one); a
        // partial one is an error, which falls out of the main loop since 0xef is no key byte.
        let start = if src.starts_with(UTF8_BOM) {
            UTF8_BOM.len()
        } else {
            0
        };
        Parser {
            cur: Cursor {
                src,
                pos: start,
                eof: false,
                newline_at: 0,
            },
            headers: Vec::new(),
            entries: Vec::new(),
            current: None,
            line: 1,
            line_start: start,
            line_clean: true,
        }
    }

    fn run(mut self) -> Result<ConfigFile, ParseError> {
        let mut comment = false;
        let mut ends_in_value = false;
        loop {
            let start = self.cur.pos;
            let c = self.cur.next();
            if c == b'\n' {
                if self.cur.eof {
                    break;
                }
                self.new_line();
                comment = false;
                continue;
            }
            if comment || is_space(c) {
                continue;
            }
            match c {
                b'#' | b';' => comment = true,
                b'[' => {
                    let header = self.header(start)?;
                    self.current = Some((
                        header.section.as_str().into(),
                        header.subsection.as_deref().map(Arc::from),
                    ));
                    self.headers.push(header);
                    self.line_clean = false;
                }
                c if c.is_ascii_alphabetic() => {
                    if self.entries.len() == MAX_ENTRIES {
                        return Err(ParseError::TooManyEntries);
                    }
                    let entry = self.entry(c, start)?;
                    self.entries.push(entry);
                    if self.cur.eof {
                        ends_in_value = true;
                        break;
                    }
                    self.new_line();
                }
                c => return Err(malformed(self.line, Problem::UnexpectedByte(c))),
            }
        }
        Ok(ConfigFile {
            headers: self.headers,
            entries: self.entries,
            ends_in_value,
        })
    }

    fn new_line(&mut self) {
        self.line += 1;
        self.line_start = self.cur.pos;
        self.line_clean = true;
    }

    /// After `[`: git's `get_base_var` and `get_extended_base_var`.
    fn header(&mut self, start: usize) -> Result<Header, ParseError> {
        let line = self.line;
        let bad = |problem| malformed(line, problem);
        let mut base = Vec::new();
        let mut quoted = None;
        loop {
            let c = self.cur.next();
            if c == b'\n' {
                return Err(bad(Problem::UnterminatedHeader));
            }
            if c == b']' {
                break;
            }
            if is_space(c) {
                quoted = Some(self.quoted_subsection(line, MAX_HEADER_BYTES - base.len())?);
                break;
            }
            if !(is_key_byte(c) || c == b'.') {
                return Err(bad(Problem::BadSectionByte(c)));
            }
            if base.len() == MAX_HEADER_BYTES {
                return Err(bad(Problem::HeaderTooLong));
            }
            base.push(c.to_ascii_lowercase());
        }
        // Git joins `base` and the quoted part with a dot and later splits a key at its first
        // and last dots, so `[a.b "c"]` is section `a`, subsection `b.c`.
        let (section, mut subsection) = match base.iter().position(|&b| b == b'.') {
            Some(dot) => (base[..dot].to_vec(), Some(base[dot + 1..].to_vec())),
            None => (base, None),
        };
        if let Some(q) = quoted {
            subsection = Some(match subsection {
                Some(mut s) => {
                    s.push(b'.');
                    s.extend_from_slice(&q);
                    s
                }
                None => q,
            });
        }
        if section.is_empty() {
            return Err(bad(Problem::EmptySectionName));
        }
        Ok(Header {
            // Only ASCII key bytes were pushed.
            section: section.iter().map(|&b| char::from(b)).collect(),
            subsection,
            span: start..self.cur.pos,
            line,
        })
    }

    /// After the whitespace that follows a section name: `"sub"]`, at most `room` bytes.
    fn quoted_subsection(&mut self, line: usize, room: usize) -> Result<Vec<u8>, ParseError> {
        let bad = |problem| malformed(line, problem);
        let mut c = self.cur.next();
        while is_space(c) {
            if c == b'\n' {
                return Err(bad(Problem::UnterminatedHeader));
            }
            c = self.cur.next();
        }
        if c != b'"' {
            return Err(bad(Problem::BadSubsection));
        }
        let mut sub = Vec::new();
        loop {
            let mut c = self.cur.next();
            if c == b'\n' {
                return Err(bad(Problem::UnterminatedHeader));
            }
            if c == b'"' {
                break;
            }
            if c == b'\\' {
                c = self.cur.next();
                if c == b'\n' {
                    return Err(bad(Problem::UnterminatedHeader));
                }
            }
            if sub.len() == room {
                return Err(bad(Problem::HeaderTooLong));
            }
            sub.push(c);
        }
        if self.cur.next() != b']' {
            return Err(bad(Problem::BadSubsection));
        }
        Ok(sub)
    }

    /// From the first letter of a name through the newline ending its value: git's
    /// `get_value` and `parse_value`.
    fn entry(&mut self, first: u8, start: usize) -> Result<Entry, ParseError> {
        let line = self.line;
        let (Some(header), Some((section, subsection))) =
            (self.headers.len().checked_sub(1), self.current.clone())
        else {
            return Err(malformed(line, Problem::VariableOutsideSection));
        };
        let mut name = String::from(first.to_ascii_lowercase() as char);
        let mut c;
        loop {
            c = self.cur.next();
            if self.cur.eof || !is_key_byte(c) {
                break;
            }
            name.push(c.to_ascii_lowercase() as char);
        }
        while c == b' ' || c == b'\t' {
            c = self.cur.next();
        }
        let value = match c {
            b'\n' => None,
            b'=' => Some(self.value()?),
            c => return Err(malformed(line, Problem::ExpectedEquals(c))),
        };
        let key = KeyRef {
            section,
            subsection,
            name,
        };
        let span = if self.line_clean {
            self.line_start..self.cur.pos
        } else {
            start..self.cur.newline_at
        };
        // A value may have joined lines with trailing backslashes.
        self.line += self.cur.src[start..self.cur.newline_at]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        Ok(Entry {
            key,
            value,
            span,
            header,
            line,
        })
    }

    /// After `=`, through the end of the line (or of the last joined line).
    fn value(&mut self) -> Result<Vec<u8>, ParseError> {
        let line = self.line;
        let mut out = Vec::new();
        let (mut quote, mut comment, mut spaces) = (false, false, 0usize);
        loop {
            let c = self.cur.next();
            if c == b'\n' {
                if quote {
                    return Err(malformed(line, Problem::UnterminatedQuote));
                }
                return Ok(out);
            }
            if comment {
                continue;
            }
            if is_space(c) && !quote {
                if !out.is_empty() {
                    spaces += 1;
                }
                continue;
            }
            if !quote && (c == b';' || c == b'#') {
                comment = true;
                continue;
            }
            out.extend(std::iter::repeat_n(b' ', spaces));
            spaces = 0;
            match c {
                b'\\' => match self.cur.next() {
                    // Joins the next line (at the end of the file, git reads one more end
                    // of line, so an open quote is still an error).
                    b'\n' => {}
                    b't' => out.push(b'\t'),
                    b'b' => out.push(0x08),
                    b'n' => out.push(b'\n'),
                    e @ (b'\\' | b'"') => out.push(e),
                    e => return Err(malformed(line, Problem::UnknownEscape(e))),
                },
                b'"' => quote = !quote,
                c => out.push(c),
            }
        }
    }
}
