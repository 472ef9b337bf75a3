//! `[mounts.workspace] git`: every git directory the caller found in a writable bind
//! (`Context::git_tree`) is replaced inside the sandbox by its staging copy, with the data
//! directories bound live on top, and every `.git` file is bound read-only onto itself.
//!
//! Why a copy and not read-only binds of `config` and `hooks`: git writes its config through
//! `config.lock` and a rename, which fails onto a mount point ("could not write config file
//! .git/config: Device or resource busy"), so `git remote add` and `git branch --track` broke;
//! and a rename of `.git` itself, or a new `commondir` or `config.worktree` beside the
//! protected files, walked around them. With the staging copy mounted at the git directory's
//! own path, the sandbox writes whatever it likes into a directory the host never reads, the
//! git directory cannot be renamed or removed (it is a mount point), and the runtime decides at
//! exit what comes back.

use serde_json::Value;

use super::protect::{is_clean_relative, mount, Bind};
use crate::decision::{Action, Rule};
use crate::harden::types::{GitEntry, GitEntryKind, StagedGitDir};
use crate::rules::Pass;
use crate::workspace::LIVE_DIRS;

fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() {
        base.to_string()
    } else {
        format!("{}/{}", base.trim_end_matches('/'), rel)
    }
}

pub(super) fn add(mounts: &mut Vec<Value>, binds: &[Bind], pass: &mut Pass<'_>) {
    let policy = &pass.policy.mounts.workspace;
    if !policy.git || pass.ctx.git_tree.found.is_empty() {
        return;
    }
    let max = policy.max_repositories as usize;
    let tree = &pass.ctx.git_tree;
    for bind in binds.iter().filter(|b| b.writable) {
        let Some(entries) = tree.found.get(&bind.source) else {
            continue;
        };
        // Parents first: a submodule's git directory (.git/modules/x) is mounted inside its
        // parent's staging copy, so the parent's must be in place.
        let mut entries: Vec<&GitEntry> = entries.iter().collect();
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        for entry in entries {
            let dest = join(&bind.dest, &entry.path);
            let host = join(&bind.source, &entry.path);
            let label = format!("mounts[{dest}]");
            if !entry.path.is_empty() && !is_clean_relative(&entry.path) {
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
            match &entry.kind {
                GitEntryKind::Dir { staging, live } => {
                    if pass.staged_git.len() >= max {
                        pass.reject(
                            Rule::Mounts,
                            label,
                            format!(
                                "more than {max} git directories in writable binds (mounts.workspace.max_repositories)"
                            ),
                        );
                        continue;
                    }
                    if !staging.starts_with('/') {
                        pass.reject(
                            Rule::Mounts,
                            label,
                            format!("staging copy {staging:?} of {host} is not an absolute path"),
                        );
                        continue;
                    }
                    if let Some(bad) = live.iter().find(|n| !LIVE_DIRS.contains(&n.as_str())) {
                        pass.reject(
                            Rule::Mounts,
                            label,
                            format!("{bad:?} in {host} is not one of git's data directories"),
                        );
                        continue;
                    }
                    let copy = mount(&dest, "bind", staging, &["rbind", "rw", "nosuid", "nodev"]);
                    pass.record(
                        Rule::Mounts,
                        label,
                        Action::Added,
                        None,
                        Some(copy.clone()),
                        format!(
                            "git directory {host}: the sandbox works on a private copy of its control files (config, hooks, HEAD, index); {} stay live; at exit only data and the config's safe keys come back (mounts.workspace.git)",
                            if live.is_empty() { "no data directories".to_string() } else { live.join(", ") }
                        ),
                    );
                    mounts.push(copy);
                    for name in live {
                        mounts.push(mount(
                            &format!("{dest}/{name}"),
                            "bind",
                            &format!("{host}/{name}"),
                            &["rbind", "rw", "nosuid", "nodev"],
                        ));
                    }
                    pass.staged_git.push(StagedGitDir {
                        bind_source: bind.source.clone(),
                        path: entry.path.clone(),
                        staging: staging.clone(),
                        destination: dest,
                        live: live.clone(),
                    });
                }
                GitEntryKind::Link => {
                    let link = mount(&dest, "bind", &host, &["rbind", "ro", "nosuid", "nodev"]);
                    pass.record(
                        Rule::Mounts,
                        label,
                        Action::Added,
                        None,
                        Some(link.clone()),
                        format!(
                            "gitlink {host}: read-only, so the repository it names stays the one the host's git uses (mounts.workspace.git)"
                        ),
                    );
                    mounts.push(link);
                }
            }
        }
        report_hooks(bind, pass);
    }
}

/// Names each of the owner's hooks in this bind that runs or reads project files, and what
/// became of those files: protected (by the protect step, through the caller's references) or
/// left writable and reported at exit.
fn report_hooks(bind: &Bind, pass: &mut Pass<'_>) {
    let Some(notes) = pass.ctx.git_tree.hooks.get(&bind.source) else {
        return;
    };
    let lines: Vec<(String, String)> = notes
        .iter()
        .map(|n| {
            let mut parts = Vec::new();
            if !n.protected.is_empty() {
                parts.push(format!(
                    "protected (read-only inside, quarantined at exit when new or replaced): {}",
                    n.protected.join(", ")
                ));
            }
            if !n.watched.is_empty() {
                parts.push(format!(
                    "watched (quarantined at exit when new or replaced): {}",
                    n.watched.join(", ")
                ));
            }
            if !n.reported.is_empty() {
                parts.push(format!(
                    "left writable (the agent's work), changes reported at exit: {}",
                    n.reported.join(", ")
                ));
            }
            if let Some(why) = &n.unread {
                parts.push(format!("not read through: {why}"));
            }
            (
                format!("mounts[{}]", join(&bind.dest, &n.hook)),
                format!(
                    "the owner's hook {} ({}) runs project files; {} (mounts.workspace.git)",
                    n.hook,
                    n.tool,
                    parts.join("; ")
                ),
            )
        })
        .collect();
    for (label, reason) in lines {
        pass.record(Rule::Mounts, label, Action::Reported, None, None, reason);
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use crate::harden::types::{Context, GitEntry, GitEntryKind, GitTree};
    use crate::policy::Policy;
    use serde_json::json;

    const PROJECT: &str = "/srv/projects/app";

    fn policy() -> Policy {
        let mut p = Policy::default();
        p.mounts.writable_sources = vec!["/srv/projects/**".into()];
        p
    }

    fn dir(path: &str, live: &[&str]) -> GitEntry {
        GitEntry {
            path: path.into(),
            kind: GitEntryKind::Dir {
                staging: format!("{PROJECT}/{path}/gvisor-hardened/c1"),
                live: live.iter().map(|s| s.to_string()).collect(),
            },
        }
    }

    fn ctx(entries: Vec<GitEntry>) -> Context {
        Context {
            git_tree: GitTree {
                found: [(PROJECT.to_string(), entries)].into_iter().collect(),
                ..GitTree::default()
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

    fn dests(spec: &serde_json::Value) -> Vec<String> {
        spec["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["destination"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_git_directory_is_replaced_by_its_staging_copy_with_data_live_on_top() {
        let c = ctx(vec![
            dir(".git/modules/sub", &["objects", "refs"]),
            dir(".git", &["objects", "refs", "logs"]),
            GitEntry {
                path: "sub/.git".into(),
                kind: GitEntryKind::Link,
            },
        ]);
        let h = harden_with(&spec_with_project(json!(["rbind", "rw"])), &policy(), &c).unwrap();
        let git = mount_at(&h.spec, "/work/.git").expect("staged");
        assert_eq!(git["source"], format!("{PROJECT}/.git/gvisor-hardened/c1"));
        assert_eq!(git["options"], json!(["rbind", "rw", "nosuid", "nodev"]));
        let objects = mount_at(&h.spec, "/work/.git/objects").unwrap();
        assert_eq!(objects["source"], format!("{PROJECT}/.git/objects"));
        let link = mount_at(&h.spec, "/work/sub/.git").unwrap();
        assert_eq!(link["options"], json!(["rbind", "ro", "nosuid", "nodev"]));
        let d = dests(&h.spec);
        let at = |x: &str| d.iter().position(|y| y == x).unwrap();
        assert!(at("/work") < at("/work/.git"));
        assert!(at("/work/.git") < at("/work/.git/objects"));
        assert!(at("/work/.git/objects") < at("/work/.git/modules/sub"));
        assert_eq!(h.staged_git.len(), 2);
        assert_eq!(h.staged_git[0].destination, "/work/.git");
        assert_eq!(count(&h, Rule::Mounts, Action::Added), 3);
    }

    #[test]
    fn a_read_only_bind_stages_nothing() {
        let c = ctx(vec![dir(".git", &["objects"])]);
        let h = harden_with(&spec_with_project(json!(["rbind", "ro"])), &policy(), &c).unwrap();
        assert!(mount_at(&h.spec, "/work/.git").is_none());
        assert!(h.staged_git.is_empty());
    }

    #[test]
    fn the_bind_root_itself_can_be_a_git_directory() {
        let c = ctx(vec![dir("", &["objects", "refs"])]);
        let h = harden_with(&spec_with_project(json!(["rbind"])), &policy(), &c).unwrap();
        let d = dests(&h.spec);
        assert_eq!(d.iter().filter(|x| *x == "/work").count(), 2, "{d:?}");
        assert_eq!(h.staged_git[0].destination, "/work");
    }

    #[test]
    fn too_many_repositories_are_refused() {
        let mut p = policy();
        p.mounts.workspace.max_repositories = 1;
        let c = ctx(vec![dir(".git", &[]), dir("vendor/lib/.git", &[])]);
        let r = rejections_with(&spec_with_project(json!(["rbind"])), &p, &c);
        assert!(r[0].reason.contains("max_repositories"), "{r:?}");
    }

    #[test]
    fn a_live_name_outside_gits_data_directories_is_refused() {
        let c = ctx(vec![dir(".git", &["hooks"])]);
        let r = rejections_with(&spec_with_project(json!(["rbind"])), &policy(), &c);
        assert!(r[0].reason.contains("data directories"), "{r:?}");
    }

    #[test]
    fn nothing_is_staged_when_git_protection_is_off() {
        let mut p = policy();
        p.mounts.workspace.git = false;
        let c = ctx(vec![dir(".git", &["objects"])]);
        let h = harden_with(&spec_with_project(json!(["rbind"])), &p, &c).unwrap();
        assert!(mount_at(&h.spec, "/work/.git").is_none());
    }

    #[test]
    fn the_owners_hooks_that_run_project_files_are_named_with_what_became_of_them() {
        let mut c = ctx(vec![dir(".git", &["objects"])]);
        c.git_tree.hooks.insert(
            PROJECT.to_string(),
            vec![crate::harden::types::HookNote {
                hook: ".husky/_/pre-commit".into(),
                tool: "husky 9".into(),
                protected: vec![".husky".into()],
                reported: vec!["package.json".into(), "node_modules/.bin".into()],
                watched: vec!["node_modules/.bin/git".into()],
                unread: None,
            }],
        );
        let h = harden_with(&spec_with_project(json!(["rbind"])), &policy(), &c).unwrap();
        let d = h
            .decisions
            .iter()
            .find(|d| d.field == "mounts[/work/.husky/_/pre-commit]")
            .expect("a decision for the hook");
        assert_eq!(d.action, Action::Reported);
        assert!(d.reason.contains("husky 9"), "{}", d.reason);
        assert!(
            d.reason.contains(
                "protected (read-only inside, quarantined at exit when new or replaced): .husky"
            ),
            "{}",
            d.reason
        );
        assert!(
            d.reason
                .contains("changes reported at exit: package.json, node_modules/.bin"),
            "{}",
            d.reason
        );
    }
}
