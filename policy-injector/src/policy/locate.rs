//! Finding where a key sits in the policy text, for error messages about values that parsed
//! fine but mean something the policy cannot accept.

/// 1-based line and column of a byte offset.
pub(crate) fn line_col(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = &src[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(offset, |nl| offset - nl - 1) + 1;
    (line, col)
}

enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// Splits `scratch.tmpfs[1].path` into keys and indices.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(Step::Key(name));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let end = stripped.find(']').unwrap_or(stripped.len());
            if let Ok(i) = stripped[..end].parse() {
                out.push(Step::Index(i));
            }
            rest = stripped.get(end + 1..).unwrap_or("");
        }
    }
    out
}

enum Cur<'a> {
    Item(&'a toml_edit::Item),
    Table(&'a toml_edit::Table),
}

/// The line of the deepest part of `path` present in `src`: the key's own line when the key
/// is written, else the line of its nearest written parent.
pub(crate) fn line_of(src: &str, path: &str) -> Option<usize> {
    let doc = toml_edit::Document::parse(src).ok()?;
    let mut cur = Cur::Item(doc.as_item());
    let mut best: Option<usize> = None;
    for step in steps(path) {
        let (next, span) = match (step, &cur) {
            (Step::Key(k), _) => {
                let table: Option<&dyn toml_edit::TableLike> = match cur {
                    Cur::Item(i) => i.as_table_like(),
                    Cur::Table(t) => Some(t),
                };
                let Some((key, value)) = table.and_then(|t| t.get_key_value(k)) else {
                    break;
                };
                (Cur::Item(value), key.span().or_else(|| value.span()))
            }
            (Step::Index(i), Cur::Item(toml_edit::Item::ArrayOfTables(a))) => {
                let Some(t) = a.get(i) else { break };
                (Cur::Table(t), t.span())
            }
            // Indexes into inline arrays: the array's own line is as close as it gets.
            (Step::Index(_), _) => break,
        };
        if let Some(s) = span {
            best = Some(line_col(src, s.start).0);
        }
        cur = next;
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("a\nbc\n", 0), (1, 1));
        assert_eq!(line_col("a\nbc\n", 3), (2, 2));
    }

    #[test]
    fn line_of_finds_nested_keys() {
        let src = "version = 1\n\n[resources]\ncpu = \"1\"\nmemory = \"0\"\n";
        assert_eq!(line_of(src, "resources.memory"), Some(5));
        assert_eq!(line_of(src, "resources"), Some(3));
        assert_eq!(line_of(src, "resources.processes"), Some(3));
        assert_eq!(line_of(src, "lifetime.max_runtime"), None);
        let arr = "[[scratch.tmpfs]]\npath = \"/a\"\n\n[[scratch.tmpfs]]\npath = \"b\"\n";
        assert_eq!(line_of(arr, "scratch.tmpfs[1].path"), Some(5));
    }
}
