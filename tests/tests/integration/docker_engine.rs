//! `docker run --runtime gvisor-hardened` on a private Docker 20.10 daemon: the shim's
//! hardening checks through Docker, Docker's own calls (exec, -t, stop/start, top, stats,
//! update, pause), rejections with the rule's name in Docker's error, the lifetime limit, the
//! guard, and nothing left behind.

use std::time::Duration;

use gvisor_hardened_tests::docker::{assert_clean_docker_shutdown, DockerOptions, Dockerd};
use gvisor_hardened_tests::engine::{read_cidfile, HARDENED};
use gvisor_hardened_tests::*;

fn setup(opts: DockerOptions) -> Dockerd {
    let d = Dockerd::start(opts).unwrap();
    d.import_test_image().unwrap();
    d
}

/// `docker run --rm --runtime gvisor-hardened --cidfile ... ARGS IMAGE sh -c SCRIPT`: the
/// output and the container id.
fn run(d: &Dockerd, runtime: &str, args: &[&str], script: &str) -> (CommandOutput, String) {
    d.run_rm(runtime, args, script).unwrap()
}

fn probe_lines(out: &CommandOutput) -> Vec<ProbeLine> {
    out.stdout
        .lines()
        .map(|l| ProbeLine::parse(l).unwrap_or_else(|e| panic!("{l:?}: {e}\n{out}")))
        .collect()
}

#[test]
fn hardening_holds_inside_a_docker_container_and_every_step_is_audited() {
    let d = setup(DockerOptions::default());
    let script = "sandbox-probe caps; sandbox-probe nnp; sandbox-probe ids; \
                  sandbox-probe write /srv/x; sandbox-probe statfs /tmp; sandbox-probe rlimits; \
                  sandbox-probe ifaces; sandbox-probe uname; exit 7";
    let (out, id) = run(&d, HARDENED, &["--network", "none"], script);
    assert_eq!(
        out.code(),
        7,
        "the container's exit code is docker's: {out}"
    );
    let r = probe_lines(&out);
    let [caps, nnp, ids, srv, tmp, rlimits, ifaces, uname] = &r[..] else {
        panic!("{out}")
    };
    for set in ["CapEff", "CapPrm", "CapBnd", "CapInh"] {
        assert_eq!(caps.field(set), Some("0000000000000000"), "{set}: {caps:?}");
    }
    assert_eq!(nnp.field("nnp"), Some("1"), "{nnp:?}");
    assert_eq!(
        (ids.field("uid"), ids.field("gid")),
        (Some("65534"), Some("65534")),
        "{ids:?}"
    );
    assert_eq!(srv.errno(), Some("EROFS"), "read-only root: {srv:?}");
    assert_eq!(
        (tmp.field("fstype"), tmp.field("blocks")),
        (Some("tmpfs"), Some("262144")),
        "{tmp:?}"
    );
    assert_eq!(rlimits.field("NOFILE"), Some("1024:1024"), "{rlimits:?}");
    assert_eq!(
        ifaces.field("ifaces"),
        Some("lo"),
        "loopback only: {ifaces:?}"
    );
    assert!(
        uname
            .field("release")
            .is_some_and(gvisor_hardened_tests::stack::is_gvisor_release),
        "gVisor's kernel: {uname:?}"
    );

    assert_eq!(
        d.dir().audit_events(&id),
        ["create", "start", "exit", "delete"]
    );
    let create = d.dir().audit_record(&id, "create").unwrap();
    assert_eq!(create["namespace"], "docker");
    assert_eq!(
        create["policy"]["path"],
        d.dir().policy().display().to_string()
    );
    let decisions = create["decisions"].as_array().unwrap();
    // Docker's libnetwork-setkey hook was removed, not run (and the container ran without it).
    assert!(
        decisions
            .iter()
            .any(|x| x["rule"] == "hooks" && x["action"] == "removed"),
        "{create}"
    );
    // Docker's rootfs and /etc/hosts come from its own storage, checked and accepted.
    assert!(
        decisions
            .iter()
            .any(|x| x["rule"] == "root" && x["field"] == "root.path"),
        "{create}"
    );
    let exit = d.dir().audit_record(&id, "exit").unwrap();
    assert_eq!(
        (exit["exit_status"].as_u64(), exit["oom"].as_bool()),
        (Some(7), Some(false))
    );
    d.assert_container_gone(&id);
    // Every container's records are sealed by its delete's signature: chain and signatures verify.
    d.dir().assert_audit_signed_and_intact();
    assert_clean_docker_shutdown(d);
}

#[test]
fn docker_exec_tty_stop_start_top_stats_update_and_pause_work_hardened() {
    let d = setup(DockerOptions::default());
    let name = unique_id("life");
    let id = d
        .docker()
        .args([
            "run",
            "-d",
            "--name",
            &name,
            "--runtime",
            HARDENED,
            "--network",
            "none",
        ])
        .args([TEST_IMAGE_REF, "sleep", "600"])
        .checked()
        .unwrap()
        .stdout_trimmed()
        .to_string();
    let exec = |args: &[&str]| {
        d.docker()
            .arg("exec")
            .args(args)
            .checked()
            .unwrap()
            .stdout_trimmed()
            .to_string()
    };
    assert_eq!(exec(&[&name, "id", "-u"]), "65534");
    assert_eq!(
        exec(&["-u", "0", &name, "id", "-u"]),
        "65534",
        "exec as root is hardened too"
    );
    assert!(d.dir().audit_events(&id).iter().any(|e| e == "exec"));

    let tty = d
        .docker()
        .args([
            "exec",
            "-it",
            &name,
            "sh",
            "-c",
            "[ -t 0 ] && echo on-a-tty; exit 5",
        ])
        .output_in_pty("")
        .unwrap();
    assert_eq!(tty.code(), 5, "{tty}");
    assert!(tty.stdout.contains("on-a-tty"), "{tty}");
    let failed = d
        .docker()
        .args(["exec", &name, "sh", "-c", "exit 6"])
        .output()
        .unwrap();
    assert_eq!(failed.code(), 6, "{failed}");
    // Each exec's end is audited (by its exec guard) with the status Docker reported.
    assert_eq!(d.dir().exec_exits(&id), [0, 0, 5, 6]);

    // docker top: the sandbox's host processes (runsc answers ps with guest pids, which ps(1)
    // on the host would match against the host's own pid 1).
    let top = d.docker().args(["top", &name]).checked().unwrap();
    assert!(top.stdout.contains("runsc-sandbox"), "{top}");
    assert!(
        !top.stdout.contains("/sbin/init") && !top.stdout.contains("process_api"),
        "{top}"
    );
    // docker stats reads the sandbox's cgroup (the policy's 2 GiB ceiling), not the host's.
    let stats = d
        .docker()
        .args(["stats", "--no-stream", "--format", "{{.MemUsage}}", &name])
        .checked()
        .unwrap();
    assert!(stats.stdout.contains("/ 2GiB"), "{stats}");

    // update goes through the policy (runsc-hardened's `update`): a change of the memory limit
    // is refused naming the rule (gVisor sized the guest's memory at boot, the workload would not
    // see it); a CPU update lands and keeps the memory and the process limit the create gave.
    let limit = || inspect::cgroup_file(&id, "memory", "memory.limit_in_bytes");
    let pids_before = inspect::cgroup_file(&id, "pids", "pids.max");
    let refused = d
        .docker()
        .args(["update", "--memory", "64m", "--memory-swap", "64m", &name])
        .output()
        .unwrap();
    assert!(!refused.success(), "{refused}");
    assert!(
        refused
            .stderr
            .contains("rejected by policy: resources: resources.memory.limit"),
        "{refused}"
    );
    assert_eq!(limit(), (2u64 << 30).to_string());
    d.docker()
        .args(["update", "--cpus", "0.5", &name])
        .checked()
        .unwrap();
    assert_eq!(
        inspect::cgroup_file(&id, "cpu", "cpu.cfs_quota_us"),
        "50000"
    );
    assert_eq!(limit(), (2u64 << 30).to_string());
    // The process limit stays what the create gave (sized for the sandbox's platform).
    assert_eq!(inspect::cgroup_file(&id, "pids", "pids.max"), pids_before);
    let events = d.dir().audit_events(&id);
    assert!(events.iter().any(|e| e == "update-rejected"), "{events:?}");
    assert!(events.iter().any(|e| e == "update"), "{events:?}");

    d.docker().args(["pause", &name]).checked().unwrap();
    d.docker().args(["unpause", &name]).checked().unwrap();
    d.docker()
        .args(["stop", "-t", "2", &name])
        .checked()
        .unwrap();
    d.docker().args(["start", &name]).checked().unwrap();
    assert_eq!(exec(&[&name, "echo", "alive"]), "alive");
    d.docker().args(["rm", "-f", &name]).checked().unwrap();
    d.assert_container_gone(&id);

    let cid = d.dir().path().join("cid-tty");
    let pty = d
        .docker()
        .args(["run", "--rm", "-t", "--runtime", HARDENED, "--cidfile"])
        .arg(&cid)
        .args([
            TEST_IMAGE_REF,
            "sh",
            "-c",
            "[ -t 1 ] && echo tty-out; exit 3",
        ])
        .output_in_pty("")
        .unwrap();
    assert_eq!(pty.code(), 3, "{pty}");
    assert!(pty.stdout.contains("tty-out"), "{pty}");
    let tid = read_cidfile(&cid).unwrap();
    d.assert_container_gone(&tid);
    assert_clean_docker_shutdown(d);
}

/// A `docker exec` without a terminal is one runsc process, started attached by its exec guard
/// (no `--detach`, whose runsc re-executes itself to wait), as in the containerd shim:
/// statuses, execs that end at once and an exec that cannot start all come through.
#[test]
fn a_docker_exec_without_a_terminal_is_one_attached_runsc_process() {
    let d = setup(DockerOptions::default());
    let name = unique_id("execone");
    let id = d
        .docker()
        .args(["run", "-d", "--name", &name, "--runtime", HARDENED])
        .args(["--network", "none", TEST_IMAGE_REF, "sleep", "600"])
        .checked()
        .unwrap()
        .stdout_trimmed()
        .to_string();
    d.docker()
        .args(["exec", "-d", &name, "sleep", "600"])
        .checked()
        .unwrap();
    // The exec guard reports the exec started only once runsc has started it.
    let execs: Vec<_> = inspect::processes_mentioning(&id)
        .into_iter()
        .filter(|p| {
            let mut words = p.cmdline.split(' ');
            let program = words.next().unwrap_or_default();
            std::path::Path::new(program).file_name() == Some("runsc".as_ref())
                && words.any(|w| w == "exec")
        })
        .collect();
    assert_eq!(execs.len(), 1, "{execs:?}");
    assert!(!execs[0].cmdline.contains("--detach"), "{execs:?}");

    let status = |args: &[&str]| {
        let out = d.docker().arg("exec").args(args).output().unwrap();
        (out.code(), out)
    };
    let (code, out) = status(&[&name, "sh", "-c", "kill -9 $$"]);
    assert_eq!(code, 137, "{out}");
    for k in 0..20 {
        let (code, out) = status(&[&name, "echo", &format!("call-{k}")]);
        assert_eq!(code, 0, "{out}");
        assert_eq!(out.stdout.trim(), format!("call-{k}"), "{out}");
    }
    // Docker prints runsc's reason on stdout.
    let (code, out) = status(&[&name, "/no/such/tool"]);
    assert_eq!(code, 126, "{out}");
    assert!(
        out.stdout
            .contains("failed to load /no/such/tool: no such file"),
        "{out}"
    );
    // Each exec that ran has its end audited with the status Docker reported (the detached
    // sleep's is still to come; the one runsc refused never started).
    let exits = d.dir().exec_exit_statuses(&id);
    assert_eq!(exits.len(), 21, "{exits:?}");
    assert_eq!(exits[0], 137, "{exits:?}");
    assert!(exits[1..].iter().all(|&c| c == 0), "{exits:?}");
    d.docker().args(["rm", "-f", &name]).checked().unwrap();
    d.assert_container_gone(&id);
    assert_clean_docker_shutdown(d);
}

#[test]
fn host_socket_privileged_and_host_network_are_refused_with_the_rules_name() {
    let d = setup(DockerOptions::default());
    let socket = format!("{}:/x", d.dir().path().join("docker.sock").display());
    for (args, rule) in [
        (vec!["-v", socket.as_str()], "mounts"),
        (vec!["--privileged"], "devices"),
        (vec!["--network", "host"], "namespaces"),
    ] {
        let (out, id) = run(&d, HARDENED, &args, "echo must-not-run");
        assert!(!out.success(), "{args:?}: {out}");
        assert!(!out.stdout.contains("must-not-run"), "{args:?}: {out}");
        assert!(
            out.stderr.contains(&format!("rejected by policy: {rule}")),
            "{args:?}: docker must show the rule: {out}"
        );
        assert_eq!(d.dir().audit_events(&id), ["create-rejected"], "{args:?}");
        let _ = d.docker().args(["rm", "-f", &id]).output();
        d.assert_container_gone(&id);
    }
    assert_clean_docker_shutdown(d);
}

#[test]
fn the_lifetime_limit_ends_a_docker_container_and_small_pids_limits_do_not_crash_it() {
    let d = setup(DockerOptions {
        extra_policies: vec![(
            "short".into(),
            "[lifetime]\nmax_runtime = \"2s\"\ngrace_period = \"1s\"\n".into(),
        )],
    });
    let (out, id) = run(&d, "short", &[], "trap '' TERM; sleep 600");
    assert_eq!(
        out.code(),
        137,
        "SIGTERM ignored, SIGKILL after the grace period: {out}"
    );
    let exit = d.dir().audit_record(&id, "exit").unwrap();
    assert_eq!(exit["timed_out"], true, "{exit}");
    assert!(d.dir().audit_events(&id).iter().any(|e| e == "timeout"));
    d.assert_container_gone(&id);

    // --pids-limit 50 under runc would crash a sandbox (runsc's own host tasks count): it is a
    // budget of 50 guest processes, 32 + (the platform's host tasks per process) * 50.
    let (out, id) = run(
        &d,
        HARDENED,
        &["--pids-limit", "50"],
        "for i in $(seq 30); do sleep 30 & done; cat /sys/fs/cgroup/pids/pids.max 2>/dev/null; echo spawned; kill $(jobs -p)",
    );
    assert!(out.stdout.contains("spawned"), "{out}");
    let create = d.dir().audit_record(&id, "create").unwrap();
    let want = gvisor_hardened_tests::stack::Stack::selected().pids_limit(50);
    assert!(
        create.to_string().contains(&format!("\"after\":{want}")),
        "pids.limit {want} for 50 processes: {create}"
    );
    d.assert_container_gone(&id);

    // Crossing it ends the sandbox, and the container's own stderr says why (it used to end
    // with exit 2 and nothing but the audit record).
    let (out, id) = run(
        &d,
        HARDENED,
        &["--pids-limit", "16"],
        "echo forking; b() { b | b & }; b; exec sleep 120",
    );
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr.lines().any(|l| l
            == "gvisor-hardened: stopped at the sandbox's process limit (pids ceiling reached)"),
        "{out}"
    );
    let exit = d.dir().audit_record(&id, "exit").unwrap();
    assert_eq!(exit["exit_cause"], "process-limit", "{exit}");
    d.assert_container_gone(&id);
    assert_clean_docker_shutdown(d);
}

#[test]
fn a_killed_guard_is_cleaned_up_by_dockers_delete() {
    let d = setup(DockerOptions::default());
    let name = unique_id("guard");
    let id = d
        .docker()
        .args([
            "run",
            "-d",
            "--name",
            &name,
            "--runtime",
            HARDENED,
            TEST_IMAGE_REF,
            "sleep",
            "600",
        ])
        .checked()
        .unwrap()
        .stdout_trimmed()
        .to_string();
    let pid: i32 = d
        .docker()
        .args(["inspect", "-f", "{{.State.Pid}}", &name])
        .checked()
        .unwrap()
        .stdout_trimmed()
        .parse()
        .unwrap();
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("guard"),
        "the pid Docker waits on is the guard"
    );
    // SAFETY: plain kill(2) of the guard found above.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    poll_until(
        "docker to see the container exit",
        Duration::from_secs(30),
        || {
            let s = d
                .docker()
                .args(["inspect", "-f", "{{.State.Running}}", &name])
                .output()
                .ok()?;
            (s.stdout_trimmed() == "false").then_some(())
        },
    )
    .unwrap();
    d.docker().args(["rm", "-f", &name]).checked().unwrap();
    d.assert_container_gone(&id);
    // A killed guard wrote no exit record, yet delete still seals the trail: chain and signatures verify.
    d.dir().assert_audit_signed_and_intact();
    let delete = d.dir().audit_record(&id, "delete").unwrap();
    assert!(
        delete["error"]
            .as_str()
            .unwrap_or_default()
            .contains("no exit was recorded"),
        "{delete}"
    );
    assert_clean_docker_shutdown(d);
}

/// The coding-agent preset with the project roots pointed at the test directories.
fn agent_policy() -> String {
    let preset = include_str!("../../../policy-injector/src/policy/presets/coding-agent.toml");
    let mut doc: toml_edit::DocumentMut = preset.parse().unwrap();
    let mut roots = toml_edit::Array::new();
    roots.push(format!(
        "{}/gvh-dk-*/project/**",
        std::env::temp_dir().display()
    ));
    doc["mounts"]["writable_sources"] = toml_edit::value(roots);
    doc.to_string()
}

#[test]
fn agent_sandbox_runs_the_preset_with_a_private_git_directory_and_env_files_masked() {
    let d = setup(DockerOptions {
        extra_policies: vec![("agent".into(), agent_policy())],
    });
    let project = d.dir().path().join("project");
    for dir in [".git/hooks", "sub"] {
        std::fs::create_dir_all(project.join(dir)).unwrap();
    }
    for (file, text) in [
        (".git/config", "[core]\n"),
        (".git/hooks/pre-commit.sample", "#!/bin/sh\n"),
        (".env", "API_KEY=s3cr3t\n"),
        ("sub/.env.local", "TOKEN=s3cr3t\n"),
        ("README", "hello\n"),
    ] {
        std::fs::write(project.join(file), text).unwrap();
    }
    let status = std::process::Command::new("chown")
        .args(["-R", "1000:1000"])
        .arg(&project)
        .status()
        .unwrap();
    assert!(status.success());
    let script = "id -u; echo edited > README && echo wrote-readme; \
                  sandbox-probe write .git/hooks/pre-commit; sandbox-probe write .git/config; \
                  sandbox-probe write .env; wc -c < .env; wc -c < sub/.env.local; \
                  sandbox-probe statfs /home/agent/.cache";
    let mut cmd = d.agent_sandbox("agent", TEST_IMAGE_REF, &project);
    cmd.args(["sh", "-c", script]);
    let out = gvisor_hardened_tests::process::output_with_deadline(
        &mut cmd,
        None,
        Duration::from_secs(120),
    )
    .unwrap();
    assert!(out.success(), "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "1000", "the project owner's uid: {out}");
    assert_eq!(lines[1], "wrote-readme", "the project is writable: {out}");
    // The sandbox writes its private copy of the git directory; the host's never changes.
    for (i, what) in [(2, "a git hook"), (3, "git config")] {
        let line = ProbeLine::parse(lines[i]).unwrap();
        assert!(
            line.is_ok(),
            "{what} is writable in the sandbox's copy: {out}"
        );
    }
    // The mask is a read-only bind of an empty root-owned 0444 file: refused either way.
    let env = ProbeLine::parse(lines[4]).unwrap();
    assert!(matches!(env.errno(), Some("EROFS" | "EACCES")), "{out}");
    assert_eq!(
        (lines[5].trim(), lines[6].trim()),
        ("0", "0"),
        "masked files read empty: {out}"
    );
    assert_eq!(
        ProbeLine::parse(lines[7]).unwrap().field("fstype"),
        Some("tmpfs"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("README")).unwrap(),
        "edited\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join(".env")).unwrap(),
        "API_KEY=s3cr3t\n"
    );
    assert!(!project.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(project.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!project.join(".git/gvisor-hardened").exists());
    // The script tells what the exit check kept out of the project.
    assert!(
        out.stderr
            .contains("agent-sandbox: kept in the sandbox: config"),
        "{out}"
    );
    let create = d.dir().first_audit_record("create").unwrap();
    let decisions = create["decisions"].to_string();
    assert!(
        decisions.contains("masked") && decisions.contains("sub/.env.local"),
        "{create}"
    );
    assert!(
        decisions.contains("private copy of its control files"),
        "{create}"
    );
    // What the agent changed in the project, as the manifests before and after the workload
    // tell it (`[audit.artifacts]`): README edited, the masked and protected files untouched.
    let id = create["container_id"].as_str().unwrap();
    let start = d.dir().audit_record(id, "start").unwrap();
    assert!(
        start["artifacts"]["manifest"]["sha256"].is_string(),
        "{start}"
    );
    let exit = d.dir().audit_record(id, "exit").unwrap();
    let diff = &exit["artifacts"]["diff"];
    assert_eq!(diff["modified"], 1, "{exit}");
    assert!(
        diff["modified_paths"].to_string().contains("README"),
        "{exit}"
    );
    assert_eq!(
        (diff["added"].as_u64(), diff["removed"].as_u64()),
        (Some(0), Some(0)),
        "{exit}"
    );
    d.assert_container_gone(id);
    assert_clean_docker_shutdown(d);
}

#[test]
fn agent_sandbox_refuses_a_root_owned_project_before_starting_anything() {
    let project = tempfile::tempdir().unwrap();
    let out = gvisor_hardened_tests::process::output_with_deadline(
        std::process::Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../hack/agent-sandbox.sh"
        ))
        // No engine is reached: the check comes first.
        .env("DOCKER", "/nonexistent/docker")
        .arg(TEST_IMAGE_REF)
        .arg(project.path())
        .arg("true"),
        None,
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(out.code(), 1, "{out}");
    assert!(
        out.stderr.contains("is owned by root") && out.stderr.contains("dubious ownership"),
        "{out}"
    );
}

/// The output bound and the idle timeout hold under Docker as under the shim: the guard
/// copies the container's stdout and stderr or relays its terminal (and an exec's guard an
/// exec's) against one budget, and stops a container with no output and no CPU.
#[test]
fn the_output_bound_and_the_idle_timeout_hold_under_docker() {
    let d = setup(DockerOptions {
        extra_policies: vec![
            ("bounded".into(), "[output]\nmax_bytes = \"1Ki\"\n".into()),
            (
                "idle".into(),
                "[lifetime]\nidle_timeout = \"5s\"\ngrace_period = \"1s\"\n".into(),
            ),
        ],
    });
    let runtime = |name: &str| vec!["--runtime".to_string(), name.to_string()];
    gvisor_hardened_tests::engine_limits::assert_output_bound(
        || d.docker(),
        d.dir(),
        &runtime("bounded"),
        &[],
        1024,
    );
    gvisor_hardened_tests::engine_limits::assert_idle_timeout(
        || d.docker(),
        d.dir(),
        &runtime("idle"),
        &[],
    );
    assert_clean_docker_shutdown(d);
}
