//! Path globs for the mount allow/deny lists and name globs for secret-looking environment
//! variables. Path patterns work segment by segment: `*` inside a segment matches any run of
//! characters except `/`, and a segment that is exactly `**` matches zero or more segments.

/// Lexically normalised absolute path segments, or `None` for a relative path. `..` pops a
/// segment (never above `/`), `.` and empty segments vanish.
pub(crate) fn normalize(path: &str) -> Option<Vec<&str>> {
    if !path.starts_with('/') {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    Some(out)
}

/// Is the path absolute and already in normal form (so `normalize` + `join` would return it)?
pub(crate) fn is_normal(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && path[1..]
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."))
}

/// Joins segments back into an absolute path.
pub(crate) fn join(segs: &[&str]) -> String {
    if segs.is_empty() {
        "/".to_string()
    } else {
        let mut s = String::new();
        for seg in segs {
            s.push('/');
            s.push_str(seg);
        }
        s
    }
}

/// `*` matches any run of characters (including none); everything else is literal.
pub(crate) fn wildcard_match(pattern: &str, text: &str) -> bool {
    wildcard_match_by(pattern, text, |a, b| a == b)
}

/// As `wildcard_match`, ignoring ASCII case (environment variable names).
pub(crate) fn wildcard_match_ignore_case(pattern: &str, text: &str) -> bool {
    wildcard_match_by(pattern, text, |a, b| a.eq_ignore_ascii_case(&b))
}

fn wildcard_match_by(pattern: &str, text: &str, eq: impl Fn(u8, u8) -> bool) -> bool {
    let p = pattern.as_bytes();
    let t = text.as_bytes();
    if !p.contains(&b'*') {
        return p.len() == t.len() && p.iter().zip(t).all(|(a, b)| eq(*a, *b));
    }
    // Classic greedy matcher with backtracking to the last star: linear in practice.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && eq(p[pi], t[ti]) {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// A compiled path pattern: its segments, split once so that matching every bind against every
/// denied pattern (on every container start) only compares slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PathGlob<'a> {
    /// A pattern that does not start with `/` must start with `**` (such as `**/docker.sock`).
    segs: Vec<&'a str>,
    /// How many segments come before the first `**`.
    anchored: usize,
}

impl<'a> PathGlob<'a> {
    pub(crate) fn new(pattern: &'a str) -> Result<PathGlob<'a>, String> {
        let body = if let Some(rest) = pattern.strip_prefix('/') {
            rest
        } else if pattern.starts_with("**") {
            pattern
        } else {
            return Err(format!(
                "pattern {pattern:?} must be an absolute path or start with \"**\""
            ));
        };
        let mut segs = Vec::with_capacity(8);
        for seg in body.split('/') {
            match seg {
                "" => {}
                "." | ".." => return Err(format!("pattern {pattern:?} contains {seg:?}")),
                s if s.contains("**") && s != "**" => {
                    return Err(format!(
                        "pattern {pattern:?}: \"**\" must be a whole path segment"
                    ))
                }
                s => segs.push(s),
            }
        }
        let anchored = segs.iter().position(|s| *s == "**").unwrap_or(segs.len());
        Ok(PathGlob { segs, anchored })
    }

    /// Does the (normalised) path match the whole pattern?
    pub(crate) fn matches(&self, path: &[&str]) -> bool {
        match_segs(&self.segs, path)
    }

    /// Is the path a strict ancestor of something the pattern names? Only the literal-anchored
    /// part before the first `**` counts: binding `/run` exposes `/run/containerd/**`, but every
    /// directory is an ancestor of `**/docker.sock`, which would deny everything.
    pub(crate) fn is_strict_ancestor_of_match(&self, path: &[&str]) -> bool {
        path.len() < self.anchored
            && path
                .iter()
                .zip(&self.segs[..self.anchored])
                .all(|(seg, pat)| wildcard_match(pat, seg))
    }
}

pub(crate) fn match_segs(pat: &[&str], path: &[&str]) -> bool {
    match pat.split_first() {
        None => path.is_empty(),
        // The common `**/name` shape: without another `**`, the rest can only match the tail.
        Some((&"**", rest)) if !rest.contains(&"**") => {
            path.len() >= rest.len() && match_segs(rest, &path[path.len() - rest.len()..])
        }
        Some((&"**", rest)) => (0..=path.len()).any(|skip| match_segs(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((seg, path_rest)) => wildcard_match(first, seg) && match_segs(rest, path_rest),
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        PathGlob::new(pattern)
            .unwrap()
            .matches(&normalize(path).unwrap())
    }

    #[test]
    fn normalize_collapses_dots_and_slashes() {
        assert_eq!(normalize("/a//b/./c/"), Some(vec!["a", "b", "c"]));
        assert_eq!(normalize("/a/../../etc"), Some(vec!["etc"]));
        assert_eq!(normalize("/"), Some(vec![]));
        assert_eq!(normalize("rel/path"), None);
        assert_eq!(join(&["a", "b"]), "/a/b");
        assert_eq!(join(&[]), "/");
        for p in ["/", "/a", "/a/b.c"] {
            assert!(is_normal(p), "{p}");
        }
        for p in ["", "a", "/a/", "//a", "/a/./b", "/a/../b", "/.."] {
            assert!(!is_normal(p), "{p}");
        }
    }

    #[test]
    fn single_star_matches_exactly_one_segment() {
        assert!(m("/var/run/netns/*", "/var/run/netns/cni-1234"));
        assert!(!m("/var/run/netns/*", "/var/run/netns"));
        assert!(!m("/var/run/netns/*", "/var/run/netns/a/b"));
        assert!(m("/run/cni-*", "/run/cni-abc"));
    }

    #[test]
    fn double_star_matches_any_depth_including_none() {
        assert!(m("/proc/**", "/proc"));
        assert!(m("/proc/**", "/proc/1/root"));
        assert!(!m("/proc/**", "/procfs"));
        assert!(m("**/docker.sock", "/var/run/docker.sock"));
        assert!(m("**/docker.sock", "/docker.sock"));
        assert!(!m("**/docker.sock", "/var/run/docker.sock.bak"));
        assert!(m("/a/**/b/**/c", "/a/x/b/y/z/c"));
        assert!(!m("/a/**/b/**/c", "/a/x/c"));
        assert!(m("/a/**/x/*", "/a/x/y"));
        assert!(!m("/a/**/x/*", "/a/x"));
        assert!(m(
            "/var/lib/kubelet/pods/*/volumes/kubernetes.io~empty-dir/**",
            "/var/lib/kubelet/pods/abc/volumes/kubernetes.io~empty-dir/cache"
        ));
    }

    #[test]
    fn root_pattern_matches_only_root() {
        assert!(m("/", "/"));
        assert!(!m("/", "/tmp"));
    }

    #[test]
    fn ancestors_of_anchored_patterns_are_detected() {
        let g = PathGlob::new("/run/containerd/**").unwrap();
        assert!(g.is_strict_ancestor_of_match(&["run"]));
        assert!(g.is_strict_ancestor_of_match(&[]));
        assert!(!g.is_strict_ancestor_of_match(&["run", "containerd"]));
        assert!(!g.is_strict_ancestor_of_match(&["srv"]));
        let any = PathGlob::new("**/docker.sock").unwrap();
        assert!(!any.is_strict_ancestor_of_match(&["var"]));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for p in ["relative/x", "/a/../b", "/a/x**"] {
            assert!(PathGlob::new(p).is_err(), "{p}");
        }
    }

    #[test]
    fn wildcard_names() {
        assert!(wildcard_match("*_TOKEN", "GITHUB_TOKEN"));
        assert!(!wildcard_match("*_TOKEN", "TOKEN"));
        assert!(wildcard_match("*_SECRET*", "DB_SECRET_KEY"));
        assert!(wildcard_match("AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN"));
    }
}
