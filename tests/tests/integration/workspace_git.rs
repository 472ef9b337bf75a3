//! `[mounts.workspace]` end to end (issue 17): every way a sandbox could leave code in a
//! writable project that the developer's next git command on the host runs, tried through the
//! shim (ctr) and through Docker (runsc-hardened) with the coding-agent preset, each on its own
//! fresh project, followed by the owner's git commands on the host; and each tried once
//! without a sandbox, to prove the trigger fires. Then the git workflows an agent needs, inside,
//! and what the host has afterwards.

use std::path::{Path, PathBuf};

use gvisor_hardened_tests::docker::{assert_clean_docker_shutdown, DockerOptions, Dockerd};
use gvisor_hardened_tests::workspace::{prelude, sh_quote, Attack, Workspace, ATTACKS};
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
    let out = ws.owner_sh(project, attack.trigger).unwrap();
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
    for attack in ATTACKS {
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

/// Runs each attack in a sandbox through `run`, then the owner's trigger; returns what fired.
fn attacks_after_sandboxes(
    ws: &Workspace,
    mut run: impl FnMut(&Attack, &Path, String) -> String,
) -> Vec<String> {
    let mut fired_list = Vec::new();
    for attack in ATTACKS {
        let (project, canary) = ws.project(attack.name).unwrap();
        ws.set_up(&project, attack).unwrap();
        let output = run(attack, &project, script_for(&canary, attack));
        assert!(output.contains(ATTACK_RAN), "{}: {output}", attack.name);
        if std::env::var_os("GVH_SHOW_WORKSPACE").is_some() {
            eprintln!("=== {}\n{output}", attack.name);
        }
        if let Some(f) = fired(ws, &project, &canary, attack) {
            fired_list.push(format!("{f}\nsandbox output:\n{output}"));
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
                    .sh(script),
            )
            .unwrap();
        assert_nothing_left(&c, &id, &Runtime::hardened());
        let exit = gvisor_hardened_tests::fault::audit_lines(&audit)
            .into_iter()
            .find(|l| l["container_id"] == id.as_str() && l["event"] == "exit")
            .unwrap_or_else(|| panic!("{}: no exit record\n{out}", attack.name));
        assert!(
            exit["workspace"]["action"] == "quarantine",
            "{}: {exit}",
            attack.name
        );
        format!("{out}\nworkspace: {}", exit["workspace"])
    });
    assert!(fired.is_empty(), "{}", fired.join("\n\n"));
    assert_clean_shutdown(c);
}

#[test]
fn no_attack_runs_its_code_on_the_host_after_a_sandbox_through_docker() {
    // The policy names the project root, so it exists before the daemon starts.
    let root = scratch_root();
    let ws = Workspace::create(&root).unwrap();
    let d = Dockerd::start(DockerOptions {
        extra_policies: vec![("agent".into(), agent_policy(&ws.projects_root(), ""))],
    })
    .unwrap();
    import_git_image(&d);
    let fired = attacks_after_sandboxes(&ws, |_, project, script| {
        let volume = format!("{}:/work", project.display());
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
                "-w",
                "/work",
                GIT_IMAGE_REF,
                "sh",
                "-c",
                &script,
            ])
            .output()
            .unwrap();
        out.to_string()
    });
    assert_clean_docker_shutdown(d);
    let _ = std::fs::remove_dir_all(&root);
    assert!(fired.is_empty(), "{}", fired.join("\n\n"));
}

fn import_git_image(d: &Dockerd) {
    let tar = gvisor_hardened_tests::image::git_rootfs_tar().unwrap();
    d.docker()
        .arg("import")
        .arg(&tar)
        .arg(GIT_IMAGE_REF)
        .checked()
        .unwrap();
}

/// An agent's git day, inside: config, commit, branches, a remote, fetch, tracking, a
/// submodule checked out; then what the owner's git on the host sees.
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
git status --porcelain
echo workflow-done
"#;

fn check_workflow_result(ws: &Workspace, project: &Path, out: &str) {
    assert!(out.contains("workflow-done"), "{out}");
    let sh = |cmd: &str| {
        let o = ws.owner_sh(project, cmd).unwrap();
        assert!(o.success(), "{cmd}: {o}\nsandbox: {out}");
        o.stdout.trim().to_string()
    };
    assert_eq!(sh("git log -1 --format=%s main"), "agent work");
    assert_eq!(sh("git log -1 --format=%an main"), "agent");
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
    assert_eq!(sh("git -C sub log -1 --format=%s"), "sub");
    assert_eq!(sh("git status --porcelain"), "");
    sh("git fsck --no-progress");
    assert!(staging_copies(project).is_empty());
}

/// The owner takes the submodule out first: the sandbox's `submodule update --init` clones it.
const WORKFLOW_SETUP: &str = "git submodule deinit -q -f sub && rm -rf .git/modules/sub";

/// A fresh project set up for [`WORKFLOW`], and the script to run in it.
fn workflow_project(ws: &Workspace) -> (PathBuf, String) {
    let (project, _) = ws.project("workflow").unwrap();
    ws.owner_sh(&project, WORKFLOW_SETUP)
        .unwrap()
        .checked()
        .unwrap();
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
    let d = Dockerd::start(DockerOptions {
        extra_policies: vec![("agent".into(), agent_policy(&ws.projects_root(), ""))],
    })
    .unwrap();
    import_git_image(&d);
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
