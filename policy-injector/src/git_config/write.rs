//! Writing config text git reads back exactly: `[section "sub"]` headers and `\tname = value`
//! lines, quoted and escaped as git's parser needs (see `parse.rs` for what it does to bare
//! whitespace, `#` and `;`).

use std::collections::HashMap;

use super::{KeyRef, Shown};

/// A setting git's format cannot hold: a NUL byte in a value (git would cut the value there).
/// Never the case for values [`parse`](super::parse) returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{key}: the value `{}` holds a NUL byte, which a git config cannot",
    Shown(value)
)]
pub struct Unwritable {
    pub key: KeyRef,
    pub value: Vec<u8>,
}

/// A whole config holding `settings`: one header per section in the order sections first
/// appear, each key's values in the order given (what `git config --get-all` returns).
pub fn serialize<'a, I>(settings: I) -> Result<Vec<u8>, Unwritable>
where
    I: IntoIterator<Item = (&'a KeyRef, Option<&'a [u8]>)>,
{
    let settings: Vec<_> = settings.into_iter().collect();
    if let Some((key, Some(v))) = settings
        .iter()
        .find(|(_, v)| v.is_some_and(|v| v.contains(&0)))
    {
        return Err(Unwritable {
            key: (*key).clone(),
            value: v.to_vec(),
        });
    }
    Ok(write_grouped(settings))
}

/// One value of one key, borrowed.
type Setting<'a> = (&'a KeyRef, Option<&'a [u8]>);

/// [`serialize`] for settings known to hold no NUL (parsed ones). Linear: a 4 MiB config can
/// hold hundreds of thousands of sections.
pub(crate) fn write_grouped(settings: Vec<Setting<'_>>) -> Vec<u8> {
    let mut index: HashMap<(&str, Option<&[u8]>), usize> = HashMap::new();
    let mut sections: Vec<Vec<Setting<'_>>> = Vec::new();
    for (key, value) in settings {
        let at = *index
            .entry((key.section(), key.subsection()))
            .or_insert_with(|| {
                sections.push(Vec::new());
                sections.len() - 1
            });
        sections[at].push((key, value));
    }
    let mut out = Vec::new();
    for lines in sections {
        write_header(&mut out, lines[0].0, b"\n");
        for (key, value) in lines {
            write_entry(&mut out, key, value, b"\n");
        }
    }
    out
}

/// `[section]` or `[section "sub"]` and `eol`. Inside the quotes only `"` and `\` need a
/// backslash; git keeps every other byte as it is.
pub(crate) fn write_header(out: &mut Vec<u8>, key: &KeyRef, eol: &[u8]) {
    out.push(b'[');
    out.extend_from_slice(key.section.as_bytes());
    if let Some(sub) = key.subsection() {
        out.extend_from_slice(b" \"");
        for &b in sub {
            if b == b'"' || b == b'\\' {
                out.push(b'\\');
            }
            out.push(b);
        }
        out.push(b'"');
    }
    out.push(b']');
    out.extend_from_slice(eol);
}

/// `\tname = value` and `eol`, or `\tname` for a bare boolean.
pub(crate) fn write_entry(out: &mut Vec<u8>, key: &KeyRef, value: Option<&[u8]>, eol: &[u8]) {
    out.push(b'\t');
    out.extend_from_slice(key.name.as_bytes());
    if let Some(v) = value {
        out.extend_from_slice(b" = ");
        write_value(out, v);
    }
    out.extend_from_slice(eol);
}

fn write_value(out: &mut Vec<u8>, v: &[u8]) {
    // Unquoted, git drops leading and trailing spaces, turns a CR into a space and starts a
    // comment at `#` or `;`. Inner runs of spaces survive unquoted, but quoting costs nothing.
    // An empty value is quoted only so a reader sees it was meant.
    let quote = v.is_empty()
        || v.first() == Some(&b' ')
        || v.last() == Some(&b' ')
        || v.iter().any(|b| matches!(b, b'#' | b';' | b'\r'));
    if quote {
        out.push(b'"');
    }
    for &b in v {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            b => out.push(b),
        }
    }
    if quote {
        out.push(b'"');
    }
}
