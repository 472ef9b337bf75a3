//! Egress against real runsc, before the shim's lifecycle wiring exists: a `--network=none`
//! busybox sandbox hardened with an egress policy, the static forwarder started inside with
//! `runsc exec` (uid 65532, empty capability sets), the shim's proxy and supervisor on the
//! host, upstream HTTP servers in a network namespace this test creates (veth pair).
//!
//! Prints the measurements the wiring depends on (`--nocapture` shows them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use gvisor_hardened_core::egress::audit::{EgressEvent, MemorySink, SandboxRef, Verdict};
use gvisor_hardened_core::egress::guard::{node_addresses, Guard};
use gvisor_hardened_core::egress::net::{NetnsDialer, SystemResolver};
use gvisor_hardened_core::egress::spawn::RunscExec;
use gvisor_hardened_core::egress::{EgressSupervisor, ForwarderState, Proxy, SupervisorOptions};
use gvisor_hardened_tests::egress::{busybox_spec, egress_section, RunscSandbox, UpstreamNetns};
use policy_injector::{harden, harden_process, Context, EgressPlan, Policy};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);
const UPSTREAM_BODY: &str = "hello from upstream";
const POD_NETNS_BODY: &str = "hello from the pod netns";

fn policy(ns: &UpstreamNetns) -> Policy {
    let src = egress_section(
        &["upstream.example.test:8080", "podlocal.example.test:8081"],
        &[
            ("upstream.example.test", ns.inside_addr()),
            ("podlocal.example.test", "127.0.0.1".into()),
        ],
        &[ns.cidr(), "127.0.0.1/32".into()],
    );
    Policy::from_toml_str(&src).unwrap()
}

/// A tool call of the workload: `sh -c script` as the workload's user, hardened like an Exec.
fn workload(policy: &Policy, script: &str) -> Value {
    let p = json!({"args": ["/bin/sh", "-c", script], "env": ["PATH=/bin"], "cwd": "/",
                   "user": {"uid": 65534, "gid": 65534}});
    harden_process(&p, policy, &Context::default())
        .unwrap()
        .process
}

fn sh(sb: &RunscSandbox, policy: &Policy, script: &str) -> (i32, String) {
    let out = sb.exec(&workload(policy, script), WAIT).unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

struct Host {
    rt: tokio::runtime::Runtime,
    sink: Arc<MemorySink>,
}

impl Host {
    fn supervise(
        &self,
        plan: &EgressPlan,
        sb: &RunscSandbox,
        netns: Option<std::path::PathBuf>,
    ) -> EgressSupervisor {
        let _enter = self.rt.enter();
        let proxy = Proxy::new(
            plan.clone(),
            Guard::new(plan.allow_cidrs.clone(), node_addresses().unwrap()),
            SandboxRef {
                sandbox_id: sb.id.clone(),
                container_id: sb.id.clone(),
                policy: "egress-test".into(),
            },
            Arc::new(SystemResolver),
            Arc::new(NetnsDialer::new(netns, Duration::from_secs(5))),
            self.sink.clone(),
        );
        let spawner = RunscExec {
            runsc: gvisor_hardened_tests::stack::bin("runsc").unwrap(),
            global_args: sb.global.iter().map(Into::into).collect(),
            container_id: sb.id.clone(),
            state_dir: sb.state_dir(),
            process: plan.forwarder_process(),
            // This test process waits for its own children; the shim passes its reaper.
            reaper: None,
        };
        // The sandbox runs for the whole test: every forwarder end here is a death.
        EgressSupervisor::start(
            Arc::new(proxy),
            Arc::new(spawner),
            SupervisorOptions::default(),
            Arc::new(|| true),
        )
    }
}

fn forwarder_pid(sb: &RunscSandbox) -> String {
    std::fs::read_to_string(sb.state_dir().join("forwarder.pid"))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn a_sandbox_reaches_allowlisted_hosts_through_the_forwarder_and_nothing_else() {
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", UPSTREAM_BODY.as_bytes())])
        .unwrap();
    ns.serve(
        "127.0.0.1",
        8081,
        &[("hello.txt", POD_NETNS_BODY.as_bytes())],
    )
    .unwrap();
    // A live host unix socket inside an allowed (read-only) bind mount, mode 0666 so only the
    // runtime can keep the workload from it.
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("live.sock");
    let host_sock = std::os::unix::net::UnixListener::bind(&sock_path).unwrap();
    host_sock.set_nonblocking(true).unwrap();
    std::fs::set_permissions(
        &sock_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let mut spec = busybox_spec();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/hostsock", "type": "bind",
        "source": sock_dir.path(), "options": ["rbind", "ro"]
    }));
    let policy = policy(&ns);
    let h = harden(&spec, &policy, &Context::default()).unwrap();
    let plan = h.egress.clone().expect("egress is on");
    let mut flags = Vec::new();
    if h.runsc.oci_seccomp {
        flags.push("--oci-seccomp".to_string());
    }
    let sb = RunscSandbox::create("egress", &h.spec, &flags).unwrap();

    // Measured: runsc refuses exec in a created, not started container, so the forwarder
    // can only take its port after the workload started.
    let early = sb.exec(&plan.forwarder_process(), WAIT).unwrap();
    let early_err = String::from_utf8_lossy(&early.stderr).to_string();
    assert!(!early.status.success());
    assert!(early_err.contains("not started"), "{early_err}");
    eprintln!(
        "MEASURE exec before start: rc={:?} {}",
        early.status.code(),
        early_err.trim()
    );

    sb.start().unwrap();
    let host = Host {
        rt: tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
        sink: Arc::new(MemorySink::default()),
    };
    let t0 = Instant::now();
    let sup = host.supervise(&plan, &sb, None);
    let listen = host.rt.block_on(sup.wait_ready(WAIT)).unwrap();
    assert_eq!(listen, "127.0.0.1:3128");
    eprintln!(
        "MEASURE forwarder ready (runsc exec + HELLO): {:?}",
        t0.elapsed()
    );

    // Plain HTTP through the proxy variables the hardening injected.
    let (rc, out) = sh(
        &sb,
        &policy,
        "wget -q -O- http://upstream.example.test:8080/hello.txt",
    );
    assert_eq!((rc, out.trim()), (0, UPSTREAM_BODY), "{out}");
    // A CONNECT tunnel, spoken by hand.
    let (_, out) = sh(
        &sb,
        &policy,
        r"printf 'CONNECT upstream.example.test:8080 HTTP/1.1\r\n\r\nGET /hello.txt HTTP/1.0\r\n\r\n' | nc 127.0.0.1 3128",
    );
    assert!(
        out.starts_with("HTTP/1.1 200 Connection established"),
        "{out}"
    );
    assert!(out.contains(UPSTREAM_BODY), "{out}");
    // Refused, with words an agent can act on.
    let (_, out) = sh(
        &sb,
        &policy,
        r"printf 'CONNECT evil.test:443 HTTP/1.1\r\n\r\n' | nc 127.0.0.1 3128",
    );
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(
        out.contains("egress denied: host evil.test is not in the allowlist of policy egress-test"),
        "{out}"
    );
    // No way around the proxy: the upstream's address is unreachable directly.
    let (rc, out) = sh(&sb, &policy, &format!("nc -w 2 {inside} 8080 </dev/null"));
    assert_ne!(rc, 0, "direct connection worked: {out}");

    // Egress on opens no other way out: the host socket in the bind mount stays unreachable.
    let (_, out) = sh(
        &sb,
        &policy,
        "sandbox-probe connect-unix /hostsock/live.sock",
    );
    assert!(
        !out.starts_with("ok"),
        "connected to a host unix socket: {out}"
    );
    assert!(
        host_sock.accept().is_err(),
        "the host socket accepted a connection"
    );
    eprintln!("MEASURE host unix socket in a ro bind: {}", out.trim());

    // The workload (uid 65534, empty capability sets) cannot kill the forwarder or take its port.
    let pid = forwarder_pid(&sb);
    let (rc, out) = sh(&sb, &policy, &format!("kill -9 {pid}"));
    assert_ne!(rc, 0, "{out}");
    assert!(out.contains("not permitted"), "{out}");
    eprintln!("MEASURE workload kill -9 forwarder: rc={rc} {}", out.trim());
    let (_, out) = sh(&sb, &policy, &format!("sandbox-probe ptrace-attach {pid}"));
    assert!(
        !out.starts_with("ok"),
        "the workload attached to the forwarder: {out}"
    );
    let (rc, out) = sh(
        &sb,
        &policy,
        "cat /bin/busybox > /.gvisor-hardened/forwarder",
    );
    assert_ne!(rc, 0, "the workload replaced the forwarder: {out}");
    eprintln!("MEASURE workload ptrace/replace forwarder: {}", out.trim());
    let (rc, out) = sh(&sb, &policy, "nc -l -p 3128 -w 1 </dev/null");
    assert_ne!(rc, 0, "the workload bound the forwarder's port: {out}");
    assert!(
        matches!(sup.state(), ForwarderState::Ready { attempt: 1, .. }),
        "{:?}",
        sup.state()
    );

    // Killed from the host (`runsc kill --pid`): the supervisor sees it, audits, restarts.
    let t1 = Instant::now();
    sb.runsc(&["kill", "--pid", &pid, &sb.id, "KILL"]).unwrap();
    let down = host
        .rt
        .block_on(sup.wait_for(WAIT, |s| {
            !matches!(s, ForwarderState::Ready { attempt: 1, .. })
        }))
        .unwrap();
    let noticed = t1.elapsed();
    let ready = host
        .rt
        .block_on(sup.wait_for(WAIT, |s| {
            matches!(s, ForwarderState::Ready { attempt: 2, .. })
        }))
        .unwrap();
    eprintln!(
        "MEASURE runsc kill --pid: host noticed in {noticed:?} ({down:?}); ready again after {:?} ({ready:?})",
        t1.elapsed()
    );
    let died: Vec<String> = host
        .sink
        .events()
        .into_iter()
        .filter_map(|e| match e {
            EgressEvent::ForwarderDied { reason, .. } => Some(reason),
            _ => None,
        })
        .collect();
    assert_eq!(died.len(), 1, "{died:?}");
    eprintln!("MEASURE death reason: {}", died[0]);
    let (rc, out) = sh(
        &sb,
        &policy,
        "wget -q -O- http://upstream.example.test:8080/hello.txt",
    );
    assert_eq!((rc, out.trim()), (0, UPSTREAM_BODY), "after restart: {out}");
    host.rt.block_on(sup.stop());

    // Dialing from a network namespace: the pod's loopback server is only there.
    let sup = host.supervise(&plan, &sb, Some(ns.path()));
    host.rt.block_on(sup.wait_ready(WAIT)).unwrap();
    let (rc, out) = sh(
        &sb,
        &policy,
        "wget -q -O- http://podlocal.example.test:8081/hello.txt",
    );
    assert_eq!((rc, out.trim()), (0, POD_NETNS_BODY), "{out}");
    host.rt.block_on(sup.stop());

    let conns: Vec<_> = host.sink.connections();
    let verdicts: Vec<(String, Verdict)> = conns
        .iter()
        .map(|c| (format!("{}:{}", c.host, c.port), c.verdict))
        .collect();
    assert!(
        verdicts.contains(&("evil.test:443".into(), Verdict::Denied)),
        "{verdicts:?}"
    );
    let allowed = conns
        .iter()
        .filter(|c| c.verdict == Verdict::Allowed && c.host == "upstream.example.test")
        .count();
    assert_eq!(allowed, 3, "{verdicts:?}");
    assert!(conns
        .iter()
        .all(|c| c.verdict != Verdict::Allowed || c.bytes_down > 0));
}
