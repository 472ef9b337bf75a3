//! Patterns for paths *inside* a bind mount (`[mounts] protect` and `mask`): relative to the
//! bind's root, segment by segment, `*` within a segment, `**` for any number of segments.
//!
//! Public because the caller that walks the host tree (the shim) must walk it the way the
//! pattern reads: a literal segment is looked up, not listed, and only `**` descends blindly.

/// A compiled relative pattern such as `.git/hooks`, `**/.env` or `.env.*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeGlob {
    pattern: String,
    segs: Vec<String>,
}

/// One step of a pattern-directed walk: what to do with the entries of a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<'a> {
    /// Look up exactly this name.
    Name(&'a str),
    /// List the directory and test each name (a `*` segment or `**`).
    List,
}

impl TreeGlob {
    pub fn new(pattern: &str) -> Result<TreeGlob, String> {
        if pattern.starts_with('/') {
            return Err(format!(
                "pattern {pattern:?} must be relative to the bind's root (no leading \"/\")"
            ));
        }
        let mut segs = Vec::new();
        for seg in pattern.split('/') {
            match seg {
                "" => {}
                "." | ".." => return Err(format!("pattern {pattern:?} contains {seg:?}")),
                s if s.contains("**") && s != "**" => {
                    return Err(format!(
                        "pattern {pattern:?}: \"**\" must be a whole path segment"
                    ))
                }
                s => segs.push(s.to_string()),
            }
        }
        if segs.is_empty() {
            return Err(format!("pattern {pattern:?} names no path"));
        }
        if segs.last().is_some_and(|s| s == "**") {
            return Err(format!(
                "pattern {pattern:?} ends in \"**\": it would name the whole tree"
            ));
        }
        Ok(TreeGlob {
            pattern: pattern.to_string(),
            segs,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Does the relative path (segments) match the whole pattern?
    pub fn matches(&self, path: &[&str]) -> bool {
        let pat: Vec<&str> = self.segs.iter().map(String::as_str).collect();
        crate::glob::match_segs(&pat, path)
    }

    /// Could a strict descendant of `dir` (segments) match? The walk descends only then.
    pub fn may_match_below(&self, dir: &[&str]) -> bool {
        prefix_possible(&self.segs, dir)
    }

    /// How the walk should look into `dir`: one name when the pattern is literal there and
    /// has no `**` before that point, otherwise a listing.
    pub fn step_into(&self, dir: &[&str]) -> Step<'_> {
        let star = self
            .segs
            .iter()
            .position(|s| s == "**")
            .unwrap_or(usize::MAX);
        match self.segs.get(dir.len()) {
            Some(seg) if dir.len() < star && !seg.contains('*') => Step::Name(seg),
            _ => Step::List,
        }
    }
}

/// Can `dir` be the prefix of a path matching `pat`?
fn prefix_possible(pat: &[String], dir: &[&str]) -> bool {
    match (pat.first(), dir.first()) {
        (_, None) => !pat.is_empty(),
        (None, Some(_)) => false,
        (Some(p), Some(_)) if p == "**" => {
            prefix_possible(&pat[1..], dir) || prefix_possible(pat, &dir[1..])
        }
        (Some(p), Some(d)) => {
            crate::glob::wildcard_match(p, d) && prefix_possible(&pat[1..], &dir[1..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(p: &str) -> TreeGlob {
        TreeGlob::new(p).unwrap()
    }

    #[test]
    fn literal_patterns_match_exactly() {
        assert!(g(".git/hooks").matches(&[".git", "hooks"]));
        assert!(!g(".git/hooks").matches(&[".git"]));
        assert!(!g(".git/hooks").matches(&["sub", ".git", "hooks"]));
    }

    #[test]
    fn star_matches_within_a_segment_and_double_star_across() {
        assert!(g(".env.*").matches(&[".env.local"]));
        assert!(!g(".env.*").matches(&[".env"]));
        assert!(g("**/.env").matches(&[".env"]));
        assert!(g("**/.env").matches(&["a", "b", ".env"]));
        assert!(!g("**/.env").matches(&["a", ".envrc"]));
    }

    #[test]
    fn the_walk_descends_only_where_a_match_can_lie() {
        assert!(g(".git/hooks").may_match_below(&[]));
        assert!(g(".git/hooks").may_match_below(&[".git"]));
        assert!(!g(".git/hooks").may_match_below(&["src"]));
        assert!(!g(".git/hooks").may_match_below(&[".git", "hooks"]));
        assert!(g("**/.env").may_match_below(&["src", "deep"]));
    }

    #[test]
    fn literal_segments_are_looked_up_not_listed() {
        assert_eq!(g(".git/hooks").step_into(&[]), Step::Name(".git"));
        assert_eq!(g(".git/hooks").step_into(&[".git"]), Step::Name("hooks"));
        assert_eq!(g(".env.*").step_into(&[]), Step::List);
        assert_eq!(g("**/.env").step_into(&[]), Step::List);
        assert_eq!(g("a/**/b").step_into(&[]), Step::Name("a"));
        assert_eq!(g("a/**/b").step_into(&["a"]), Step::List);
    }

    #[test]
    fn bad_patterns_are_refused() {
        for p in ["/abs", "a/../b", "", "x/**", "a**/b"] {
            assert!(TreeGlob::new(p).is_err(), "{p}");
        }
    }
}
