//! Applying key replacements to a config's text while keeping every other byte: the edits are
//! planned as removals of byte ranges and insertions of whole lines, then spliced in one pass.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use super::parse::{is_space, ConfigFile};
use super::write::{write_entry, write_header};
use super::{KeyRef, Value};

/// One splice: remove `range` (empty for a pure insertion), then write `text` there.
struct Splice {
    range: Range<usize>,
    text: Vec<u8>,
}

/// One key whose values differ between the seed and the sandbox's copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub key: KeyRef,
    /// The key's values in the seed, in file order (empty: the sandbox added the key).
    pub before: Vec<Value>,
    /// Its values in the sandbox's copy (empty: the sandbox removed the key).
    pub after: Vec<Value>,
}

/// `src` (parsed as `config`) with every key of `changes` replaced by its `after` values.
pub(crate) fn apply(src: &[u8], config: &ConfigFile, changes: &[Change]) -> Vec<u8> {
    let eol = line_ending(src);
    let changed: HashSet<&KeyRef> = changes.iter().map(|c| &c.key).collect();

    // Every host line of a changed key goes, wherever it is.
    let mut removals: Vec<Range<usize>> = Vec::new();
    let mut emptied: HashMap<usize, Vec<Range<usize>>> = HashMap::new();
    let mut left = vec![0usize; config.headers.len()];
    for entry in &config.entries {
        if changed.contains(&entry.key) {
            removals.push(entry.span.clone());
            emptied
                .entry(entry.header)
                .or_default()
                .push(entry.span.clone());
        } else {
            left[entry.header] += 1;
        }
    }

    // New values go at the end of the last instance of their section, when that end is a line
    // of its own; else into a section appended at the end of the file.
    let places = insertion_points(src, config);
    let mut last_instance: HashMap<(&str, Option<&[u8]>), usize> = HashMap::new();
    for (i, h) in config.headers.iter().enumerate() {
        last_instance.insert((h.section.as_str(), h.subsection.as_deref()), i);
    }
    // Header index -> (where its new lines go, the lines).
    let mut into_header: HashMap<usize, (usize, Vec<u8>)> = HashMap::new();
    let mut appended: Vec<Vec<u8>> = Vec::new();
    let mut appended_at: HashMap<(&str, Option<&[u8]>), usize> = HashMap::new();
    for change in changes.iter().filter(|c| !c.after.is_empty()) {
        let key = &change.key;
        let section = (key.section(), key.subsection());
        let target = last_instance
            .get(&section)
            .and_then(|&h| Some((h, places[h]?)));
        let buf = match target {
            Some((h, at)) => &mut into_header.entry(h).or_insert((at, Vec::new())).1,
            None => {
                let i = *appended_at.entry(section).or_insert_with(|| {
                    let mut header = Vec::new();
                    write_header(&mut header, key, eol);
                    appended.push(header);
                    appended.len() - 1
                });
                &mut appended[i]
            }
        };
        for value in &change.after {
            write_entry(buf, key, value.as_deref(), eol);
        }
    }

    // `git remote remove` leaves a section with nothing in it: drop its header as well.
    for (&h, spans) in &emptied {
        if left[h] == 0 && !into_header.contains_key(&h) {
            if let Some(range) = emptied_section(src, config, h, spans) {
                removals.push(range);
            }
        }
    }

    let mut splices: Vec<Splice> = merge(removals)
        .into_iter()
        .map(|range| Splice {
            range,
            text: Vec::new(),
        })
        .collect();
    for (at, text) in into_header.into_values() {
        splices.push(Splice {
            range: at..at,
            text,
        });
    }
    let tail: Vec<u8> = appended.concat();
    if !tail.is_empty() {
        splices.push(Splice {
            range: src.len()..src.len(),
            text: tail,
        });
    }
    // Lines appended after a last entry the file leaves open must first close it.
    let open_end = config.ends_in_value
        && config
            .entries
            .last()
            .is_some_and(|e| !changed.contains(&e.key));
    splice(src, splices, eol, open_end)
}

/// CRLF if the file's first line ends so (a file written on Windows), else LF.
fn line_ending(src: &[u8]) -> &'static [u8] {
    match src.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && src[i - 1] == b'\r' => b"\r\n",
        _ => b"\n",
    }
}

/// For each header: just after the line holding the last thing of its instance (its last
/// entry, or the header itself), if no other header starts on that line (`[a] [b]` has no
/// place for `a`'s lines).
fn insertion_points(src: &[u8], config: &ConfigFile) -> Vec<Option<usize>> {
    let mut last: Vec<usize> = config.headers.iter().map(|h| h.span.end).collect();
    for e in &config.entries {
        last[e.header] = last[e.header].max(e.span.end);
    }
    last.iter()
        .enumerate()
        .map(|(h, &end)| {
            let at = line_end(src, end);
            match config.headers.get(h + 1) {
                Some(next) if next.span.start < at => None,
                _ => Some(at),
            }
        })
        .collect()
}

/// The position after the newline that ends the line `at` is on (`at` itself when it already
/// follows a newline), or the end of the file.
fn line_end(src: &[u8], at: usize) -> usize {
    if at > 0 && src[at - 1] == b'\n' {
        return at;
    }
    src[at..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(src.len(), |i| at + i + 1)
}

/// The bytes to delete to drop header `h` whose entries (`spans`) all go: from the start of
/// its line through its last entry. `None` (keep it) if anything but whitespace would remain
/// in the section, or the header shares its line with something before it.
fn emptied_section(
    src: &[u8],
    config: &ConfigFile,
    h: usize,
    spans: &[Range<usize>],
) -> Option<Range<usize>> {
    let header = &config.headers[h];
    let line_start = src[..header.span.start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    if !src[line_start..header.span.start]
        .iter()
        .all(|&b| is_space(b))
    {
        return None;
    }
    let section_end = config
        .headers
        .get(h + 1)
        .map_or(src.len(), |next| next.span.start);
    let mut at = header.span.end;
    for span in spans {
        if !src[at..span.start].iter().all(|&b| is_space(b)) {
            return None;
        }
        at = span.end;
    }
    if !src[at..section_end].iter().all(|&b| is_space(b)) {
        return None;
    }
    let end = spans
        .iter()
        .map(|s| line_end(src, s.end))
        .fold(line_end(src, header.span.end), usize::max);
    Some(line_start..end.min(section_end))
}

/// Sorted, with overlapping or touching ranges joined.
fn merge(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<usize>> = Vec::new();
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Writes `src` with the splices applied. Removals never overlap (merged) and insertions sit at
/// line boundaries outside them; an insertion where a removal starts goes first.
fn splice(src: &[u8], mut splices: Vec<Splice>, eol: &[u8], open_end: bool) -> Vec<u8> {
    splices.sort_by_key(|s| (s.range.start, s.range.end));
    let mut out = Vec::with_capacity(src.len() + 256);
    let mut at = 0;
    let mut closed = false;
    for s in splices {
        let start = s.range.start.max(at);
        out.extend_from_slice(&src[at..start]);
        let at_end = start == src.len();
        if !s.text.is_empty()
            && !closed
            && at_end
            && (open_end || !(out.is_empty() || out.ends_with(b"\n")))
        {
            // The file lacks its last newline, or its last value runs to the end of the file.
            // If the last line ends in a backslash, a newline alone would join our first line
            // to it (git reads `\` before the end of the file as joining nothing): an empty
            // line after it closes the value.
            if out.ends_with(b"\\") {
                out.extend_from_slice(eol);
            }
            out.extend_from_slice(eol);
            closed = true;
        }
        out.extend_from_slice(&s.text);
        at = s.range.end.max(start);
    }
    out.extend_from_slice(&src[at..]);
    out
}
