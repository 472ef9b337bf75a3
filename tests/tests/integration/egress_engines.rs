//! Egress through Docker and Podman: `docker run` / `podman run --runtime gvisor-hardened
//! --network none` with a policy that has an allowlist. runsc-hardened's guard runs the proxy
//! (dialing from the host's network namespace) and keeps the forwarder inside. The upstream is
//! a busybox httpd inside a network namespace the test creates (veth pair), named through the
//! policy's static `hosts` and allowed by `allow_cidrs`: nothing leaves the machine. A flood
//! meets the policy's connection cap in the guard's proxy and the forwarder's limit.

use gvisor_hardened_tests::audit_tools::validate_against_schema;
use gvisor_hardened_tests::docker::{assert_clean_docker_shutdown, DockerOptions, Dockerd};
use gvisor_hardened_tests::egress::{
    hostile_names_section, probe_counts, Connections, ProxySeen, ProxyWatch, UpstreamNetns,
};
use gvisor_hardened_tests::engine::EngineDir;
use gvisor_hardened_tests::podman::{assert_clean_podman_shutdown, Podman};
use gvisor_hardened_tests::*;

const BODY: &str = "hello through the engines' allowlist";
/// The policy's file is `egress.toml`: refusals name it `egress`.
const POLICY: &str = "egress";

/// One line per step: what ran, its status, what it printed (on one line).
const SCRIPT: &str = r#"
step() { name=$1; shift; out=$("$@" 2>&1); echo "$name rc=$? $(echo "$out" | tr '\r\n' '  ')"; }
ask() { printf "$1" | nc 127.0.0.1 3128; }
step allowed wget -q -O - http://upstream.example.test:8080/hello.txt
step tunnel ask 'CONNECT upstream.example.test:8080 HTTP/1.1\r\n\r\nGET /hello.txt HTTP/1.0\r\n\r\n'
step not-listed ask 'GET http://elsewhere.example.test:8080/x HTTP/1.1\r\nHost: elsewhere.example.test:8080\r\n\r\n'
step direct sandbox-probe connect UPSTREAM 8080 2000
step flood sandbox-probe http-flood "$https_proxy" upstream.example.test 8080 100 20
"#;

/// The policy: the shared allowlist, with a connection cap the flood step meets (and a rate it
/// does not, so the counts below are exact).
fn section(ns: &UpstreamNetns) -> String {
    format!(
        "{}max_connections = {CAP}\nmax_connection_rate = 4000\n",
        hostile_names_section(ns)
    )
}

const CAP: usize = 20;
const FLOOD: usize = 100;

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} rc=")))
        .unwrap_or_else(|| panic!("no {name} step in:\n{out}"))
}

fn upstream() -> UpstreamNetns {
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", BODY.as_bytes())])
        .unwrap();
    ns
}

/// What the workload saw, and what the audit log says about container `id`.
/// The guard's proxy process ran confined, in the container's cgroup (its id in the path).
fn assert_proxy_was_confined(seen: Vec<ProxySeen>) {
    assert!(
        !seen.is_empty(),
        "no proxy process in the container's cgroup"
    );
    for p in &seen {
        assert!(p.is_confined(), "{p:?}");
    }
}

fn assert_egress_worked(out: &CommandOutput, dir: &EngineDir, id: &str) {
    assert_eq!(out.code(), 0, "{out}");
    let text = out.stdout.as_str();
    assert!(line(text, "allowed").trim_end().ends_with(BODY), "{text}");
    let tunnel = line(text, "tunnel");
    assert!(tunnel.contains("200 Connection established"), "{text}");
    assert!(tunnel.contains(BODY), "{text}");
    let refused = line(text, "not-listed");
    assert!(refused.contains("403"), "{text}");
    assert!(
        refused.contains(&format!(
            "egress denied: host elsewhere.example.test is not in the allowlist of policy {POLICY}"
        )),
        "{text}"
    );
    // No network of its own: the upstream's address is unreachable without the proxy.
    assert!(
        gvisor_hardened_tests::stack::mentions_no_route(line(text, "direct")),
        "{text}"
    );

    // 100 connections held open at once, cap 20: every one answered (a tunnel, a 503 with the
    // cap, or closed at once by the forwarder), none silent.
    eprintln!("{}", line(text, "flood"));
    let flood = probe_counts(line(text, "flood"));
    let count = |k: &str| flood.get(k).copied().unwrap_or(usize::MAX);
    assert_eq!(count("s200"), CAP, "{text}");
    assert_eq!(
        (count("silent"), count("unconnected"), count("other")),
        (0, 0, 0),
        "{text}"
    );
    assert_eq!(
        count("s200") + count("s503") + count("s429") + count("closed"),
        FLOOD,
        "{text}"
    );

    let connections = Connections::of(&dir.audit_lines(), id);
    let of = |host: &str| connections.verdicts(host);
    assert_eq!(
        of("upstream.example.test"),
        vec!["allowed"; 2 + CAP],
        "{connections:?}"
    );
    let by_rule = |rule: &str| connections.0.iter().filter(|r| r["rule"] == rule).count();
    assert_eq!(by_rule("max-connections"), count("s503"), "{connections:?}");
    assert_eq!(
        by_rule("forwarder-limit"),
        count("closed"),
        "{connections:?}"
    );
    assert_eq!(of("elsewhere.example.test"), ["denied"], "{connections:?}");
    // The guard ran the proxy from the start to the exit, and stopped it before its exit
    // record; the engine's delete comes last.
    let events = dir.audit_events(id);
    let at = |e: &str| {
        events
            .iter()
            .position(|x| x == e)
            .unwrap_or_else(|| panic!("no {e} in {events:?}"))
    };
    assert!(at("start") < at("egress-forwarder-ready"), "{events:?}");
    assert!(
        at("egress-proxy-stopped") < at("exit") && at("exit") < at("delete"),
        "{events:?}"
    );
    // The forwarder ended with the container: that is the exit, not a forwarder death.
    assert!(
        !events.iter().any(|e| e == "egress-forwarder-died"),
        "{events:?}"
    );
    // The log, egress records included, is one intact chain and every record fits the schema.
    // Signed: the guard's egress records are inside the container's trail, which delete seals.
    let verified = dir.assert_audit_signed_and_intact();
    assert!(
        verified.contains("signatures: 1 sandbox(es) signed and verified"),
        "{verified}"
    );
    validate_against_schema(&[&dir.audit_log()]).unwrap();
}

#[test]
fn a_docker_container_reaches_allowlisted_hosts_through_the_guards_proxy_and_nothing_else() {
    let ns = upstream();
    let d = Dockerd::start(DockerOptions {
        extra_policies: vec![(POLICY.into(), section(&ns))],
    })
    .unwrap();
    d.import_test_image().unwrap();
    let script = SCRIPT.replace("UPSTREAM", &ns.inside_addr());
    let watch = ProxyWatch::start();
    let (out, id) = d.run_rm(POLICY, &["--network", "none"], &script).unwrap();
    assert_egress_worked(&out, d.dir(), &id);
    assert_proxy_was_confined(watch.stop(&id));
    d.assert_container_gone(&id);
    assert_clean_docker_shutdown(d);
}

#[test]
fn a_podman_container_reaches_allowlisted_hosts_through_the_guards_proxy_and_nothing_else() {
    let ns = upstream();
    let p = Podman::new().unwrap();
    p.import_test_image().unwrap();
    let policy = p
        .dir()
        .write_policy(&format!("{POLICY}.toml"), &section(&ns))
        .unwrap();
    let script = SCRIPT.replace("UPSTREAM", &ns.inside_addr());
    let watch = ProxyWatch::start();
    let (out, id) = p.run_rm(&policy, &["--network", "none"], &script).unwrap();
    assert_egress_worked(&out, p.dir(), &id);
    assert_proxy_was_confined(watch.stop(&id));
    p.assert_container_gone(&id);
    assert_clean_podman_shutdown(p);
}
