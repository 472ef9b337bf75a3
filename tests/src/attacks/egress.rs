//! Egress attacks: a workload in a sandbox whose policy allows one upstream (a busybox httpd in a
//! network namespace the attack creates, over a veth pair) tries to get anywhere else, to get
//! around the proxy, or to disable or impersonate the forwarder.

use super::lab::{Job, Lab, Ran};
use super::{ensure, Attack, Category, Failed, Outcome};
use crate::egress::{hostile_names_section, UpstreamNetns};

fn a(name: &'static str, expected: &'static str, run: fn(&Lab) -> Outcome) -> Attack {
    Attack {
        name,
        category: Category::Egress,
        expected,
        run,
    }
}

pub fn attacks() -> Vec<Attack> {
    vec![
        a(
            "egress: a host not in the allowlist",
            "403, audited as denied with the words the agent gets",
            |l| {
                refused(
                    l,
                    "egress-unlisted",
                    "http://elsewhere.example.test:8080/x",
                    "not in the allowlist",
                )
            },
        ),
        a(
            "egress: an allowlisted host on another port",
            "403, audited as denied",
            |l| {
                refused(
                    l,
                    "egress-port",
                    "http://upstream.example.test:9090/x",
                    "9090",
                )
            },
        ),
        a(
            "egress: the cloud metadata address behind an allowlisted-looking name",
            "403: link-local is refused after resolution",
            |l| {
                refused(
                    l,
                    "egress-meta",
                    "http://metadata.example.test:8080/latest",
                    "169.254.169.254", // the refusal names it; net-scan: data
                )
            },
        ),
        a(
            "egress: a name that resolves to the node's loopback",
            "403: loopback is refused after resolution",
            |l| {
                refused(
                    l,
                    "egress-loop",
                    "http://loop.example.test:8080/",
                    "127.0.0.1",
                )
            },
        ),
        a(
            "egress: an IP literal",
            "403: IP literals outside allow_cidrs are refused",
            |l| refused(l, "egress-literal", "http://127.0.0.1:8080/", "IP address"),
        ),
        a(
            "egress: connect to the upstream's address without the proxy",
            "no route (EHOSTUNREACH/ENETUNREACH): the sandbox still has no network of its own",
            direct,
        ),
        a(
            "egress: kill the forwarder",
            "EPERM: the forwarder runs as its own uid, the workload has no capabilities",
            |l| {
                let (ran, _) = run(
                    l,
                    "egress-kill",
                    "kill -9 $(pidof forwarder) 2>&1; echo rc=$?",
                )?;
                ensure(ran.out.stdout.contains("not permitted"), || ran.summary())?;
                Ok("kill: Operation not permitted".into())
            },
        ),
        a(
            "egress: ptrace the forwarder",
            "EPERM: another uid, no CAP_SYS_PTRACE",
            |l| {
                let (ran, _) = run(
                    l,
                    "egress-ptrace",
                    "sandbox-probe ptrace-attach $(pidof forwarder)",
                )?;
                let line = ran.line()?;
                ensure(line.errno() == Some("EPERM"), || ran.summary())?;
                Ok("PTRACE_ATTACH: EPERM".into())
            },
        ),
        a(
            "egress: a live host unix socket in an allowed bind mount",
            "unreachable: egress opens no host socket (no --host-uds); the listener saw nothing",
            host_socket,
        ),
        a(
            "egress: take the forwarder's port first",
            "EADDRINUSE: the workload starts only once the forwarder listens",
            |l| {
                let (ran, _) = run(l, "egress-port-first", "sandbox-probe bind 3128")?;
                ensure(ran.out.stdout.contains("EADDRINUSE"), || ran.summary())?;
                Ok("bind 3128: EADDRINUSE".into())
            },
        ),
        a(
            "egress: replace the forwarder binary",
            "refused: its bind mount is read-only",
            |l| {
                let (ran, _) = run(
                    l,
                    "egress-replace",
                    "sandbox-probe write /.gvisor-hardened/forwarder x",
                )?;
                let line = ran.line()?;
                ensure(
                    matches!(line.errno(), Some("EROFS" | "EACCES" | "EPERM")),
                    || ran.summary(),
                )?;
                Ok(format!("write: {}", line.errno().unwrap_or_default()))
            },
        ),
        a(
            "egress: widen the allowlist with the annotation",
            "rejected by policy: the annotation may only narrow",
            |l| {
                let ns = UpstreamNetns::create().map_err(|e| Failed(e.to_string()))?;
                let policy = l.write_policy("egress-widen", &hostile_names_section(&ns))?;
                let ran = l.run(Job::sh("egress-widen", "true").policy(policy).flags([
                    "--annotation",
                    "gvisor-hardened.dev/egress=evil.example.test",
                ]))?;
                ensure(!ran.started && ran.code() != 0, || ran.summary())?;
                ensure(
                    ran.out.stderr.contains("rejected by policy")
                        && ran.out.stderr.contains("evil.example.test"),
                    || ran.summary(),
                )?;
                Ok("rejected by policy, naming the entry".into())
            },
        ),
    ]
}

/// Runs `script` in a sandbox with egress to a fresh upstream; returns the run and the upstream
/// (kept alive by the caller while it checks).
fn run(lab: &Lab, prefix: &'static str, script: &str) -> Result<(Ran, UpstreamNetns), Failed> {
    let mut ns = UpstreamNetns::create().map_err(|e| Failed(e.to_string()))?;
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", b"upstream")])
        .map_err(|e| Failed(e.to_string()))?;
    let policy = lab.write_policy(prefix, &hostile_names_section(&ns))?;
    let script = script.replace("UPSTREAM", &inside);
    let ran = lab.run(Job::sh(prefix, &script).policy(policy))?;
    Ok((ran, ns))
}

/// The workload asks the proxy for `url` and gets a 403 whose status line and body say why; the
/// audit has the connection, denied, with that reason.
fn refused(lab: &Lab, prefix: &'static str, url: &str, must_say: &str) -> Outcome {
    let script = format!("wget -q -O - {url} 2>&1; echo rc=$?");
    let (ran, _ns) = run(lab, prefix, &script)?;
    // busybox wget, like curl, pip and git, shows the status line and not the body: the
    // reason must be in the status line's reason phrase.
    ensure(
        ran.out.stdout.contains("403 egress denied") && ran.out.stdout.contains(must_say),
        || ran.summary(),
    )?;
    let host = url
        .split("//")
        .nth(1)
        .and_then(|r| r.split([':', '/']).next())
        .unwrap_or_default()
        .to_string();
    let denied = lab
        .audit_lines(&ran.id)
        .into_iter()
        .find(|r| r["event"] == "egress-connection" && r["host"] == host.as_str())
        .ok_or_else(|| Failed(format!("no egress-connection record for {host}")))?;
    ensure(denied["verdict"] == "denied", || denied.to_string())?;
    let reason = denied["reason"].as_str().unwrap_or_default().to_string();
    ensure(reason.starts_with("egress denied"), || denied.to_string())?;
    ensure(reason.contains(must_say), || denied.to_string())?;
    Ok(format!("403; audit: {reason}"))
}

fn direct(lab: &Lab) -> Outcome {
    let (ran, ns) = run(
        lab,
        "egress-direct",
        "sandbox-probe connect UPSTREAM 8080 2000",
    )?;
    let line = ran.line()?;
    ensure(crate::stack::is_no_route(line.errno()), || ran.summary())?;
    Ok(format!(
        "connect {}:8080: {}",
        ns.inside_addr(),
        line.errno().unwrap_or_default()
    ))
}

/// The forwarder is the only way out: a host unix socket that the workload can see (mode 0666,
/// in a bind mount the policy allows) stays unreachable, and its listener never gets a
/// connection.
fn host_socket(lab: &Lab) -> Outcome {
    let dir = lab.dir().join(format!("hostsock-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Failed(e.to_string()))?;
    let path = dir.join("live.sock");
    let _ = std::fs::remove_file(&path);
    let listener =
        std::os::unix::net::UnixListener::bind(&path).map_err(|e| Failed(e.to_string()))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| Failed(e.to_string()))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .map_err(|e| Failed(e.to_string()))?;
    let mut ns = UpstreamNetns::create().map_err(|e| Failed(e.to_string()))?;
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", b"upstream")])
        .map_err(|e| Failed(e.to_string()))?;
    let policy = lab.write_policy("egress-hostsock", &hostile_names_section(&ns))?;
    let mount = format!(
        "type=bind,src={},dst=/hostsock,options=rbind:ro",
        dir.display()
    );
    let ran = lab.run(
        Job::sh(
            "egress-hostsock",
            "sandbox-probe connect-unix /hostsock/live.sock",
        )
        .policy(policy)
        .flags(["--mount", mount.as_str()]),
    )?;
    let line = ran.line()?;
    ensure(ran.started && !line.is_ok(), || ran.summary())?;
    ensure(listener.accept().is_err(), || {
        "the host socket accepted a connection".to_string()
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(format!(
        "connect /hostsock/live.sock: {}; the host listener saw nothing",
        line.errno().unwrap_or("refused")
    ))
}
