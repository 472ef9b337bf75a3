//! `[mounts.workspace]` end to end (issue 17): every way a sandbox could leave code in a
//! writable project that the developer's next git command on the host runs, tried through the
//! shim (ctr) and through Docker (runsc-hardened) with the coding-agent preset, each on its own
//! fresh project, followed by the owner's git commands on the host; and each tried once
//! without a sandbox, to prove the trigger fires. Then the git workflows an agent needs, inside,
//! and what the host has afterwards.

use std::path::{Path, PathBuf};

use gvisor_hardened_tests::docker::{assert_clean_docker_shutdown, DockerOptions, Dockerd};
use gvisor_hardened_tests::workspace::{
    attacks, hook_tools_env, prelude, sh_quote, Attack, Workspace,
};
use gvisor_hardened_tests::*;

/// The coding-agent preset with the test's project root writable and its audit log and runsc
/// root where the test keeps them.
fn agent_policy(projects: &Path, extra: &str) -> String {
    let preset = include_str!("../../../policy-injector/src/policy/presets/coding-agent.toml");
    let mut doc: toml_edit::DocumentMut = preset.parse().unwrap();
    let mut roots = toml_edit::Array::new();
    roots.push(format!("{}/**", projects.display()));
    doc["mounts"]["writable_sources"] = toml_edit::value(roots);
    format!("{doc}\n{extra}")
}

/// What an attack left: `None` when its code did not run on the host.
fn fired(ws: &Workspace, project: &Path, canary: &Path, attack: &Attack) -> Option<String> {
    let out = ws.trigger(project, attack).unwrap();
    canary.exists().then(|| {
        format!(
            "{}: the owner's `{}` ran the sandbox's code\n{out}",
            attack.name, attack.trigger
        )
    })
}

fn script_for(canary: &Path, attack: &Attack) -> String {
    // `|| true`: under the runtime some steps fail (a rename of a mount point, a read-only
    // file); the attack goes on with the rest, as an attacker's would.
    format!(
        "{}{} || true\necho {ATTACK_RAN}\n",
        prelude(canary),
        attack.script
    )
}

/// The last line of every attack script: the sandbox did run it.
const ATTACK_RAN: &str = "attack-script-ran";

/// A directory of the test's own in the temp directory.
fn scratch_root() -> PathBuf {
    let root = std::env::temp_dir().join(format!(
        "gvh-ws-{}",
        gvisor_hardened_tests::ids::random_hex(8)
    ));
    std::fs::create_dir_all(&root).unwrap();
    root
}

#[test]
fn every_attack_runs_its_code_on_the_host_without_a_sandbox() {
    let root = scratch_root();
    let ws = Workspace::create(&root).unwrap();
    let mut silent = Vec::new();
    for attack in attacks() {
        let (project, canary) = ws.project(attack.name).unwrap();
        ws.set_up(&project, attack).unwrap();
        let out = ws.owner_sh(&project, &script_for(&canary, attack)).unwrap();
        if fired(&ws, &project, &canary, attack).is_none() {
            silent.push(format!("{}: the trigger did not fire\n{out}", attack.name));
        }
    }
    let _ = std::fs::remove_dir_all(&root);
    assert!(silent.is_empty(), "{}", silent.join("\n\n"));
}

/// What one sandbox run gave: its output and its exit record's `workspace` member.
struct Ran {
    output: String,
    workspace: serde_json::Value,
}

/// Runs each attack in a sandbox through `run`, then the owner's trigger; returns what fired,
/// and what the exit record should have said and did not ([`record_misses`]).
fn attacks_after_sandboxes(
    ws: &Workspace,
    mut run: impl FnMut(&Attack, &Path, String) -> Ran,
) -> Vec<String> {
    let mut fired_list = Vec::new();
    for attack in attacks() {
        let (project, canary) = ws.project(attack.name).unwrap();
        ws.set_up(&project, attack).unwrap();
        let Ran { output, workspace } = run(attack, &project, script_for(&canary, attack));
        assert!(output.contains(ATTACK_RAN), "{}: {output}", attack.name);
        if std::env::var_os("GVH_SHOW_WORKSPACE").is_some() {
            eprintln!("=== {}\n{output}\nworkspace: {workspace}", attack.name);
        }
        if let Some(f) = fired(ws, &project, &canary, attack) {
            fired_list.push(format!(
                "{f}\nsandbox output:\n{output}\nworkspace: {workspace}"
            ));
        }
        for miss in record_misses(attack, &project, &workspace) {
            fired_list.push(format!("{}: {miss}\nworkspace: {workspace}", attack.name));
        }
        let leftovers = staging_copies(&project);
        if !leftovers.is_empty() {
            fired_list.push(format!(
                "{}: staging copies left: {leftovers:?}",
                attack.name
            ));
        }
    }
    fired_list
}

/// What the exit must have done for the attacks whose canary alone would not show it: the
/// guessed quarantine names were really made (so the set-aside worked around them, by a name
/// the sandbox could not guess), the link in logs/ was removed and named, the command planted
/// where husky 9 looks first was set aside.
fn record_misses(attack: &Attack, project: &Path, workspace: &serde_json::Value) -> Vec<String> {
    let mut misses = Vec::new();
    let text = workspace.to_string();
    if workspace["action"] != "quarantine" {
        misses.push("no exit record with the workspace's quarantine".to_string());
    }
    let guessed = |dir: &Path| {
        std::fs::read_dir(dir)
            .map(|d| {
                d.flatten().any(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.contains(".quarantine-") && n.ends_with("-999")
                })
            })
            .unwrap_or(false)
    };
    match attack.name {
        "precreate-new-repository" => {
            if !guessed(&project.join("newrepo/.git")) {
                misses.push("the sandbox's guessed names are not there".into());
            }
            let moved = &workspace["neutralised"][0]["moved"];
            let renamed = moved.as_array().is_some_and(|m| {
                m.len() == 2
                    && m.iter()
                        .all(|x| x["to"].is_string() && x["disarmed"].is_null())
            });
            if !renamed {
                misses.push("hooks and config were not both renamed aside".into());
            }
        }
        "precreate-hooks-path" => {
            if !guessed(project) {
                misses.push("the sandbox's guessed names are not there".into());
            }
            if !text.contains(".githooks.quarantine-") {
                misses.push(".githooks was not renamed aside".into());
            }
        }
        "stash-log-link" => {
            let removed = workspace["git_links"].as_array().is_some_and(|l| {
                l.iter().any(|x| {
                    x["path"]
                        .as_str()
                        .is_some_and(|p| p.ends_with(".git/logs/refs/stash"))
                        && x["target"] == "../../hooks/post-commit"
                        && x["removed"] == true
                })
            });
            if !removed {
                misses.push("the link in logs/ is not named as removed".into());
            }
        }
        "husky9-path-shadow" if !text.contains("node_modules/.bin/git.quarantine-") => {
            misses.push("node_modules/.bin/git was not set aside".into());
        }
        _ => {}
    }
    misses
}

fn staging_copies(project: &Path) -> Vec<PathBuf> {
    let out = std::process::Command::new("find")
        .arg(project)
        .args(["-name", "gvisor-hardened", "-type", "d"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(PathBuf::from)
        .collect()
}

#[test]
fn no_attack_runs_its_code_on_the_host_after_a_sandbox_through_ctr() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::git().unwrap();
    c.import(&image).unwrap();
    let root = c.dir().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let ws = Workspace::create(&root).unwrap();
    let audit = c.dir().join("audit.jsonl");
    let policy = c.dir().join("agent.toml");
    std::fs::write(
        &policy,
        agent_policy(
            &ws.projects_root(),
            &format!("[audit]\npath = {:?}\n", audit.display().to_string()),
        ),
    )
    .unwrap();
    let fired = attacks_after_sandboxes(&ws, |attack, project, script| {
        let id = unique_id(&format!("ws-{}", attack.name));
        let mount = format!(
            "type=bind,src={},dst=/work,options=rbind:rw",
            project.display()
        );
        let out = c
            .run_output(
                &Run::new(image.reference(), &id)
                    .runtime(Runtime::hardened_with_policy(&policy))
                    .flags(["--mount", &mount, "--cwd", "/work"])
                    .flags(["--env", &format!("GVH_ID={id}")])
                    .sh(script),
            )
            .unwrap();
        assert_nothing_left(&c, &id, &Runtime::hardened());
        let exit = gvisor_hardened_tests::fault::audit_lines(&audit)
            .into_iter()
            .find(|l| l["container_id"] == id.as_str() && l["event"] == "exit")
            .unwrap_or_else(|| panic!("{}: no exit record\n{out}", attack.name));
        Ran {
            output: out.to_string(),
            workspace: exit["workspace"].clone(),
        }
    });
    assert!(fired.is_empty(), "{}", fired.join("\n\n"));
    assert_clean_shutdown(c);
}

#[test]
fn no_attack_runs_its_code_on_the_host_after_a_sandbox_through_docker() {
    let root = scratch_root();
    let ws = Workspace::create(&root).unwrap();
    let d = dockerd_with_agent_runtime(&ws);
    let fired = attacks_after_sandboxes(&ws, |attack, project, script| {
        let volume = format!("{}:/work", project.display());
        let cidfile = d.dir().path().join(format!("{}.cid", attack.name));
        let out = d
            .docker()
            .args([
                "run",
                "--rm",
                "--runtime",
                "agent",
                "--network",
                "none",
                "--user",
                "1000:1000",
            ])
            .arg("--cidfile")
            .arg(&cidfile)
            .args([
                "-v",
                &volume,
                "-w",
                "/work",
                GIT_IMAGE_REF,
                "sh",
                "-c",
                &script,
            ])
            .output()
            .unwrap();
        let id = gvisor_hardened_tests::engine::read_cidfile(&cidfile).unwrap();
        let exit = d
            .dir()
            .audit_record(&id, "exit")
            .unwrap_or_else(|| panic!("{}: no exit record\n{out}", attack.name));
        Ran {
            output: out.to_string(),
            workspace: exit["workspace"].clone(),
        }
    });
    assert_clean_docker_shutdown(d);
    let _ = std::fs::remove_dir_all(&root);
    assert!(fired.is_empty(), "{}", fired.join("\n\n"));
}

/// A private dockerd with the coding-agent preset as runtime `agent` (the project root writable)
/// and the git image imported. The policy names the project root, so it exists before the
/// daemon starts.
fn dockerd_with_agent_runtime(ws: &Workspace) -> Dockerd {
    let d = Dockerd::start(DockerOptions {
        extra_policies: vec![("agent".into(), agent_policy(&ws.projects_root(), ""))],
    })
    .unwrap();
    let tar = gvisor_hardened_tests::image::git_rootfs_tar().unwrap();
    d.docker()
        .arg("import")
        .arg(&tar)
        .arg(GIT_IMAGE_REF)
        .checked()
        .unwrap();
    d
}

/// An agent's git day, inside: config, commit, branches, a remote, fetch, tracking, a
/// submodule checked out and committed to, a merge, an annotated tag; then what the owner's
/// git on the host sees.
const WORKFLOW: &str = r#"
set -e
git config user.name agent
git config user.email agent@example.test
git config --global core.autocrlf false
echo 'agent work' >> README && git add README && git commit -q -m 'agent work'
git branch agent-branch
git remote add upstream "$REMOTES/origin.git"
git fetch -q upstream
git branch --track tracked upstream/main
git -c protocol.file.allow=always submodule update -q --init
git checkout -q -b feature && echo f > f && git add f && git commit -q -m feature && git checkout -q main
git merge -q --no-ff --no-edit -m 'merge feature' feature
git tag -a v1 -m 'release v1'
mkdir -p node_modules/.bin && printf '#!/bin/sh\n' > node_modules/.bin/prettier
(cd sub && git checkout -q -b work && echo more >> s && git add s && git -c user.name=agent -c user.email=agent@example.test commit -q -m 'sub work')
git add sub && git commit -q -m 'bump sub'
git status --porcelain
echo workflow-done
"#;

fn check_workflow_result(ws: &Workspace, project: &Path, out: &str) {
    assert!(out.contains("workflow-done"), "{out}");
    // The owner's husky hook ran inside at every commit, and what the agent installed in
    // node_modules (which the hook does not run by name) stays.
    assert!(out.contains("lint-ran"), "{out}");
    assert!(project.join("node_modules/.bin/prettier").exists());
    let sh = |cmd: &str| {
        let o = ws.owner_sh(project, cmd).unwrap();
        assert!(o.success(), "{cmd}: {o}\nsandbox: {out}");
        o.stdout.trim().to_string()
    };
    assert_eq!(sh("git log -1 --format=%s main"), "bump sub");
    assert_eq!(sh("git log -1 --format=%an main"), "agent");
    assert_eq!(sh("git log -1 --format=%s main~1"), "merge feature");
    assert_eq!(sh("git log -1 --format=%s main~2"), "agent work");
    assert_eq!(sh("git cat-file -t v1"), "tag");
    assert_eq!(sh("git describe --tags main~1"), "v1");
    assert_eq!(sh("git rev-parse --abbrev-ref HEAD"), "main");
    for branch in ["agent-branch", "feature", "tracked"] {
        sh(&format!("git rev-parse --verify -q refs/heads/{branch}"));
    }
    assert_eq!(
        sh("git config remote.upstream.url"),
        format!("{}/origin.git", ws.remotes().display())
    );
    assert_eq!(sh("git config branch.tracked.remote"), "upstream");
    assert_eq!(sh("git config branch.tracked.merge"), "refs/heads/main");
    sh("git rev-parse --verify -q refs/remotes/upstream/main");
    // The agent's identity stayed in its copy: the developer's commits stay theirs.
    assert_eq!(sh("git config --local user.name || echo unset"), "unset");
    assert_eq!(sh("git -C sub log -1 --format=%s"), "sub work");
    assert_eq!(
        sh("git -C sub rev-parse HEAD"),
        sh("git rev-parse main:sub"),
        "the superproject records the submodule's new commit"
    );
    assert_eq!(sh("git status --porcelain"), "");
    sh("git fsck --no-progress");
    assert!(staging_copies(project).is_empty());
}

/// The owner takes the submodule out first (the sandbox's `submodule update --init` clones
/// it) and uses husky 9 with a hook that runs a project script, which the agent's commits
/// inside run too.
const WORKFLOW_SETUP: &str = "git submodule deinit -q -f sub && rm -rf .git/modules/sub && \
    \"$HUSKY\" >/dev/null && mkdir -p scripts && printf 'echo lint-ran\\n' > scripts/lint.sh && \
    printf 'sh scripts/lint.sh\\n' > .husky/pre-commit && echo node_modules/ >> .gitignore && \
    git add -A && git commit -q -m 'husky' --no-verify";

/// A fresh project set up for [`WORKFLOW`], and the script to run in it.
fn workflow_project(ws: &Workspace) -> (PathBuf, String) {
    let (project, _) = ws.project("workflow").unwrap();
    let setup = format!("{}{WORKFLOW_SETUP}", hook_tools_env().unwrap());
    ws.owner_sh(&project, &setup).unwrap().checked().unwrap();
    let script = format!(
        "REMOTES={}\n{WORKFLOW}",
        sh_quote(&ws.remotes().display().to_string())
    );
    (project, script)
}

#[test]
fn git_workflows_inside_reach_the_host_through_ctr() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::git().unwrap();
    c.import(&image).unwrap();
    let root = c.dir().join("ws");
    std::fs::create_dir_all(&root).unwrap();
    let ws = Workspace::create(&root).unwrap();
    let policy = c.dir().join("agent.toml");
    std::fs::write(&policy, agent_policy(&ws.projects_root(), "")).unwrap();
    let (project, script) = workflow_project(&ws);
    let id = unique_id("ws-workflow");
    let mount = format!(
        "type=bind,src={},dst=/work,options=rbind:rw",
        project.display()
    );
    let remotes = format!(
        "type=bind,src={0},dst={0},options=rbind:ro",
        ws.remotes().display()
    );
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(Runtime::hardened_with_policy(&policy))
                .flags(["--mount", &mount, "--mount", &remotes, "--cwd", "/work"])
                .sh(script),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    check_workflow_result(&ws, &project, &out.to_string());
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

#[test]
fn git_workflows_inside_reach_the_host_through_docker() {
    let root = scratch_root();
    let ws = Workspace::create(&root).unwrap();
    let d = dockerd_with_agent_runtime(&ws);
    let (project, script) = workflow_project(&ws);
    let volume = format!("{}:/work", project.display());
    let remotes = format!("{0}:{0}:ro", ws.remotes().display());
    let out = d
        .docker()
        .args([
            "run",
            "--rm",
            "--runtime",
            "agent",
            "--network",
            "none",
            "--user",
            "1000:1000",
        ])
        .args([
            "-v",
            &volume,
            "-v",
            &remotes,
            "-w",
            "/work",
            GIT_IMAGE_REF,
            "sh",
            "-c",
            &script,
        ])
        .output()
        .unwrap();
    assert!(out.success(), "{out}");
    check_workflow_result(&ws, &project, &out.to_string());
    assert_clean_docker_shutdown(d);
    let _ = std::fs::remove_dir_all(&root);
}

/// What `hack/agent-sandbox.sh` prints after the run, for the exit's new findings: a link the
/// sandbox left in `.git/logs` (removed, with its target) and a file the owner's hook runs
/// through npx that the sandbox changed (reported, not protected).
#[test]
fn agent_sandbox_prints_the_links_it_removed_and_the_hook_inputs_that_changed() {
    let root = scratch_root();
    let ws = Workspace::create(&root).unwrap();
    let d = dockerd_with_agent_runtime(&ws);
    let (project, _) = ws.project("agent-sandbox-prints").unwrap();
    ws.owner_sh(
        &project,
        "printf '#!/bin/sh\\nnpx lint-staged\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo '{}' > package.json",
    )
    .unwrap()
    .checked()
    .unwrap();
    let script = "mkdir -p .git/logs/refs && ln -s /home/dev/.bashrc .git/logs/refs/stash && echo '{\"lint-staged\": {\"*\": \"sh x\"}}' > package.json";
    let mut cmd = d.agent_sandbox("agent", GIT_IMAGE_REF, &project);
    cmd.args(["sh", "-c", script]);
    let out = gvisor_hardened_tests::process::output_with_deadline(
        &mut cmd,
        None,
        std::time::Duration::from_secs(120),
    )
    .unwrap();
    assert!(out.success(), "{out}");
    assert!(
        out.stderr.contains(&format!(
            "agent-sandbox: removed symlink {}/.git/logs/refs/stash -> /home/dev/.bashrc",
            project.display()
        )),
        "{out}"
    );
    assert!(
        out.stderr.contains(&format!(
            "agent-sandbox: changed, and run or read by your hook .git/hooks/pre-commit: {}/package.json (changed)",
            project.display()
        )),
        "{out}"
    );
    assert!(fs_missing(&project.join(".git/logs/refs/stash")));
    // At create, the record named the hook and what it runs from the project.
    let create = d.dir().first_audit_record("create").unwrap();
    let hook = create["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            d["reason"]
                .as_str()
                .is_some_and(|r| r.contains("the owner's hook"))
        })
        .unwrap_or_else(|| panic!("no decision names the owner's hook: {create}"));
    let reason = hook["reason"].as_str().unwrap();
    assert!(
        reason.contains("the owner's hook .git/hooks/pre-commit (script) runs project files")
            && reason.contains("changes reported at exit: package.json, node_modules/.bin")
            && reason.contains("protected (read-only inside, quarantined at exit when new or replaced): .lintstagedrc"),
        "{reason}"
    );
    assert_clean_docker_shutdown(d);
    let _ = std::fs::remove_dir_all(&root);
}

fn fs_missing(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_err()
}
