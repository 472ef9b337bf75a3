//! nerdctl for real: the stack's nerdctl (hack/deps.sh) against a private containerd 2.x, its
//! own state in the test's directory (`gvisor_hardened_tests::nerdctl`), the hardened runtime
//! picked with `--runtime io.containerd.gvisor-hardened.v1` as a user would, real runsc. Every
//! test also checks that nerdctl left the system's nerdctl, CNI and containerd paths alone.
//!
//! What nerdctl sends that the ctr tests never did, and what makes it work:
//! - its own OCI hooks (`nerdctl internal oci-hook createRuntime` / `postStop`) in every spec:
//!   the policy's hooks rule removes exactly these (policy-injector `rules/hooks.rs`);
//! - `binary://` stdio (its logging driver) for every detached container (`run -d`, compose):
//!   the shim starts the logger as containerd's runc shim does (shim `stdio/log_binary.rs`).

use std::time::{Duration, Instant};

use gvisor_hardened_tests::egress::{hostile_names_section, Connections, UpstreamNetns};
use gvisor_hardened_tests::nerdctl::{with_node_policy, HostPaths, Nerdctl, HARDENED_RUNTIME};
use gvisor_hardened_tests::*;

/// A private containerd with the shim, nerdctl bound to it, the test image loaded by nerdctl.
fn setup() -> (Containerd, Nerdctl) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let n = Nerdctl::new(&c).unwrap();
    n.load(&TestImage::ensure().unwrap()).unwrap();
    (c, n)
}

/// `run` flags every hardened container here gets.
fn hardened(extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["--runtime", HARDENED_RUNTIME, "--network", "none"]
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().map(|s| s.to_string()))
        .collect();
    v.insert(0, "run".into());
    v
}

fn cid(n: &Nerdctl, name: &str) -> std::path::PathBuf {
    n.tmp_dir().join(format!("{name}.cid"))
}

/// Whether terminal output has `line` on a line of its own (both terminals add a `\r`).
fn has_line(out: &str, line: &str) -> bool {
    out.lines().any(|l| l.trim_end_matches('\r') == line)
}

/// After a test: nerdctl knows no container, no logger of it runs, the container `ids` left
/// nothing on the host, the system paths are as they were, and containerd stops clean.
#[track_caller]
fn assert_all_gone(c: Containerd, n: &Nerdctl, ids: &[String], host: &HostPaths) {
    assert_eq!(n.containers().unwrap(), Vec::<String>::new());
    for id in ids {
        assert_nothing_left(&c, id, &Runtime::hardened());
    }
    let loggers = n.loggers();
    assert!(loggers.is_empty(), "loggers left: {loggers:#?}");
    host.assert_unchanged();
    assert_clean_shutdown(c);
}

#[test]
fn nerdctl_run_rm_runs_the_workload_hardened_under_gvisor() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let cidfile = cid(&n, "run");
    let mut args = hardened(&["--rm", "--cidfile"]);
    args.push(cidfile.display().to_string());
    args.extend([TEST_IMAGE_REF.to_string(), "sh".into(), "-c".into()]);
    args.push(
        [
            "caps",
            "nnp",
            "ids",
            "write /srv/probe x",
            "statfs /tmp",
            "write /tmp/probe x",
            "uname",
        ]
        .iter()
        .map(|p| format!("sandbox-probe {p}"))
        .collect::<Vec<_>>()
        .join("; "),
    );
    let out = n.output(&args).unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let lines: Vec<ProbeLine> = out
        .stdout
        .lines()
        .map(|l| ProbeLine::parse(l).unwrap_or_else(|e| panic!("{e}\n{out}")))
        .collect();
    let [caps, nnp, ids, srv, tmp, tmp_write, uname] = &lines[..] else {
        panic!("{out}")
    };
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(caps.field(set), Some("0000000000000000"), "{set}: {out}");
    }
    assert_eq!(nnp.field("nnp"), Some("1"), "{out}");
    // nerdctl asks for root (the image has no user): the policy makes it nobody.
    assert_eq!(ids.field("uid"), Some("65534"), "{out}");
    assert_eq!(srv.errno(), Some("EROFS"), "{out}");
    assert_eq!(tmp.field("fstype"), Some("tmpfs"), "{out}");
    assert!(tmp_write.is_ok(), "{out}");
    let release = uname.field("release").unwrap_or_default();
    assert!(
        stack::is_gvisor_release(release),
        "not gVisor's kernel: {out}"
    );

    let id = std::fs::read_to_string(&cidfile).unwrap();
    assert_all_gone(c, &n, &[id.trim().to_string()], &host);
}

#[test]
fn nerdctl_run_it_gives_the_workload_a_terminal() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let cidfile = cid(&n, "tty");
    let mut args = hardened(&["--rm", "-it", "--cidfile"]);
    args.push(cidfile.display().to_string());
    args.extend([TEST_IMAGE_REF.to_string(), "sh".into()]);
    let out = n
        .command()
        .args(&args)
        .output_in_pty("[ -t 0 ] && echo TTY-YES; id -u; exit 7\n")
        .unwrap();
    assert_eq!(out.code(), 7, "{out}");
    assert!(out.stdout.contains("TTY-YES"), "{out}");
    assert!(has_line(&out.stdout, "65534"), "{out}");
    assert!(!out.stdout.contains("resize pty"), "{out}");
    let id = std::fs::read_to_string(&cidfile).unwrap();
    assert_all_gone(c, &n, &[id.trim().to_string()], &host);
}

#[test]
fn a_detached_container_logs_execs_stops_and_is_removed() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let mut args = hardened(&["-d", "--name", "bg"]);
    args.extend([
        TEST_IMAGE_REF.to_string(),
        "sh".into(),
        "-c".into(),
        "echo started; echo to-stderr >&2; exec sleep 600".into(),
    ]);
    let started = Instant::now();
    let out = n.checked(&args).unwrap();
    let id = out.stdout.trim().to_string();
    assert_eq!(id, n.id_of("bg").unwrap());
    eprintln!("nerdctl run -d: {:?}", started.elapsed());

    // The logger the shim started for nerdctl's binary:// URI has both streams.
    poll_until(
        "both lines in nerdctl logs",
        Duration::from_secs(30),
        || {
            let logs = n.checked(["logs", "bg"]).ok()?;
            (logs.stdout.contains("started") && logs.stderr.contains("to-stderr")).then_some(())
        },
    )
    .unwrap();
    assert_eq!(n.loggers().len(), 1, "{:#?}", n.loggers());

    // exec is hardened too: nobody, no capability, even when asked for root.
    let exec = n.checked(["exec", "bg", "sandbox-probe", "ids"]).unwrap();
    assert_eq!(
        ProbeLine::parse_last(&exec.stdout).unwrap().field("uid"),
        Some("65534"),
        "{exec}"
    );
    let root = n
        .checked(["exec", "-u", "0", "bg", "sandbox-probe", "caps"])
        .unwrap();
    let caps = ProbeLine::parse_last(&root.stdout).unwrap();
    assert_eq!(caps.field("CapEff"), Some("0000000000000000"), "{root}");
    // nerdctl resizes an exec's terminal between Exec and Start (before it exists); nerdctl
    // exec turns any non-zero exit into 1, so the shell exits 0.
    let exec_it = n
        .command()
        .args(["exec", "-it", "bg", "sh"])
        .output_in_pty("[ -t 0 ] && echo EXEC-TTY; stty size; exit 0\n")
        .unwrap();
    assert_eq!(exec_it.code(), 0, "{exec_it}");
    assert!(exec_it.stdout.contains("EXEC-TTY"), "{exec_it}");
    assert!(!exec_it.stdout.contains("resize pty"), "{exec_it}");
    // The pty helper's size reached the exec's terminal.
    let size = format!("{} {}", pty::PTY_ROWS, pty::PTY_COLS);
    assert!(has_line(&exec_it.stdout, &size), "{exec_it}");

    let ps = n
        .checked(["ps", "--format", "{{.Names}} {{.Status}}"])
        .unwrap();
    assert!(ps.stdout.contains("bg Up"), "{ps}");
    // nerdctl stats reads the sandbox's cgroups (it panicked on metrics without block I/O).
    let stats = n
        .checked([
            "stats",
            "--no-stream",
            "--format",
            "{{.MemUsage}} {{.BlockIO}}",
            "bg",
        ])
        .unwrap();
    assert!(stats.stdout.contains("/ 2GiB"), "{stats}");
    // nerdctl cp goes through /proc/PID/root of the sandbox process, the sentry's empty
    // root: it fails both ways and changes nothing inside; copying through exec works.
    let out = n
        .output(["cp", "bg:/etc/hostname", "/tmp/gvh-never-copied"])
        .unwrap();
    assert!(!out.success(), "{out}");
    let staged = n.tmp_dir().join("copied-in");
    std::fs::write(&staged, "through exec\n").unwrap();
    let out = n
        .output(["cp", staged.to_str().unwrap(), "bg:/tmp/"])
        .unwrap();
    assert!(!out.success(), "{out}");
    let seen = n.checked(["exec", "bg", "ls", "/tmp"]).unwrap();
    assert!(!seen.stdout.contains("copied-in"), "{seen}");
    n.command()
        .args(["exec", "-i", "bg", "sh", "-c", "cat > /tmp/copied-in"])
        .stdin("through exec\n")
        .checked()
        .unwrap();
    let back = n.checked(["exec", "bg", "cat", "/tmp/copied-in"]).unwrap();
    assert_eq!(back.stdout, "through exec\n");
    // What the hardening changed, in nerdctl inspect: containerd's record of the container,
    // which the shim labels (and annotates) after the Create.
    let summary = poll_until(
        "the hardening's summary in nerdctl inspect",
        Duration::from_secs(10),
        || {
            let out = n.checked(["inspect", "bg"]).ok()?;
            let v: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
            v[0]["Config"]["Labels"]["gvisor-hardened.dev/decisions"]
                .as_str()
                .map(String::from)
        },
    )
    .unwrap();
    assert!(summary.starts_with("gvisor-hardened changed "), "{summary}");
    let native = n.checked(["inspect", "--mode=native", "bg"]).unwrap();
    let native: serde_json::Value = serde_json::from_str(&native.stdout).unwrap();
    assert_eq!(
        native[0]["Spec"]["annotations"]["gvisor-hardened.dev/decisions"],
        summary.as_str()
    );
    // nerdctl top runs ps(1) on the host with the pids the shim gives: the sandbox's host
    // processes, not guest pids (guest pid 1 listed the host's init and kthreadd).
    let top = n.checked(["top", "bg"]).unwrap();
    assert!(top.stdout.contains("runsc-sandbox"), "{top}");
    assert!(
        !top.stdout.contains("kthreadd") && !top.stdout.contains("/sbin/init"),
        "{top}"
    );
    // A change of the memory limit is refused naming the rule: gVisor sized the guest's memory
    // at boot, and `runsc update` only rewrites the host's cgroup (the guest went on seeing
    // 2 GiB after `update --memory 300m`).
    let memory = || inspect::cgroup_file(&id, "memory", "memory.limit_in_bytes");
    let refused = n.output(["update", "--memory", "300m", "bg"]).unwrap();
    assert!(!refused.success(), "{refused}");
    assert!(
        refused
            .stderr
            .contains("rejected by policy: resources: resources.memory.limit"),
        "{refused}"
    );
    assert_eq!(memory(), (2u64 << 30).to_string());
    // An update of the CPU lands in the sandbox's cgroup and keeps the process limit the create
    // gave (it was sized as on ptrace before, about four times looser). nerdctl 2.0's `update
    // --cpus` never sets a quota (it copies the cpuset flag), so the quota is asked directly.
    let pids_before = inspect::cgroup_file(&id, "pids", "pids.max");
    n.checked([
        "update",
        "--cpu-quota",
        "50000",
        "--cpu-period",
        "100000",
        "bg",
    ])
    .unwrap();
    assert_eq!(inspect::cgroup_file(&id, "pids", "pids.max"), pids_before);
    assert_eq!(
        inspect::cgroup_file(&id, "cpu", "cpu.cfs_quota_us"),
        "50000"
    );
    assert_eq!(memory(), (2u64 << 30).to_string());
    n.checked(["stop", "-t", "2", "bg"]).unwrap();
    let ps = n
        .checked(["ps", "-a", "--format", "{{.Names}} {{.Status}}"])
        .unwrap();
    assert!(ps.stdout.contains("bg Exited"), "{ps}");
    // The exit was reported after the logger wrote everything and ended.
    assert!(n.loggers().is_empty(), "{:#?}", n.loggers());
    let logs = n.checked(["logs", "bg"]).unwrap();
    assert!(logs.stdout.contains("started"), "{logs}");
    n.checked(["rm", "bg"]).unwrap();

    // -d -t: the terminal's output goes to the logger too.
    let mut args = hardened(&["-d", "-t", "--name", "bg-tty"]);
    args.extend([
        TEST_IMAGE_REF.to_string(),
        "sh".into(),
        "-c".into(),
        "[ -t 1 ] && echo on-a-tty; exec sleep 600".into(),
    ]);
    let tty_id = n.checked(&args).unwrap().stdout.trim().to_string();
    poll_until(
        "the terminal's line in nerdctl logs",
        Duration::from_secs(30),
        || {
            let logs = n.checked(["logs", "bg-tty"]).ok()?;
            logs.stdout.contains("on-a-tty").then_some(())
        },
    )
    .unwrap();
    n.checked(["rm", "-f", "bg-tty"]).unwrap();
    assert_all_gone(c, &n, &[id, tty_id], &host);
}

/// The process limit ends a fork bomb's sandbox, and `nerdctl run` says why where its user
/// looks, after the workload's own output (it used to end with exit 2 and nothing).
#[test]
fn a_process_limit_kill_says_why_on_the_containers_stderr() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let cidfile = cid(&n, "bomb");
    let mut args = hardened(&["--rm", "--pids-limit", "16", "--cidfile"]);
    args.push(cidfile.display().to_string());
    args.extend([TEST_IMAGE_REF, "sh", "-c"].map(String::from));
    args.push("echo forking; b() { b | b & }; b; exec sleep 120".into());
    let out = n.output(&args).unwrap();
    assert_ne!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("forking"), "{out}");
    // nerdctl's own warnings may follow it on the same stream.
    assert!(
        has_line(
            &out.stderr,
            "gvisor-hardened: stopped at the sandbox's process limit (pids ceiling reached)"
        ),
        "{out}"
    );
    let id = std::fs::read_to_string(&cidfile)
        .unwrap()
        .trim()
        .to_string();
    assert_all_gone(c, &n, &[id], &host);
}

#[test]
fn annotations_tighten_the_policy_and_a_looser_one_is_refused() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let mut ids = Vec::new();
    let mut run = |name: &str, annotation: &str, cmd: &[&str]| {
        let cidfile = cid(&n, name);
        let mut args = hardened(&["--rm", "--annotation", annotation, "--cidfile"]);
        args.push(cidfile.display().to_string());
        args.push(TEST_IMAGE_REF.into());
        args.extend(cmd.iter().map(|s| s.to_string()));
        let t = Instant::now();
        let out = n.output(&args).unwrap();
        if let Ok(id) = std::fs::read_to_string(&cidfile) {
            ids.push(id.trim().to_string());
        }
        (out, t.elapsed())
    };

    // The policy's 2Gi, lowered: the sentry's memory is the ceiling.
    let (out, _) = run(
        "mem",
        "gvisor-hardened.dev/memory=256Mi",
        &["grep", "MemTotal", "/proc/meminfo"],
    );
    assert_eq!(out.code(), 0, "{out}");
    assert!(out.stdout.contains("262144 kB"), "{out}");

    // A lifetime of 2 s instead of the policy's: the workload ignores SIGTERM, so it is killed
    // after the grace period.
    let (out, took) = run(
        "life",
        "gvisor-hardened.dev/max-runtime=2s",
        &["sh", "-c", "trap '' TERM; echo up; sleep 600"],
    );
    assert_eq!(out.code(), 137, "{out}");
    assert!(out.stdout.contains("up"), "{out}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(60),
        "{took:?} {out}"
    );

    // Looser than the policy: refused before anything runs, naming the annotation.
    let (out, _) = run(
        "loose",
        "gvisor-hardened.dev/memory=64Gi",
        &["echo", "must-not-run"],
    );
    assert_ne!(out.code(), 0, "{out}");
    assert!(!out.stdout.contains("must-not-run"), "{out}");
    assert!(
        out.stderr.contains("rejected by policy: annotations:")
            && out.stderr.contains("gvisor-hardened.dev/memory")
            && out.stderr.contains("annotations can only tighten"),
        "{out}"
    );
    assert_all_gone(c, &n, &ids, &host);
}

#[test]
fn a_bind_of_var_run_is_refused_naming_the_mounts_rule() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let cidfile = cid(&n, "varrun");
    let mut args = hardened(&["--rm", "-v", "/var/run:/x", "--cidfile"]);
    args.push(cidfile.display().to_string());
    args.extend([TEST_IMAGE_REF, "ls", "/x"].map(String::from));
    let out = n.output(&args).unwrap();
    assert_ne!(out.code(), 0, "{out}");
    assert!(
        out.stderr.contains(
            "rejected by policy: mounts: mounts[/x]: bind of denied host path: source /var/run"
        ),
        "{out}"
    );
    assert!(out.stderr.contains("/var/run/containerd/**"), "{out}");
    let id = std::fs::read_to_string(&cidfile).unwrap_or_default();
    let ids: Vec<String> = Some(id.trim().to_string())
        .filter(|s| !s.is_empty())
        .into_iter()
        .collect();
    assert_all_gone(c, &n, &ids, &host);
}

const COMPOSE: &str = r#"services:
  web:
    image: localhost/gvh-test:latest
    runtime: io.containerd.gvisor-hardened.v1
    network_mode: none
    command: ["sh", "-c", "echo web-up; exec sleep 600"]
  worker:
    image: localhost/gvh-test:latest
    runtime: io.containerd.gvisor-hardened.v1
    network_mode: none
    annotations:
      gvisor-hardened.dev/memory: 128Mi
    command: ["sh", "-c", "echo worker-up; grep MemTotal /proc/meminfo; exec sleep 600"]
"#;

#[test]
fn compose_runs_two_hardened_services_with_network_none() {
    let host = HostPaths::record();
    let (c, n) = setup();
    let project = c.dir().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let file = project.join("compose.yaml");
    std::fs::write(&file, COMPOSE).unwrap();
    let compose = |args: &[&str]| {
        n.command()
            .args(["compose", "-f"])
            .arg(&file)
            .args(["-p", "gvh"])
            .args(args)
            .output()
            .unwrap()
    };
    let up = compose(&["up", "-d"]);
    assert_eq!(up.code(), 0, "{up}");
    let ids: Vec<String> = ["gvh-web-1", "gvh-worker-1"]
        .iter()
        .map(|name| n.id_of(name).unwrap())
        .collect();
    // nerdctl 2.0.3's `compose ps --format` takes table or json only.
    let ps = compose(&["ps", "--format", "json"]);
    let listed: serde_json::Value =
        serde_json::from_str(&ps.stdout).unwrap_or_else(|e| panic!("{e}: {ps}"));
    let mut states: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["Service"].as_str().unwrap().into(),
                s["State"].as_str().unwrap().into(),
            )
        })
        .collect();
    states.sort();
    assert_eq!(
        states,
        [
            ("web".into(), "running".into()),
            ("worker".into(), "running".into())
        ],
        "{ps}"
    );
    poll_until("both services logged", Duration::from_secs(30), || {
        let logs = compose(&["logs"]);
        (logs.stdout.contains("web-up") && logs.stdout.contains("MemTotal:         131072 kB"))
            .then_some(())
    })
    .unwrap();
    let exec = compose(&["exec", "-T", "web", "sandbox-probe", "caps"]);
    assert_eq!(exec.code(), 0, "{exec}");
    assert_eq!(
        ProbeLine::parse_last(&exec.stdout).unwrap().field("CapEff"),
        Some("0000000000000000"),
        "{exec}"
    );
    let exec = compose(&["exec", "-T", "worker", "id", "-u"]);
    assert_eq!(exec.stdout.trim(), "65534", "{exec}");
    assert_eq!(n.loggers().len(), 2, "{:#?}", n.loggers());
    let down = compose(&["down"]);
    assert_eq!(down.code(), 0, "{down}");
    assert_all_gone(c, &n, &ids, &host);
}

/// One line per step: what ran, what it printed (first line), its status.
const EGRESS_SCRIPT: &str = r#"
step() { name=$1; shift; out=$("$@" 2>&1); echo "$name rc=$? $(echo "$out" | head -1)"; }
step allowed wget -q -O - http://upstream.example.test:8080/hello.txt
step not-listed wget -q -O - http://elsewhere.example.test:8080/x
step metadata wget -q -O - http://metadata.example.test:8080/x
step direct sandbox-probe connect UPSTREAM 8080 2000
"#;

const BODY: &str = "hello through the allowlist";

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} rc=")))
        .unwrap_or_else(|| panic!("no {name} step in:\n{out}"))
}

/// nerdctl cannot name a policy, so egress comes from the node policy: here a private mount
/// namespace's `/etc/gvisor-hardened/policy.toml` (the host's /etc is not written).
#[test]
fn a_nerdctl_container_reaches_the_node_policys_allowlist_and_nothing_else() {
    let host = HostPaths::record();
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", BODY.as_bytes())])
        .unwrap();
    let audit_dir = tempfile::tempdir().unwrap();
    let audit = audit_dir.path().join("audit.jsonl");
    let policy = format!(
        "version = 1\n\n[audit]\npath = \"{}\"\n\n{}",
        audit.display(),
        hostile_names_section(&ns)
    );
    let script = EGRESS_SCRIPT.replace("UPSTREAM", &inside);
    let audit_path = audit.clone();
    with_node_policy(&policy, move || {
        let (c, n) = setup();
        let cidfile = cid(&n, "egress");
        let mut args = hardened(&["--rm", "--cidfile"]);
        args.push(cidfile.display().to_string());
        args.extend([TEST_IMAGE_REF.to_string(), "sh".into(), "-c".into(), script]);
        let out = n.output(&args).unwrap();
        assert_eq!(out.code(), 0, "{out}");
        let text = out.stdout.as_str();
        assert!(line(text, "allowed").ends_with(BODY), "{text}");
        for refused in ["not-listed", "metadata"] {
            assert!(line(text, refused).contains("403"), "{refused}: {text}");
        }
        // Loopback only: no route. Seen here on the current stack: ENETUNREACH (egress_shim's ctr
        // container, whose spec has no network namespace of its own, sees EHOSTUNREACH).
        let direct = line(text, "direct");
        assert!(
            direct.contains("EHOSTUNREACH") || direct.contains("ENETUNREACH"),
            "{text}"
        );

        let id = std::fs::read_to_string(&cidfile)
            .unwrap()
            .trim()
            .to_string();
        let records = gvisor_hardened_tests::fault::audit_lines(&audit_path);
        let connections = Connections::of(&records, &id);
        assert_eq!(connections.verdicts("upstream.example.test"), ["allowed"]);
        assert_eq!(connections.verdicts("elsewhere.example.test"), ["denied"]);
        assert_eq!(connections.verdicts("metadata.example.test"), ["denied"]);
        // The node policy governed it.
        let create = records
            .iter()
            .find(|r| r["container_id"] == id.as_str() && r["event"] == "create")
            .unwrap_or_else(|| panic!("no create record for {id}: {records:?}"));
        assert!(
            create
                .to_string()
                .contains("/etc/gvisor-hardened/policy.toml"),
            "{create}"
        );
        // The harness's mount checks read this thread's mount namespace.
        assert_all_gone(c, &n, &[id], &HostPaths::record());
    });
    host.assert_unchanged();
    assert!(
        !std::path::Path::new("/etc/gvisor-hardened/policy.toml").exists(),
        "the node policy leaked onto the host"
    );
}

/// Under the default policy (network mode none) a sandbox has no network stack: a port nerdctl
/// publishes (`-p`) and the bridge network it attaches by default could never be reached. Both
/// are refused naming the network rule instead of running unreachable.
#[test]
fn published_ports_and_the_bridge_network_are_refused_naming_the_network_rule() {
    let (c, n) = setup();
    for (args, expected) in [
        (
            vec!["--network", "none", "-p", "127.0.0.1:18080:80"],
            "published ports (127.0.0.1:18080->80/tcp) cannot reach the sandbox",
        ),
        (vec![], "network bridge cannot reach the sandbox"),
    ] {
        let mut cmd = vec!["run", "--rm", "--runtime", HARDENED_RUNTIME];
        cmd.extend(&args);
        cmd.extend([TEST_IMAGE_REF, "true"]);
        let out = n.command().args(&cmd).output().unwrap();
        assert!(!out.success(), "{args:?} ran: {out}");
        assert!(
            out.stderr.contains("rejected by policy: network:") && out.stderr.contains(expected),
            "{args:?}: {out}"
        );
    }
    let ps = n.checked(["ps", "-a", "-q"]).unwrap();
    assert_eq!(ps.stdout.trim(), "", "{ps}");
    assert_clean_shutdown(c);
}
