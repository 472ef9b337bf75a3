//! `[mounts] protect` and `mask`: what the caller found below each bind source (the
//! `Context::host_tree`) becomes extra mounts on top of the bind, appended after every other
//! mount so they land over it.
//!
//! - protect, inside a bind that stays writable: a read-only bind of the path onto itself, so a
//!   sandboxed agent cannot plant a git hook or a `core.fsmonitor` command that runs on the
//!   host later. A read-only bind needs nothing more.
//! - mask, inside any bind: an empty read-only file over a file (an empty read-only tmpfs over a
//!   directory), so a secret in the project directory never reaches the sandbox. The audit
//!   names each path.
//!
//! A match that is a symbolic link is refused: a bind onto it would follow it, and leaving it
//! would leave the path writable through whatever it points at.

use serde_json::Value;

use crate::decision::{Action, Rule};
use crate::harden::types::{EntryKind, TreeEntry, TreeList};
use crate::json::{strings_value, Object};
use crate::rules::Pass;

/// A bind mount the mounts rule kept: where it lands, its source as written, and whether it
/// stays writable.
pub(super) struct Bind {
    pub dest: String,
    pub source: String,
    pub writable: bool,
}

pub(super) fn mount(dest: &str, kind: &str, source: &str, options: &[&str]) -> Value {
    let mut m = Object::new();
    m.insert("destination".into(), Value::from(dest));
    m.insert("type".into(), Value::from(kind));
    m.insert("source".into(), Value::from(source));
    let options: Vec<String> = options.iter().map(|o| o.to_string()).collect();
    m.insert("options".into(), strings_value(&options));
    Value::Object(m)
}

/// A relative path as the caller must give it: segments, no `.`, `..` or empty ones.
pub(super) fn is_clean_relative(path: &str) -> bool {
    !path.is_empty()
        && path
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..")
}

pub(super) fn add(mounts: &mut Vec<Value>, binds: &[Bind], seen: &[String], pass: &mut Pass<'_>) {
    let tree = &pass.ctx.host_tree;
    if tree.found.is_empty() {
        return;
    }
    let empty_file = tree.empty_file.clone();
    let mut added: Vec<String> = Vec::new();
    for bind in binds {
        let Some(entries) = tree.found.get(&bind.source) else {
            continue;
        };
        // Parents before children (a protected directory, then a mask inside it); at one path
        // the mask wins, since it hides more.
        let mut entries: Vec<&TreeEntry> = entries.iter().collect();
        entries.sort_by(|a, b| {
            (a.path.as_str(), a.list == TreeList::Protect)
                .cmp(&(b.path.as_str(), b.list == TreeList::Protect))
        });
        for entry in entries {
            if entry.list == TreeList::Protect && !bind.writable {
                continue;
            }
            let dest = format!("{}/{}", bind.dest.trim_end_matches('/'), entry.path);
            let label = format!("mounts[{dest}]");
            if !is_clean_relative(&entry.path) {
                pass.reject(
                    Rule::Mounts,
                    label,
                    format!(
                        "host path {:?} below {} is not a clean relative path",
                        entry.path, bind.source
                    ),
                );
                continue;
            }
            if seen.contains(&dest) || added.contains(&dest) {
                continue;
            }
            let list = match entry.list {
                TreeList::Protect => "mounts.protect",
                TreeList::Mask => "mounts.mask",
            };
            let host = format!("{}/{}", bind.source.trim_end_matches('/'), entry.path);
            let (new_mount, reason) = match (entry.list, entry.kind) {
                (_, EntryKind::Symlink) => {
                    pass.reject(
                        Rule::Mounts,
                        label,
                        format!("{host} (in {list}) is a symbolic link: it cannot be covered without following it"),
                    );
                    continue;
                }
                (_, EntryKind::Other) => {
                    pass.record(
                        Rule::Mounts,
                        label,
                        Action::Reported,
                        None,
                        None,
                        format!("{host} (in {list}) is not a file or directory: left as it is"),
                    );
                    continue;
                }
                (TreeList::Protect, _) => (
                    mount(&dest, "bind", &host, &["rbind", "ro", "nosuid", "nodev"]),
                    format!(
                        "protected: read-only inside the writable bind of {} ({list})",
                        bind.source
                    ),
                ),
                (TreeList::Mask, EntryKind::File) => {
                    let Some(empty) = empty_file.as_deref() else {
                        pass.reject(
                            Rule::Mounts,
                            label,
                            format!("{host} must be masked ({list}) but the runtime supplied no empty file"),
                        );
                        continue;
                    };
                    (
                        mount(
                            &dest,
                            "bind",
                            empty,
                            &["bind", "ro", "nosuid", "nodev", "noexec"],
                        ),
                        format!("masked: {host} replaced by an empty read-only file ({list})"),
                    )
                }
                (TreeList::Mask, EntryKind::Dir) => (
                    mount(
                        &dest,
                        "tmpfs",
                        "tmpfs",
                        &["ro", "nosuid", "nodev", "noexec", "mode=555", "size=4096"],
                    ),
                    format!("masked: directory {host} replaced by an empty read-only one ({list})"),
                ),
            };
            pass.record(
                Rule::Mounts,
                label,
                Action::Added,
                None,
                Some(new_mount.clone()),
                reason,
            );
            mounts.push(new_mount);
            added.push(dest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use crate::harden::types::{Context, EntryKind, HostTree, TreeEntry, TreeList};
    use crate::policy::Policy;
    use serde_json::json;

    const PROJECT: &str = "/srv/projects/app";

    fn policy() -> Policy {
        let mut p = Policy::default();
        p.mounts.writable_sources = vec!["/srv/projects/**".into()];
        p.mounts.protect = vec![".git/hooks".into(), ".git/config".into()];
        p.mounts.mask = vec!["**/.env".into()];
        p
    }

    fn entry(path: &str, kind: EntryKind, list: TreeList) -> TreeEntry {
        TreeEntry {
            path: path.into(),
            kind,
            list,
        }
    }

    fn ctx(entries: Vec<TreeEntry>) -> Context {
        Context {
            host_tree: HostTree {
                found: [(PROJECT.to_string(), entries)].into_iter().collect(),
                empty_file: Some("/run/bundle/empty".into()),
            },
            ..Context::default()
        }
    }

    fn spec_with_project(opts: serde_json::Value) -> serde_json::Value {
        let mut spec = base_spec();
        spec["mounts"].as_array_mut().unwrap().push(
            json!({"destination": "/work", "type": "bind", "source": PROJECT, "options": opts}),
        );
        spec
    }

    #[test]
    fn protected_paths_in_a_writable_bind_get_read_only_binds_on_top() {
        let c = ctx(vec![
            entry(".git/hooks", EntryKind::Dir, TreeList::Protect),
            entry(".git/config", EntryKind::File, TreeList::Protect),
        ]);
        let h = harden_with(&spec_with_project(json!(["rbind", "rw"])), &policy(), &c).unwrap();
        let hooks = mount_at(&h.spec, "/work/.git/hooks").expect("hooks covered");
        assert_eq!(hooks["source"], format!("{PROJECT}/.git/hooks"));
        assert_eq!(hooks["options"], json!(["rbind", "ro", "nosuid", "nodev"]));
        assert!(mount_at(&h.spec, "/work/.git/config").is_some());
        // After the project's own bind, so they land on top of it.
        let dests: Vec<_> = h.spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].clone())
            .collect();
        let at = |d: &str| dests.iter().position(|x| x == d).unwrap();
        assert!(at("/work") < at("/work/.git/hooks"));
        assert_eq!(count(&h, Rule::Mounts, Action::Added), 2);
    }

    #[test]
    fn a_read_only_bind_needs_no_protection_but_still_gets_masks() {
        let c = ctx(vec![
            entry(".git/hooks", EntryKind::Dir, TreeList::Protect),
            entry("sub/.env", EntryKind::File, TreeList::Mask),
        ]);
        let h = harden_with(&spec_with_project(json!(["rbind", "ro"])), &policy(), &c).unwrap();
        assert!(mount_at(&h.spec, "/work/.git/hooks").is_none());
        let env = mount_at(&h.spec, "/work/sub/.env").expect("masked");
        assert_eq!(env["source"], "/run/bundle/empty");
        assert!(h
            .decisions
            .iter()
            .any(|d| d.reason.contains("masked") && d.field == "mounts[/work/sub/.env]"));
    }

    #[test]
    fn masked_directories_become_empty_read_only_tmpfs() {
        let c = ctx(vec![entry(".env", EntryKind::Dir, TreeList::Mask)]);
        let h = harden_with(&spec_with_project(json!(["rbind"])), &policy(), &c).unwrap();
        let m = mount_at(&h.spec, "/work/.env").unwrap();
        assert_eq!(m["type"], "tmpfs");
        assert!(m["options"].as_array().unwrap().contains(&json!("ro")));
    }

    #[test]
    fn a_symlinked_protected_path_is_refused() {
        let c = ctx(vec![entry(
            ".git/hooks",
            EntryKind::Symlink,
            TreeList::Protect,
        )]);
        let r = rejections_with(&spec_with_project(json!(["rbind", "rw"])), &policy(), &c);
        assert!(r[0].reason.contains("symbolic link"), "{:?}", r);
    }

    #[test]
    fn a_mask_without_an_empty_file_is_refused_not_skipped() {
        let mut c = ctx(vec![entry(".env", EntryKind::File, TreeList::Mask)]);
        c.host_tree.empty_file = None;
        let r = rejections_with(&spec_with_project(json!(["rbind", "rw"])), &policy(), &c);
        assert!(r[0].reason.contains("no empty file"), "{:?}", r);
    }

    #[test]
    fn a_path_that_climbs_out_of_the_bind_is_refused() {
        let c = ctx(vec![entry(
            "../etc/passwd",
            EntryKind::File,
            TreeList::Protect,
        )]);
        let r = rejections_with(&spec_with_project(json!(["rbind", "rw"])), &policy(), &c);
        assert!(r[0].reason.contains("clean relative path"), "{:?}", r);
    }

    #[test]
    fn the_mask_wins_where_both_lists_name_a_path() {
        let c = ctx(vec![
            entry(".git/config", EntryKind::File, TreeList::Protect),
            entry(".git/config", EntryKind::File, TreeList::Mask),
        ]);
        let h = harden_with(&spec_with_project(json!(["rbind", "rw"])), &policy(), &c).unwrap();
        assert_eq!(
            mount_at(&h.spec, "/work/.git/config").unwrap()["source"],
            "/run/bundle/empty"
        );
        assert_eq!(count(&h, Rule::Mounts, Action::Added), 1);
    }
}
