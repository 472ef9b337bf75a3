//! Following a path the way the host's git will, one component at a time, to know which file
//! it ends at and which symbolic links it passes on the way. A hook that is a link to
//! `scripts/pre-commit.sh`, a `core.hooksPath` that is a link to a directory of the project:
//! the file that runs is the link's target, so that is what must be protected, and each link
//! on the way must still be the same link at exit (a bind cannot cover a link without
//! following it). Nothing is opened: only `lstat` and `readlink`.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The kernel's bound on links followed in one lookup (MAXSYMLINKS).
const MAX_LINKS: usize = 40;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    /// Where the path ends, with every link on the way replaced by its target; the part that
    /// does not exist (yet) is kept as written.
    pub target: PathBuf,
    /// The links passed, in order (absolute paths, as the host names them).
    pub links: Vec<PathBuf>,
}

/// Resolves the absolute path `path` (see the module's comment). More than [`MAX_LINKS`] links
/// stop the walk where it is: the kernel would fail the lookup there too.
pub(super) fn resolve(path: &Path) -> Resolved {
    let mut pending: VecDeque<OsString> = components(path).collect();
    let mut current = PathBuf::from("/");
    let mut links = Vec::new();
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            current.pop();
            continue;
        }
        let next = current.join(&name);
        let is_link = fs::symlink_metadata(&next).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            current = next;
            continue;
        }
        if links.len() == MAX_LINKS {
            current = next;
            pending.clear();
            break;
        }
        let Ok(target) = fs::read_link(&next) else {
            current = next;
            continue;
        };
        links.push(next);
        if target.is_absolute() {
            current = PathBuf::from("/");
        }
        for c in components(&target).collect::<Vec<_>>().into_iter().rev() {
            pending.push_front(c);
        }
    }
    for rest in pending {
        current.push(rest);
    }
    Resolved {
        target: current,
        links,
    }
}

/// The names of a path's components, `..` kept, `.` and the root dropped.
fn components(path: &Path) -> impl Iterator<Item = OsString> + '_ {
    path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.to_os_string()),
        Component::ParentDir => Some(OsString::from("..")),
        Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
    })
}

/// The writable binds, to tell whether a host path is inside one of them: by the source as the
/// spec writes it and as the host resolves it (a source below a link).
#[derive(Debug, Clone, Default)]
pub(super) struct Binds {
    roots: Vec<(String, PathBuf)>,
}

impl Binds {
    pub fn new(sources: &[String]) -> Binds {
        Binds {
            roots: sources
                .iter()
                .map(|s| {
                    let real = resolve(Path::new(s)).target;
                    (s.clone(), real)
                })
                .collect(),
        }
    }

    /// The bind (its source as written) holding the resolved path `physical`, and the path
    /// relative to it; `None` outside every bind or at a bind's root itself. The deepest bind
    /// wins.
    pub fn locate(&self, physical: &Path) -> Option<(&str, String)> {
        self.roots
            .iter()
            .filter_map(|(written, real)| {
                let rel = physical.strip_prefix(real).ok()?;
                let rel = rel.to_str()?;
                (!rel.is_empty()).then_some((written.as_str(), real, rel.to_string()))
            })
            .max_by_key(|(_, real, _)| real.as_os_str().len())
            .map(|(w, _, rel)| (w, rel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_on_the_way_are_followed_and_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join("scripts/real")).unwrap();
        fs::write(root.join("scripts/real/hook.sh"), "x").unwrap();
        symlink("real", root.join("scripts/dir")).unwrap();
        symlink("../scripts/dir/hook.sh", root.join("scripts/link")).unwrap();
        fs::create_dir(root.join("hooks")).unwrap();
        symlink("../scripts/link", root.join("hooks/pre-commit")).unwrap();
        let r = resolve(&root.join("hooks/pre-commit"));
        assert_eq!(r.target, root.join("scripts/real/hook.sh"));
        assert_eq!(
            r.links,
            [
                root.join("hooks/pre-commit"),
                root.join("scripts/link"),
                root.join("scripts/dir")
            ]
        );
    }

    #[test]
    fn dot_dot_after_a_link_is_taken_from_the_links_target() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join("a/b")).unwrap();
        symlink(root.join("a/b"), root.join("l")).unwrap();
        assert_eq!(resolve(&root.join("l/../x")).target, root.join("a/x"));
    }

    #[test]
    fn a_link_loop_stops_without_hanging() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        let r = resolve(&root.join("a/x"));
        assert_eq!(r.links.len(), MAX_LINKS);
    }

    #[test]
    fn a_path_is_located_in_the_deepest_bind() {
        let binds = Binds::new(&["/srv/p".into(), "/srv/p/sub".into()]);
        assert_eq!(
            binds.locate(Path::new("/srv/p/sub/x")),
            Some(("/srv/p/sub", "x".to_string()))
        );
        assert_eq!(
            binds.locate(Path::new("/srv/p/y")),
            Some(("/srv/p", "y".to_string()))
        );
        assert_eq!(binds.locate(Path::new("/srv/p")), None);
        assert_eq!(binds.locate(Path::new("/srv/q")), None);
    }
}
