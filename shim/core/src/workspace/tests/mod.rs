//! The workspace's lifecycle on a real directory tree, as an unprivileged user: find, harden
//! (the pure rule decides the mounts), stage, then what a sandbox could do through its mounts
//! (simulated by writing where each mount's source is: the staging copy for the git directory,
//! the host's data directories, the rest of the project), then conclude, and what the host is
//! left with. The same attacks through real runsc, ctr and Docker are in
//! `tests/tests/integration/workspace_git.rs`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use policy_injector::policy::WorkspaceExitAction;
use policy_injector::{harden, Context, HostTree, Policy};
use serde_json::json;

use super::*;

mod hostile;

const ID: &str = "c0ffee";

struct Lab {
    _dir: tempfile::TempDir,
    project: PathBuf,
    bundle: PathBuf,
    policy: Policy,
}

fn git_dir(p: &Path) {
    fs::create_dir_all(p.join("objects/pack")).unwrap();
    fs::create_dir_all(p.join("refs/heads")).unwrap();
    fs::create_dir_all(p.join("logs")).unwrap();
    fs::create_dir_all(p.join("hooks")).unwrap();
    fs::create_dir_all(p.join("info")).unwrap();
    fs::write(p.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(p.join("index"), "DIRC-host").unwrap();
    fs::write(p.join("hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
    fs::write(
        p.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n",
    )
    .unwrap();
}

impl Lab {
    fn new() -> Lab {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("project");
        let bundle = dir.path().join("bundle");
        fs::create_dir_all(&project).unwrap();
        fs::create_dir_all(&bundle).unwrap();
        git_dir(&project.join(".git"));
        fs::write(project.join("README"), "hello\n").unwrap();
        let mut policy = Policy::default();
        policy.mounts.writable_sources = vec![format!("{}/**", dir.path().display())];
        policy.mounts.denied_sources.clear();
        Lab {
            _dir: dir,
            project,
            bundle,
            policy,
        }
    }

    fn spec(&self) -> serde_json::Value {
        json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["sh"], "cwd": "/", "user": {"uid": 1000, "gid": 1000}},
            "root": {"path": "rootfs", "readonly": true},
            "mounts": [{"destination": "/work", "type": "bind",
                        "source": self.project.display().to_string(), "options": ["rbind", "rw"]}],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}]}
        })
    }

    /// find -> harden -> stage, as prepare.rs does it; returns the hardened spec.
    fn create(&self) -> serde_json::Value {
        let spec = self.spec();
        let sources = vec![self.project.display().to_string()];
        let mut found = find(&sources, &self.policy.mounts.workspace, ID).unwrap();
        let git_tree = std::mem::take(&mut found.tree);
        let host_tree = crate::host_tree::scan(&spec, &self.policy, &self.bundle).unwrap();
        let ctx = Context {
            container_id: ID.into(),
            git_tree,
            host_tree: host_tree.clone(),
            ..Context::default()
        };
        let h = harden(&spec, &self.policy, &ctx).unwrap();
        stage(&StageRequest {
            container_id: ID,
            bundle: &self.bundle,
            policy: &self.policy,
            staged: &h.staged_git,
            writable: crate::artifacts::writable_binds(&h.spec)
                .into_iter()
                .map(|m| (m.source, m.destination))
                .collect(),
            host_tree: &host_tree,
            git: &found,
        })
        .unwrap()
        .expect("a writable bind");
        h.spec
    }

    /// Where the sandbox's `/work/<rel>` writes land on the host, by the hardened spec's
    /// mounts: the deepest mount whose destination holds the path.
    fn host_of(spec: &serde_json::Value, sandbox_path: &str) -> PathBuf {
        let mut best: Option<(&str, &str)> = None;
        for m in spec["mounts"].as_array().unwrap() {
            let dest = m["destination"].as_str().unwrap();
            if m["type"] != "bind" {
                continue;
            }
            if Path::new(sandbox_path).starts_with(dest)
                && best.is_none_or(|(d, _)| dest.len() >= d.len())
            {
                best = Some((dest, m["source"].as_str().unwrap()));
            }
        }
        let (dest, source) = best.expect("inside a bind");
        let rest = Path::new(sandbox_path).strip_prefix(dest).unwrap();
        Path::new(source).join(rest)
    }

    fn conclude(&self) -> WorkspaceReport {
        finish(&self.bundle, Ending::Ran).expect("a state to conclude")
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.project.join(rel)
    }
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn staging_left(project: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![project.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                if e.file_name() == "gvisor-hardened" {
                    out.push(e.path());
                }
                stack.push(e.path());
            }
        }
    }
    out
}

#[test]
fn a_hook_written_in_the_sandbox_never_reaches_the_host() {
    let lab = Lab::new();
    let spec = lab.create();
    let hook = Lab::host_of(&spec, "/work/.git/hooks/pre-commit");
    assert!(hook.starts_with(lab.p(".git/gvisor-hardened")), "{hook:?}");
    write(&hook, "#!/bin/sh\ntouch /tmp/pwned\n");
    let report = lab.conclude();
    assert!(!lab.p(".git/hooks/pre-commit").exists());
    assert!(staging_left(&lab.project).is_empty());
    assert!(report.errors.is_empty(), "{report:?}");
}

#[test]
fn objects_and_refs_are_live_and_index_and_head_come_back_at_exit() {
    let lab = Lab::new();
    let spec = lab.create();
    let obj = Lab::host_of(&spec, "/work/.git/objects/ab/cdef");
    assert_eq!(obj, lab.p(".git/objects/ab/cdef"));
    write(&obj, "object");
    // git writes through a lock file and a rename, replacing the copy's file.
    let index = Lab::host_of(&spec, "/work/.git/index");
    fs::write(index.with_file_name("index.lock"), "DIRC-sandbox").unwrap();
    fs::rename(index.with_file_name("index.lock"), &index).unwrap();
    let head = Lab::host_of(&spec, "/work/.git/HEAD");
    fs::write(head.with_file_name("HEAD.lock"), "ref: refs/heads/agent\n").unwrap();
    fs::rename(head.with_file_name("HEAD.lock"), &head).unwrap();
    let report = lab.conclude();
    assert_eq!(
        fs::read_to_string(lab.p(".git/index")).unwrap(),
        "DIRC-sandbox"
    );
    assert_eq!(
        fs::read_to_string(lab.p(".git/HEAD")).unwrap(),
        "ref: refs/heads/agent\n"
    );
    assert!(lab.p(".git/objects/ab/cdef").exists());
    let carried = &report.carried[0];
    assert!(carried.files.contains(&"index".to_string()), "{report:?}");
    assert!(!lab.p(".git/index.lock").exists());
}

#[test]
fn a_file_the_host_changed_meanwhile_keeps_the_hosts_version() {
    let lab = Lab::new();
    let spec = lab.create();
    let index = Lab::host_of(&spec, "/work/.git/index");
    fs::remove_file(&index).unwrap();
    fs::write(&index, "DIRC-sandbox").unwrap();
    // The developer staged something on the host while the agent worked.
    fs::remove_file(lab.p(".git/index")).unwrap();
    fs::write(lab.p(".git/index"), "DIRC-developer").unwrap();
    let report = lab.conclude();
    assert_eq!(
        fs::read_to_string(lab.p(".git/index")).unwrap(),
        "DIRC-developer"
    );
    assert!(
        report.carried[0]
            .not_carried
            .iter()
            .any(|n| n.contains("changed on the host")),
        "{report:?}"
    );
}

#[test]
fn an_invalid_head_is_not_carried() {
    let lab = Lab::new();
    let spec = lab.create();
    let head = Lab::host_of(&spec, "/work/.git/HEAD");
    fs::remove_file(&head).unwrap();
    fs::write(&head, "ref: ../../../../etc/shadow\n").unwrap();
    let report = lab.conclude();
    assert_eq!(
        fs::read_to_string(lab.p(".git/HEAD")).unwrap(),
        "ref: refs/heads/main\n"
    );
    assert!(!report.carried[0].not_carried.is_empty());
}

#[test]
fn a_symlink_in_place_of_a_carried_file_is_not_followed() {
    let lab = Lab::new();
    let spec = lab.create();
    let index = Lab::host_of(&spec, "/work/.git/index");
    fs::remove_file(&index).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &index).unwrap();
    lab.conclude();
    assert_eq!(
        fs::read_to_string(lab.p(".git/index")).unwrap(),
        "DIRC-host"
    );
    assert!(!fs::symlink_metadata(lab.p(".git/index"))
        .unwrap()
        .file_type()
        .is_symlink());
}

#[test]
fn a_new_repository_made_in_the_sandbox_is_neutralised() {
    let lab = Lab::new();
    let spec = lab.create();
    let nested = Lab::host_of(&spec, "/work/vendor/lib/.git");
    git_dir(&nested);
    write(&nested.join("hooks/pre-commit"), "#!/bin/sh\nevil\n");
    write(
        &nested.join("config"),
        "[core]\n\tbare = false\n\tfsmonitor = /tmp/evil\n[remote \"origin\"]\n\turl = https://example.test/x\n",
    );
    write(&nested.join("rebase-merge/git-rebase-todo"), "exec evil\n");
    let report = lab.conclude();
    assert!(!nested.join("hooks").exists());
    assert!(!nested.join("rebase-merge").exists());
    let config = fs::read_to_string(nested.join("config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(config.contains("example.test"), "{config}");
    let n = report
        .neutralised
        .iter()
        .find(|n| n.gitdir == nested.display().to_string())
        .expect("named in the report");
    assert!(n.moved.iter().all(|m| m.to.is_some()));
    assert!(n.config_removed.iter().any(|k| k.contains("fsmonitor")));
    // What was set aside is still there for the developer to read.
    let quarantined = fs::read_dir(&nested)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".quarantine-"))
        .count();
    assert_eq!(quarantined, 3);
}

#[test]
fn a_fresh_git_init_with_sample_hooks_only_is_left_alone() {
    let lab = Lab::new();
    let spec = lab.create();
    let nested = Lab::host_of(&spec, "/work/newproj/.git");
    git_dir(&nested);
    let report = lab.conclude();
    assert!(nested.join("hooks/pre-commit.sample").exists());
    assert!(report.neutralised.is_empty(), "{report:?}");
}

#[test]
fn a_bare_repository_planted_anywhere_is_neutralised() {
    let lab = Lab::new();
    let spec = lab.create();
    let bare = Lab::host_of(&spec, "/work/docs/notes");
    git_dir(&bare);
    write(&bare.join("hooks/post-checkout"), "#!/bin/sh\nevil\n");
    write(&lab.p("docs/.git"), "gitdir: notes\n");
    lab.conclude();
    assert!(!bare.join("hooks").exists());
}

#[test]
fn a_renamed_nested_repository_is_carried_where_it_went_and_its_replacement_neutralised() {
    let lab = Lab::new();
    git_dir(&lab.p("vendor/lib/.git"));
    let spec = lab.create();
    // The staged copy is mounted at /work/vendor/lib/.git; the sandbox renames the parent.
    let index = Lab::host_of(&spec, "/work/vendor/lib/.git/index");
    fs::remove_file(&index).unwrap();
    fs::write(&index, "DIRC-sandbox").unwrap();
    fs::rename(lab.p("vendor/lib"), lab.p("vendor/lib2")).unwrap();
    git_dir(&lab.p("vendor/lib/.git"));
    write(&lab.p("vendor/lib/.git/hooks/pre-commit"), "evil");
    let report = lab.conclude();
    assert_eq!(
        fs::read_to_string(lab.p("vendor/lib2/.git/index")).unwrap(),
        "DIRC-sandbox"
    );
    assert!(!lab.p("vendor/lib/.git/hooks").exists());
    assert!(staging_left(&lab.project).is_empty(), "{report:?}");
}

#[test]
fn a_submodule_cloned_in_the_sandbox_moves_in_neutralised() {
    let lab = Lab::new();
    let spec = lab.create();
    let module = Lab::host_of(&spec, "/work/.git/modules/sub");
    assert!(module.starts_with(lab.p(".git/gvisor-hardened")));
    git_dir(&module);
    write(&module.join("hooks/post-checkout"), "evil");
    write(
        &module.join("config"),
        "[core]\n\tworktree = ../../../sub\n\tfsmonitor = evil\n",
    );
    let report = lab.conclude();
    let moved = lab.p(".git/modules/sub");
    assert!(moved.join("HEAD").exists(), "{report:?}");
    assert!(!moved.join("hooks").exists());
    let config = fs::read_to_string(moved.join("config")).unwrap();
    assert!(config.contains("worktree"), "{config}");
    assert!(!config.contains("fsmonitor"), "{config}");
}

#[test]
fn a_protected_path_replaced_through_a_renamed_parent_is_quarantined() {
    let mut lab = Lab::new();
    lab.policy.mounts.protect = vec![".vscode/tasks.json".into()];
    write(&lab.p(".vscode/tasks.json"), "{}");
    lab.create();
    fs::rename(lab.p(".vscode"), lab.p(".vscode-old")).unwrap();
    write(&lab.p(".vscode/tasks.json"), "{\"runOn\": \"folderOpen\"}");
    let report = lab.conclude();
    assert!(!lab.p(".vscode/tasks.json").exists());
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert!(lab.p(".vscode-old/tasks.json").exists());
}

#[test]
fn report_mode_names_what_it_would_do_and_changes_nothing() {
    let mut lab = Lab::new();
    lab.policy.mounts.workspace.at_exit = WorkspaceExitAction::Report;
    let spec = lab.create();
    let nested = Lab::host_of(&spec, "/work/x/.git");
    git_dir(&nested);
    write(&nested.join("hooks/pre-commit"), "evil");
    let report = lab.conclude();
    assert!(nested.join("hooks/pre-commit").exists());
    assert_eq!(report.action, "report");
    assert!(report.neutralised[0].moved.iter().all(|m| m.to.is_none()));
}

#[test]
fn a_failed_create_leaves_no_staging_copy_and_no_state() {
    let lab = Lab::new();
    lab.create();
    assert!(!staging_left(&lab.project).is_empty());
    assert!(finish(&lab.bundle, Ending::Failed).is_none());
    assert!(staging_left(&lab.project).is_empty());
    assert!(!WorkspaceState::path_in(&lab.bundle).exists());
    // Concluding twice does nothing the second time.
    assert!(finish(&lab.bundle, Ending::Ran).is_none());
}

#[test]
fn the_staging_parent_keeps_others_out_and_a_planted_one_is_set_aside() {
    let lab = Lab::new();
    // What a sandbox could have left in a repository it made in an earlier run.
    fs::create_dir_all(lab.p(".git/gvisor-hardened")).unwrap();
    fs::set_permissions(
        lab.p(".git/gvisor-hardened"),
        fs::Permissions::from_mode(0o777),
    )
    .unwrap();
    lab.create();
    let meta = fs::metadata(lab.p(".git/gvisor-hardened")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert!(fs::read_dir(lab.p(".git")).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("gvisor-hardened.quarantine-")));
}

#[test]
fn the_copy_keeps_modes_and_times_of_the_control_files() {
    let lab = Lab::new();
    fs::set_permissions(lab.p(".git/index"), fs::Permissions::from_mode(0o600)).unwrap();
    let spec = lab.create();
    let copy = Lab::host_of(&spec, "/work/.git/index");
    let (a, b) = (
        fs::metadata(lab.p(".git/index")).unwrap(),
        fs::metadata(&copy).unwrap(),
    );
    assert_eq!(b.permissions().mode() & 0o777, 0o600);
    assert_eq!(a.modified().unwrap(), b.modified().unwrap());
    let _ = HostTree::default();
}

#[test]
fn safe_config_changes_come_back_and_code_running_ones_stay_in_the_sandbox() {
    let lab = Lab::new();
    let spec = lab.create();
    let config = Lab::host_of(&spec, "/work/.git/config");
    let mut text = fs::read_to_string(&config).unwrap();
    text.push_str("\tfsmonitor = /tmp/evil\n\thooksPath = .githooks\n[remote \"origin\"]\n\turl = https://git.example.test/app.git\n\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"agent\"]\n\tremote = origin\n\tmerge = refs/heads/agent\n[include]\n\tpath = ../evil.inc\n");
    // git's own way: a lock file renamed over the config (what a bind of the file broke).
    fs::write(config.with_file_name("config.lock"), &text).unwrap();
    fs::rename(config.with_file_name("config.lock"), &config).unwrap();
    let report = lab.conclude();
    let host = fs::read_to_string(lab.p(".git/config")).unwrap();
    assert!(host.contains("https://git.example.test/app.git"), "{host}");
    assert!(host.contains("refs/heads/agent"), "{host}");
    for bad in ["fsmonitor", "hooksPath", "hookspath", "evil.inc"] {
        assert!(!host.contains(bad), "{bad} reached the host: {host}");
    }
    let carried = &report.carried[0];
    assert!(
        carried
            .config
            .iter()
            .any(|k| k.starts_with("remote.origin.url")),
        "{report:?}"
    );
    assert!(
        carried.not_carried.iter().any(|n| n.contains("fsmonitor")),
        "{report:?}"
    );
}
