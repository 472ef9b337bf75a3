//! `podman run --runtime gvisor-hardened` on private Podman 4.3 storage: the hardening checks
//! through Podman, Podman's specifics (tmpcopyup, NOFILE 1048576, `--pids-limit`, the systemd
//! cgroup manager), exec/-t/stop/start/stats/update, rejections with the rule's name in
//! Podman's error, and a cleanup that works although conmon passes no runtime flags to it.

use gvisor_hardened_tests::engine::{self, read_cidfile};
use gvisor_hardened_tests::podman::{assert_clean_podman_shutdown, Podman};
use gvisor_hardened_tests::*;

fn setup() -> Podman {
    let p = Podman::new().unwrap();
    p.import_test_image().unwrap();
    p
}

/// `podman run --rm` with runsc-hardened under the test policy: output and container id.
fn run(p: &Podman, args: &[&str], script: &str) -> (CommandOutput, String) {
    let network: &[&str] = if args.contains(&"--network") {
        &[]
    } else {
        &["--network", "none"]
    };
    p.run_rm(&p.dir().policy(), &[network, args].concat(), script)
        .unwrap()
}

#[test]
fn hardening_holds_inside_a_podman_container_and_cleanup_needs_no_runtime_flags() {
    let p = setup();
    let script = "sandbox-probe caps; sandbox-probe ids; sandbox-probe write /srv/x; \
                  sandbox-probe statfs /data; sandbox-probe write /data/f; sandbox-probe rlimits; \
                  sandbox-probe ifaces; sandbox-probe uname; exit 9";
    // --tmpfs gets Podman's runc-only tmpcopyup option; Podman asks for NOFILE 1048576.
    let (out, id) = run(&p, &["--tmpfs", "/data"], script);
    assert_eq!(out.code(), 9, "{out}");
    let r: Vec<ProbeLine> = out
        .stdout
        .lines()
        .map(|l| ProbeLine::parse(l).unwrap_or_else(|e| panic!("{l:?}: {e}\n{out}")))
        .collect();
    let [caps, ids, srv, data, data_write, rlimits, ifaces, uname] = &r[..] else {
        panic!("{out}")
    };
    assert_eq!(caps.field("CapEff"), Some("0000000000000000"), "{caps:?}");
    assert_eq!(ids.field("uid"), Some("65534"), "{ids:?}");
    assert_eq!(srv.errno(), Some("EROFS"), "{srv:?}");
    assert_eq!(data.field("fstype"), Some("tmpfs"), "{data:?}");
    assert!(
        data_write.is_ok(),
        "the tmpfs works without tmpcopyup: {data_write:?}"
    );
    assert_eq!(
        rlimits.field("NOFILE"),
        Some("1024:1024"),
        "Podman's 1048576 clamped: {rlimits:?}"
    );
    assert_ne!(
        rlimits.field("NPROC"),
        Some("32768:32768"),
        "Podman's NPROC is removed: {rlimits:?}"
    );
    assert_eq!(ifaces.field("ifaces"), Some("lo"), "{ifaces:?}");
    assert!(
        uname
            .field("release")
            .is_some_and(gvisor_hardened_tests::stack::is_gvisor_release),
        "{uname:?}"
    );

    // The delete came from conmon's cleanup, without --policy: the record still names it.
    assert_eq!(
        p.dir().audit_events(&id),
        ["create", "start", "exit", "delete"]
    );
    let create = p.dir().audit_record(&id, "create").unwrap();
    assert_eq!(create["namespace"], "podman");
    let decisions = create["decisions"].to_string();
    assert!(decisions.contains("tmpcopyup"), "{create}");
    assert!(
        decisions.contains("RLIMIT_NOFILE") && decisions.contains("RLIMIT_NPROC"),
        "{create}"
    );
    let delete = p.dir().audit_record(&id, "delete").unwrap();
    assert_eq!(
        delete["policy"]["path"],
        p.dir().policy().display().to_string()
    );
    assert_eq!(delete["exit_status"], 9);
    assert!(delete.get("error").is_none(), "{delete}");
    p.assert_container_gone(&id);
    // Every container's records are sealed by its delete's signature: chain and signatures verify.
    p.dir().assert_audit_signed_and_intact();
    assert_clean_podman_shutdown(p);
}

#[test]
fn podman_exec_tty_stop_start_stats_and_update_work_hardened() {
    let p = setup();
    let name = unique_id("life");
    let id = p
        .podman()
        .args(["run", "-d", "--name", &name])
        .args(p.hardened_args(&p.dir().policy()))
        .args(["--network", "none", TEST_IMAGE_REF, "sleep", "600"])
        .checked()
        .unwrap()
        .stdout_trimmed()
        .to_string();
    let exec = |args: &[&str]| {
        p.podman()
            .arg("exec")
            .args(args)
            .checked()
            .unwrap()
            .stdout_trimmed()
            .to_string()
    };
    assert_eq!(exec(&[&name, "id", "-u"]), "65534");
    assert_eq!(exec(&["-u", "0", &name, "id", "-u"]), "65534");
    // Podman passes --tty to the runtime's exec; runsc refuses it, runsc-hardened drops it.
    let tty = p
        .podman()
        .args([
            "exec",
            "-it",
            &name,
            "sh",
            "-c",
            "[ -t 0 ] && echo on-a-tty; exit 4",
        ])
        .output_in_pty("")
        .unwrap();
    assert_eq!(tty.code(), 4, "{tty}");
    assert!(tty.stdout.contains("on-a-tty"), "{tty}");
    let failed = p
        .podman()
        .args(["exec", &name, "sh", "-c", "exit 5"])
        .output()
        .unwrap();
    assert_eq!(failed.code(), 5, "{failed}");
    // Each exec's end is audited (by its exec guard) with the status Podman reported.
    assert_eq!(p.dir().exec_exits(&id), [0, 0, 4, 5]);

    // podman stats reads the cgroup of the pid it was given: the guard stays in the sandbox's.
    let stats = p
        .podman()
        .args(["stats", "--no-stream", "--format", "{{.PIDs}}", &name])
        .checked()
        .unwrap();
    let pids: u32 = stats.stdout_trimmed().parse().unwrap_or(0);
    assert!(
        pids > 10,
        "the sandbox's host tasks, not conmon's cgroup: {stats}"
    );

    // runc's state and ps, as runsc-hardened answers them for this container.
    let call = |args: &[&str]| {
        let mut cmd = std::process::Command::new(engine::runsc_hardened_binary().unwrap());
        cmd.args(args);
        process::output_with_deadline(&mut cmd, None, std::time::Duration::from_secs(30))
            .unwrap()
            .checked()
            .unwrap()
    };
    let state: serde_json::Value = serde_json::from_str(&call(&["state", &id]).stdout).unwrap();
    let pid = p
        .podman()
        .args(["inspect", "-f", "{{.State.Pid}}", &name])
        .checked()
        .unwrap();
    assert_eq!(state["status"], "running", "{state}");
    assert_eq!(
        state["pid"].to_string(),
        pid.stdout_trimmed(),
        "the guard: {state}"
    );
    let ps: Vec<i32> =
        serde_json::from_str(&call(&["ps", "--format", "json", &id]).stdout).unwrap();
    assert!(
        ps.iter()
            .any(|p| std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(b"runsc-sandbox"))),
        "host pids of the sandbox: {ps:?}"
    );
    assert!(p.dir().audit_events(&id).iter().any(|e| e == "exec"));

    // A change of the memory limit is refused naming the rule (gVisor sized the guest's memory
    // at boot); a CPU update lands in the sandbox's cgroup.
    let refused = p
        .podman()
        .args(["update", "--memory", "96m", &name])
        .output()
        .unwrap();
    assert!(!refused.success(), "{refused}");
    assert!(
        refused
            .stderr
            .contains("rejected by policy: resources: resources.memory.limit"),
        "{refused}"
    );
    let cgroup = |controller: &str, file: &str| {
        let dir = inspect::cgroups_named(&format!("libpod-{id}"))
            .into_iter()
            .find(|d| d.to_string_lossy().contains(&format!("/{controller}/")))
            .unwrap();
        std::fs::read_to_string(dir.join(file))
            .unwrap()
            .trim()
            .to_string()
    };
    assert_ne!(
        cgroup("memory", "memory.limit_in_bytes"),
        (96u64 << 20).to_string()
    );
    p.podman()
        .args(["update", "--cpus", "0.5", &name])
        .checked()
        .unwrap();
    assert_eq!(cgroup("cpu", "cpu.cfs_quota_us"), "50000");

    p.podman()
        .args(["stop", "-t", "2", &name])
        .checked()
        .unwrap();
    p.podman().args(["start", &name]).checked().unwrap();
    assert_eq!(exec(&[&name, "echo", "alive"]), "alive");
    p.podman()
        .args(["rm", "-f", "-t", "0", &name])
        .checked()
        .unwrap();
    p.assert_container_gone(&id);

    let cid = p.dir().path().join("cid-tty");
    let pty = p
        .podman()
        .args(["run", "--rm", "-t", "--cidfile"])
        .arg(&cid)
        .args(p.hardened_args(&p.dir().policy()))
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
    p.assert_container_gone(&read_cidfile(&cid).unwrap());
    assert_clean_podman_shutdown(p);
}

#[test]
fn podman_refusals_name_the_rule_or_the_missing_cgroup() {
    let p = setup();
    let socket = p.dir().path().join("docker.sock");
    std::fs::write(&socket, "").unwrap();
    let bind = format!("{}:/x", socket.display());
    for (args, needle) in [
        (vec!["-v", bind.as_str()], "rejected by policy: mounts"),
        (vec!["--privileged"], "rejected by policy:"),
        (vec!["--network", "host"], "rejected by policy: namespaces"),
    ] {
        let (out, id) = run(&p, &args, "echo must-not-run");
        assert!(
            !out.success() && !out.stdout.contains("must-not-run"),
            "{args:?}: {out}"
        );
        assert!(
            out.stderr.contains(needle),
            "{args:?}: podman must show it: {out}"
        );
        assert!(
            p.dir()
                .audit_events(&id)
                .contains(&"create-rejected".to_string()),
            "{args:?}"
        );
        let _ = p.podman().args(["rm", "-f", &id]).output();
        p.assert_container_gone(&id);
    }
    // With the systemd cgroup manager and no systemd, runsc would run with no cgroup at all.
    let cid = p.dir().path().join("cid-systemd");
    let out = p
        .podman()
        .args(["--cgroup-manager", "systemd", "run", "--rm", "--cidfile"])
        .arg(&cid)
        .args(["--runtime", "gvisor-hardened", "--network", "none"])
        .args([
            "--runtime-flag",
            &format!("policy={}", p.dir().policy().display()),
        ])
        .args([TEST_IMAGE_REF, "echo", "must-not-run"])
        .output()
        .unwrap();
    assert!(
        !out.success() && !out.stdout.contains("must-not-run"),
        "{out}"
    );
    assert!(
        out.stderr.contains("--systemd-cgroup") && out.stderr.contains("no cgroup"),
        "{out}"
    );
    if let Ok(id) = read_cidfile(&cid) {
        let _ = p.podman().args(["rm", "-f", &id]).output();
        p.assert_container_gone(&id);
    }
    assert_clean_podman_shutdown(p);
}

#[test]
fn podmans_pids_limit_is_a_guest_process_budget_and_the_lifetime_limit_holds() {
    let p = setup();
    let (out, id) = run(
        &p,
        &["--pids-limit", "40"],
        "for i in $(seq 25); do sleep 30 & done; echo spawned; kill $(jobs -p)",
    );
    assert!(out.success() && out.stdout.contains("spawned"), "{out}");
    let create = p.dir().audit_record(&id, "create").unwrap();
    let want = gvisor_hardened_tests::stack::Stack::selected().pids_limit(40);
    assert!(
        create.to_string().contains(&format!("\"after\":{want}")),
        "{want} host tasks for 40 processes: {create}"
    );
    p.assert_container_gone(&id);

    // The guard arms the lifetime when Podman's `start` tells it (conmon started it).
    let short = p
        .dir()
        .write_policy(
            "short.toml",
            "[lifetime]\nmax_runtime = \"2s\"\ngrace_period = \"1s\"\n",
        )
        .unwrap();
    let (out, id) = p
        .run_rm(&short, &["--network", "none"], "trap '' TERM; sleep 600")
        .unwrap();
    assert_eq!(
        out.code(),
        137,
        "SIGTERM ignored, SIGKILL after the grace period: {out}"
    );
    assert!(!id.is_empty(), "podman wrote the container's id: {out}");
    let exit = p.dir().audit_record(&id, "exit").unwrap();
    assert_eq!(exit["timed_out"], true, "{exit}");
    p.assert_container_gone(&id);
    assert_clean_podman_shutdown(p);
}

/// The output bound and the idle timeout hold under Podman as under the shim: the guard
/// copies the container's stdout and stderr or relays its terminal (and an exec's guard an
/// exec's) against one budget, and stops a container with no output and no CPU.
#[test]
fn the_output_bound_and_the_idle_timeout_hold_under_podman() {
    let p = setup();
    let policy =
        |name: &str, text: &str| p.hardened_args(&p.dir().write_policy(name, text).unwrap());
    let bounded = policy("bounded.toml", "[output]\nmax_bytes = \"1Ki\"\n");
    let idle = policy(
        "idle.toml",
        "[lifetime]\nidle_timeout = \"5s\"\ngrace_period = \"1s\"\n",
    );
    let none = ["--network", "none"];
    gvisor_hardened_tests::engine_limits::assert_output_bound(
        || p.podman(),
        p.dir(),
        &bounded,
        &none,
        1024,
    );
    gvisor_hardened_tests::engine_limits::assert_idle_timeout(|| p.podman(), p.dir(), &idle, &none);
    assert_clean_podman_shutdown(p);
}
