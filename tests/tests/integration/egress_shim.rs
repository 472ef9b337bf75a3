//! Egress through the whole runtime: a private containerd, `ctr run` with the hardened runtime
//! and a policy with an allowlist, real runsc, the real forwarder started by the shim inside the
//! sandbox, the shim's proxy. The upstream is a busybox httpd inside a network namespace the test
//! creates (veth pair), named through the policy's static `hosts` and allowed by `allow_cidrs`:
//! nothing leaves the machine.

use gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema;
use gvisor_hardened_tests::egress::{
    egress_section, hostile_names_section, on_default_forwarder, probe_counts, Connections,
    UpstreamNetns,
};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::inspect;
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::*;
use std::time::Duration;

const BODY: &str = "hello through the allowlist";

fn policy(c: &Containerd, ns: &UpstreamNetns) -> TestPolicy {
    TestPolicy::builder(c, "egress")
        .extra(&hostile_names_section(ns))
        .write()
        .unwrap()
}

/// One line per step: what ran, what it printed (first line), its status.
const SCRIPT: &str = r#"
step() { name=$1; shift; out=$("$@" 2>&1); echo "$name rc=$? $(echo "$out" | head -1)"; }
step allowed wget -q -O - http://upstream.example.test:8080/hello.txt
step not-listed wget -q -O - http://elsewhere.example.test:8080/x
step other-port wget -q -O - http://upstream.example.test:9090/x
step metadata wget -q -O - http://metadata.example.test:8080/x
step direct sandbox-probe connect UPSTREAM 8080 2000
step kill-forwarder kill -9 $(pidof forwarder)
step take-port sandbox-probe bind 3128
step still-allowed wget -q -O - http://upstream.example.test:8080/hello.txt
"#;

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{name} rc=")))
        .unwrap_or_else(|| panic!("no {name} step in:\n{out}"))
}

#[test]
fn a_ctr_container_reaches_allowlisted_hosts_through_the_shims_proxy_and_nothing_else() {
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", BODY.as_bytes())])
        .unwrap();
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let policy = policy(&c, &ns);
    let id = unique_id("egress");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh(SCRIPT.replace("UPSTREAM", &inside)),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let text = out.stdout.as_str();
    assert!(line(text, "allowed").ends_with(BODY), "{text}");
    for refused in ["not-listed", "other-port", "metadata"] {
        assert!(line(text, refused).contains("403"), "{refused}: {text}");
    }
    assert!(
        gvisor_hardened_tests::stack::mentions_no_route(line(text, "direct")),
        "{text}"
    );
    // The workload (uid 65534, no capabilities) can neither stop the forwarder (uid 65532) nor
    // take its port: it started only once the forwarder listened.
    assert!(
        line(text, "kill-forwarder").contains("not permitted"),
        "{text}"
    );
    assert!(line(text, "take-port").contains("EADDRINUSE"), "{text}");
    assert!(line(text, "still-allowed").ends_with(BODY), "{text}");

    // One audit record per connection, with the verdict and the rule or reason.
    let connections = Connections::of(&policy.audit_lines(), &id);
    let of = |host: &str| connections.verdicts(host);
    assert_eq!(
        of("upstream.example.test"),
        ["allowed", "denied", "allowed"],
        "{connections:?}"
    );
    assert_eq!(of("elsewhere.example.test"), ["denied"]);
    assert_eq!(of("metadata.example.test"), ["denied"]);
    let metadata = connections
        .0
        .iter()
        .find(|r| r["host"] == "metadata.example.test")
        .unwrap();
    assert!(
        metadata["reason"]
            .as_str()
            .unwrap()
            .contains("egress denied"),
        "{metadata}"
    );
    let events = policy.audit_events(&id);
    assert!(
        events.contains(&"egress-forwarder-ready".to_string()),
        "{events:?}"
    );
    // The forwarder ended with its sandbox: that is the exit, not a forwarder death.
    assert!(
        !events.contains(&"egress-forwarder-died".to_string()),
        "{events:?}"
    );
    // The log, egress records included, is one intact chain and every record fits the schema.
    assert_chain_intact_and_records_fit_the_schema(&policy.audit_path);

    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}

/// The second half of the refusals: a listed name that resolves to a private address outside
/// `allow_cidrs` (a live server in a second namespace of the test's own, which must see nothing),
/// and the sandbox's byte cap: the download that crosses it is cut, later requests are refused
/// with the reason, and the crossing is audited once.
#[test]
fn a_private_address_outside_allow_cidrs_and_the_byte_cap_are_refused_and_audited() {
    const CAP: usize = 64 * 1024;
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    let big = vec![b'x'; 4 * CAP];
    ns.serve(
        &inside,
        8080,
        &[("hello.txt", BODY.as_bytes()), ("big.bin", &big)],
    )
    .unwrap();
    let mut other = UpstreamNetns::create().unwrap();
    let other_addr = other.inside_addr();
    other
        .serve(&other_addr, 8080, &[("secret.txt", b"must not be reached")])
        .unwrap();
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    // The section ends inside [network.egress]: the cap goes there.
    let section = format!(
        "{}max_bytes = \"{}\"\n",
        egress_section(
            &["upstream.example.test:8080", "private.example.test:8080"],
            &[
                ("upstream.example.test", inside.clone()),
                ("private.example.test", other_addr.clone()),
            ],
            &[ns.cidr()],
        ),
        CAP
    );
    let policy = TestPolicy::builder(&c, "egress-cap")
        .extra(&section)
        .write()
        .unwrap();
    let id = unique_id("egress-cap");
    let script = r#"
step() { name=$1; shift; out=$("$@" 2>&1); echo "$name rc=$? $(echo "$out" | head -1)"; }
step private wget -q -O - http://private.example.test:8080/secret.txt
step small wget -q -O - http://upstream.example.test:8080/hello.txt
step big sh -c 'wget -q -O - http://upstream.example.test:8080/big.bin 2>/dev/null | wc -c'
step after wget -q -O - http://upstream.example.test:8080/hello.txt
"#;
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .sh(script.to_string()),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let text = out.stdout.as_str();
    assert!(line(text, "private").contains("403"), "{text}");
    assert!(!text.contains("must not be reached"), "{text}");
    assert!(line(text, "small").ends_with(BODY), "{text}");
    let got: usize = line(text, "big")
        .rsplit(' ')
        .next()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no byte count: {text}"));
    assert!(
        got < big.len(),
        "the download past the cap was not cut: {text}"
    );
    assert!(line(text, "after").contains("403"), "{text}");

    let records: Vec<_> = policy
        .audit_lines()
        .into_iter()
        .filter(|r| r["container_id"] == id.as_str())
        .collect();
    let private = records
        .iter()
        .find(|r| r["event"] == "egress-connection" && r["host"] == "private.example.test")
        .unwrap_or_else(|| panic!("no record for the private name: {records:?}"));
    assert_eq!(private["verdict"], "denied", "{private}");
    let reason = private["reason"].as_str().unwrap();
    assert!(reason.contains("a private address"), "{private}");
    assert!(reason.contains(&other_addr), "{private}");
    let crossings: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "egress-byte-cap-crossed")
        .collect();
    assert_eq!(crossings.len(), 1, "{records:?}");
    assert_eq!(crossings[0]["max_bytes"], CAP as u64, "{}", crossings[0]);
    let last = records
        .iter()
        .rfind(|r| r["event"] == "egress-connection" && r["host"] == "upstream.example.test")
        .unwrap();
    assert_eq!(last["verdict"], "denied", "{last}");
    assert!(
        last["reason"].as_str().unwrap().contains("byte cap"),
        "{last}"
    );
    assert_chain_intact_and_records_fit_the_schema(&policy.audit_path);

    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}

/// A detached `sleep` sandbox with egress to `host`:8080 (the upstream namespace's inside
/// address), its shim's pid, once the forwarder listens: the two abuse cases below share it.
struct Detached {
    c: Containerd,
    policy: TestPolicy,
    id: String,
    shim: i32,
}

impl Detached {
    fn start(name: &str, host: &str, ns: &UpstreamNetns, extra: &str) -> Detached {
        let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
        let image = TestImage::ensure().unwrap();
        c.import(&image).unwrap();
        // The section ends inside [network.egress]: `extra` goes there.
        let section = format!(
            "{}{extra}",
            egress_section(
                &[&format!("{host}:8080")],
                &[(host, ns.inside_addr())],
                &[ns.cidr()],
            ),
        );
        let policy = TestPolicy::builder(&c, name)
            .extra(&section)
            .write()
            .unwrap();
        let id = unique_id(name);
        c.ctr()
            .args(
                Run::new(image.reference(), &id)
                    .runtime(policy.runtime())
                    .detach()
                    .cmd(["sleep", "600"])
                    .ctr_args_for(&c),
            )
            .checked()
            .unwrap();
        let shim = gvisor_hardened_tests::fault::shim_pid(&c, &id).unwrap();
        // The forwarder is up (its record is written once it said HELLO) before any baseline.
        poll_until("the forwarder ready", Duration::from_secs(30), || {
            policy
                .audit_events(&id)
                .contains(&"egress-forwarder-ready".to_string())
                .then_some(())
        })
        .unwrap();
        Detached {
            c,
            policy,
            id,
            shim,
        }
    }

    /// The sandbox's proxy process (the shim's child named `gvh-egress`), once there is one.
    fn proxy(&self) -> i32 {
        poll_until("the proxy process", Duration::from_secs(30), || {
            inspect::children_named(self.shim, "gvh-egress")
                .first()
                .copied()
        })
        .unwrap()
    }

    /// The host side of egress: the shim and its proxy process, where connections live.
    fn host_side(&self) -> Vec<i32> {
        let mut pids = vec![self.shim];
        pids.extend(inspect::children_named(self.shim, "gvh-egress"));
        pids
    }

    /// Descriptors held by the shim and its proxy process.
    fn fds(&self) -> usize {
        self.host_side()
            .into_iter()
            .filter_map(inspect::fd_count)
            .sum()
    }

    /// Resident anonymous memory (heap, stacks: where connection buffers live) of the shim and
    /// its proxy process. Code is file-backed and comes and goes with use (the shim drops its
    /// code mappings after Start, `shim/core/src/text_pages.rs`), so total RSS would count code
    /// as a leak.
    fn anon_kib(&self) -> u64 {
        self.host_side()
            .into_iter()
            .filter_map(|pid| inspect::status_field(pid, "RssAnon"))
            .filter_map(|v| v.trim_end_matches("kB").trim().parse::<u64>().ok())
            .sum()
    }

    /// Runs `script` with `sh -c` as an exec in the sandbox.
    fn exec(&self, script: &str) -> CommandOutput {
        self.c
            .exec(&self.id, &[], ["sh", "-c", script])
            .checked()
            .unwrap()
    }

    /// The sandbox's connection records once there are `n` (written as connections end).
    fn records(&self, n: usize, within: Duration) -> Connections {
        let records = poll_until("a record for every connection", within, || {
            let conns = Connections::of(&self.policy.audit_lines(), &self.id);
            (conns.0.len() >= n).then_some(conns)
        })
        .unwrap();
        assert_eq!(records.0.len(), n, "{records:?}");
        records
    }

    /// Polls until the shim holds no more descriptors than `baseline`.
    fn back_at(&self, baseline: usize, within: Duration) {
        poll_until("the shim back at its descriptors", within, || {
            (self.fds() <= baseline).then_some(())
        })
        .unwrap_or_else(|e| panic!("{e}: {} descriptors, {baseline} before", self.fds()));
    }

    fn finish(self) {
        gvisor_hardened_tests::fault::kill_and_remove(&self.c, &self.id, Duration::from_secs(60))
            .unwrap();
        assert_chain_intact_and_records_fit_the_schema(&self.policy.audit_path);
        assert_nothing_left(&self.c, &self.id, &self.policy.runtime());
        assert_clean_shutdown(self.c);
    }
}

/// A flood from inside: a workload opens 200 connections to the proxy at once and keeps them
/// all open. The policy allows 20 at a time; past them the proxy answers 503 with the cap in
/// the status line, and past twice that the forwarder closes new ones at once. Every
/// connection is answered (none waits on a forwarder that stopped accepting), every one has its
/// record, and once the workload is done the shim holds no more descriptors than before.
#[test]
fn a_connection_flood_is_answered_in_full_audited_in_full_and_leaves_the_shim_as_it_was() {
    const N: usize = 200;
    const CAP: usize = 20;
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", BODY.as_bytes())])
        .unwrap();
    // The rate stays out of the way (its refusals are the fake world's to show: here the open
    // cap is met first).
    let s = Detached::start(
        "egress-flood",
        "upstream.example.test",
        &ns,
        &format!("max_connections = {CAP}\nmax_connection_rate = 4000\n"),
    );
    let baseline = s.fds();
    let out = s.exec(&format!(
        "exec sandbox-probe http-flood \"$https_proxy\" upstream.example.test 8080 {N} 20"
    ));
    eprintln!("flood: {}", out.stdout.trim());
    let counts = probe_counts(&out.stdout);
    let count = |k: &str| counts.get(k).copied().unwrap_or(usize::MAX);
    assert_eq!(count("silent"), 0, "connections nobody answered: {out}");
    assert_eq!(count("unconnected") + count("other"), 0, "{out}");
    assert_eq!(count("s200"), CAP, "{out}");
    assert!(count("s503") > 0, "the proxy never answered the cap: {out}");
    assert_eq!(
        count("s200") + count("s503") + count("s429") + count("closed"),
        N,
        "{out}"
    );

    // One record per connection, with the rule that decided it; the last ones are written as
    // the workload's exit closed its connections.
    let records = s.records(N, Duration::from_secs(30));
    let by_rule = |rule: &str| records.0.iter().filter(|r| r["rule"] == rule).count();
    assert_eq!(by_rule("upstream.example.test:8080"), CAP);
    assert_eq!(by_rule("max-connections"), count("s503"));
    assert_eq!(by_rule("forwarder-limit"), count("closed"));
    let refused = records
        .0
        .iter()
        .find(|r| r["rule"] == "max-connections")
        .unwrap();
    assert!(
        refused["reason"]
            .as_str()
            .unwrap()
            .contains("20 connections are open"),
        "{refused}"
    );

    // The shim holds what it held before the flood (refused streams linger at most 5 s).
    s.back_at(baseline, Duration::from_secs(30));
    eprintln!(
        "shim descriptors: {baseline} before the flood, {} after",
        s.fds()
    );
    s.finish();
}

/// An upstream that accepts and never reads: the workload opens 100 tunnels to it, uploads into
/// each until its writes would block (the proxy then holds an upload it cannot deliver on every
/// one), and exits. Its close does not reach the proxy (seen: the tunnels stayed until the
/// deadline; TCP queues its FIN behind the bytes nobody takes, so nothing tells). The write
/// deadline ends them: 30 s after the last byte moved the shim is back at its descriptors, every
/// tunnel has a `cut` record that says why, and `max_connections` bounds how many can be stuck
/// at once.
#[test]
fn uploads_stuck_on_a_stalled_upstream_are_cut_at_the_write_deadline_with_their_records() {
    const N: usize = 100;
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve_stalled(&inside, 8080).unwrap();
    let s = Detached::start(
        "egress-stall",
        "stalled.example.test",
        &ns,
        "max_connection_rate = 4000\n",
    );
    let (baseline, anon_before) = (s.fds(), s.anon_kib());
    let out = s.exec(&format!(
        "exec sandbox-probe http-stall \"$https_proxy\" stalled.example.test 8080 {N}"
    ));
    assert!(out.stdout.starts_with(&format!("ok tunnels={N} ")), "{out}");
    let ended = std::time::Instant::now();
    // The 30 s write deadline, and room for a loaded machine.
    s.back_at(baseline, Duration::from_secs(60));
    eprintln!(
        "stall: {}; shim descriptors {baseline} before, {} {:?} after the workload exited",
        out.stdout.trim(),
        s.fds(),
        ended.elapsed(),
    );
    let records = s.records(N, Duration::from_secs(15));
    // What the stuck uploads held (a window per stream) went back once the last one ended.
    let anon_after = poll_until(
        "the shim's memory back near where it was",
        Duration::from_secs(10),
        || {
            let now = s.anon_kib();
            (now <= anon_before + 4096).then_some(now)
        },
    )
    .unwrap_or_else(|e| {
        panic!(
            "{e}: anonymous {} KiB, {anon_before} KiB before",
            s.anon_kib()
        )
    });
    eprintln!(
        "stall: shim anonymous memory {anon_before} KiB before, {anon_after} KiB once the records were written"
    );
    for r in &records.0 {
        assert_eq!(r["verdict"], "cut", "{r}");
        assert!(r["bytes_up"].as_u64().unwrap() > 0, "{r}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .contains("the upstream took no data for 30 s"),
            "{r}"
        );
    }
    s.finish();
}

/// An upstream that accepts and never reads or answers: the workload sends a short request on
/// each of 50 tunnels and exits. Its close reaches the proxy (the request went whole), which
/// then waits on the silent upstream only for a short grace (5 s), not for the 300 s idle
/// deadline: the shim is back at its descriptors and every tunnel has its record well before
/// the idle deadline could have ended any (it used to hold all 50 for it, without a record).
#[test]
fn a_workload_that_sent_and_closed_releases_a_silent_upstream_with_its_records() {
    const N: usize = 50;
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve_stalled(&inside, 8080).unwrap();
    let s = Detached::start(
        "egress-close",
        "silent.example.test",
        &ns,
        "max_connection_rate = 4000\n",
    );
    let baseline = s.fds();
    let out = s.exec(&format!(
        "exec sandbox-probe http-send-close \"$https_proxy\" silent.example.test 8080 {N}"
    ));
    assert!(out.stdout.starts_with(&format!("ok tunnels={N} ")), "{out}");
    // Far below the idle deadline (300 s), with room for a loaded machine.
    s.back_at(baseline, Duration::from_secs(60));
    let records = s.records(N, Duration::from_secs(15));
    for r in &records.0 {
        assert_eq!(r["verdict"], "allowed", "{r}");
        // The CONNECT head and the 34-byte request.
        assert!(r["bytes_up"].as_u64().unwrap() > 34, "{r}");
        assert_eq!(r["bytes_down"], 0, "{r}");
    }
    s.finish();
}

/// Egress with nothing installed but the shim: the policy leaves `forwarder` unset, the
/// default path holds no forwarder (removed first; the runtime's own copy is what belongs
/// there), and the shim writes its embedded forwarder there before the sandbox is created.
#[test]
fn egress_needs_only_the_shim_which_writes_its_own_forwarder_to_the_default_path() {
    let default = std::path::Path::new(policy_injector::egress::DEFAULT_FORWARDER);
    match std::fs::remove_file(default) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("removing {}: {e}", default.display()),
    }
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", BODY.as_bytes())])
        .unwrap();
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let section = on_default_forwarder(&egress_section(
        &["upstream.example.test:8080"],
        &[("upstream.example.test", inside.clone())],
        &[ns.cidr()],
    ));
    let policy = TestPolicy::builder(&c, "egress-default-forwarder")
        .extra(&section)
        .write()
        .unwrap();
    let out = c
        .run_output(
            &Run::new(image.reference(), unique_id("fwd"))
                .runtime(policy.runtime())
                .sh("wget -q -O - http://upstream.example.test:8080/hello.txt"),
        )
        .unwrap();
    assert_eq!((out.code(), out.stdout.as_str()), (0, BODY), "{out}");
    let written = std::fs::read(default).unwrap();
    assert_eq!(
        written,
        std::fs::read(gvisor_hardened_tests::egress::forwarder_binary()).unwrap()
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(default).unwrap().permissions().mode() & 0o7777,
        0o755
    );
}

/// The proxy that parses what the sandbox sends is not the shim: a process of its own, child of
/// the shim, that runs as a uid of its own (not root), with every capability set empty,
/// `no_new_privs`, a seccomp filter, and in the sandbox's cgroups (its memory and tasks are
/// the pod's). Read from /proc while the sandbox runs; the shim itself stays root, and egress
/// works through the confined process.
#[test]
fn the_proxy_runs_apart_from_the_shim_without_root_or_capabilities_under_seccomp_in_the_sandboxs_cgroups(
) {
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve(&inside, 8080, &[("hello.txt", BODY.as_bytes())])
        .unwrap();
    let s = Detached::start("egress-confined", "upstream.example.test", &ns, "");
    let proxy = s.proxy();
    let field = |pid: i32, key: &str| inspect::status_field(pid, key).unwrap();
    // Control: the shim is root with capabilities, so the reads below can tell.
    assert!(
        field(s.shim, "Uid").starts_with("0\t"),
        "{}",
        field(s.shim, "Uid")
    );
    assert_ne!(field(s.shim, "CapEff"), "0000000000000000");
    let uid = field(proxy, "Uid");
    let ids: Vec<&str> = uid.split_whitespace().collect();
    assert_eq!(ids.len(), 4, "{uid}");
    assert!(ids.iter().all(|u| *u == ids[0] && *u != "0"), "Uid: {uid}");
    let gid = field(proxy, "Gid");
    assert!(gid.split_whitespace().all(|g| g == ids[0]), "Gid: {gid}");
    assert_eq!(field(proxy, "Groups"), "");
    for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(proxy, set), "0000000000000000", "{set}");
    }
    assert_eq!(field(proxy, "NoNewPrivs"), "1");
    assert_eq!(field(proxy, "Seccomp"), "2", "filter mode");
    // In the cgroups of the sandbox's own process (runsc's sandbox).
    let sandbox = gvisor_hardened_tests::fault::sandbox_pid(&s.c, &s.id).unwrap();
    for controller in ["memory", "pids", "cpu"] {
        let theirs = inspect::cgroup_of(sandbox, controller).unwrap();
        assert!(theirs.contains(&s.id), "{controller}: {theirs}");
        assert_eq!(
            inspect::cgroup_of(proxy, controller).unwrap(),
            theirs,
            "{controller}"
        );
    }
    // And egress works through it.
    let out = s.exec("wget -q -O - http://upstream.example.test:8080/hello.txt");
    assert!(out.stdout.ends_with(BODY), "{out}");
    s.finish();
}

/// A proxy process killed with connections open is contained: the shim carries on, every open
/// connection still gets its record (the shim writes those the process could not), the death
/// is recorded with its cause, a new process serves within the supervisor's backoff, and the
/// workload's next connection goes through.
#[test]
fn a_proxy_process_killed_with_connections_open_is_recorded_restarted_and_the_trail_stays_whole() {
    const N: usize = 3;
    let mut ns = UpstreamNetns::create().unwrap();
    let inside = ns.inside_addr();
    ns.serve_stalled(&inside, 8080).unwrap();
    let s = Detached::start("egress-killed", "stalled.example.test", &ns, "");
    let first = s.proxy();
    // N tunnels held open through the proxy (the upstream accepts and never answers).
    let mut hold = s.c.exec(
        &s.id,
        &[],
        [
            "sh",
            "-c",
            &format!(
                "exec sandbox-probe http-hold \"$https_proxy\" stalled.example.test 8080 {N} 120"
            ),
        ],
    );
    hold.command_mut()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut hold = hold.spawn().unwrap();
    let mut held = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(hold.stdout.as_mut().unwrap()),
        &mut held,
    )
    .unwrap();
    assert!(held.starts_with("ok"), "{held}");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &first.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    // The client only; what it ran inside ends with the sandbox.
    let _ = hold.kill();
    let _ = hold.wait();
    let died = poll_until("the death's record", Duration::from_secs(30), || {
        s.policy
            .audit_lines()
            .into_iter()
            .find(|l| l["event"] == "egress-forwarder-died" && l["container_id"] == s.id.as_str())
    })
    .unwrap();
    let reason = died["reason"].as_str().unwrap();
    assert!(
        reason.contains("egress proxy process") && reason.contains("signal: 9"),
        "{died}"
    );
    // Every tunnel that was open has its record, written by the shim for the dead process.
    let records = s.records(N, Duration::from_secs(15));
    for r in &records.0 {
        assert_eq!(r["verdict"], "cut", "{r}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .contains("egress proxy process"),
            "{r}"
        );
    }
    // A new process, and egress back through it.
    let second = poll_until("a new proxy process", Duration::from_secs(30), || {
        inspect::children_named(s.shim, "gvh-egress")
            .into_iter()
            .find(|&p| p != first)
    })
    .unwrap();
    assert!(!inspect::is_alive(first));
    poll_until("the forwarder ready again", Duration::from_secs(30), || {
        s.policy
            .audit_lines()
            .into_iter()
            .any(|l| l["event"] == "egress-forwarder-ready" && l["attempt"] == 2)
            .then_some(())
    })
    .unwrap();
    let out =
        s.exec("exec sandbox-probe http-send-close \"$https_proxy\" stalled.example.test 8080 1");
    assert!(out.stdout.starts_with("ok"), "{out}");
    assert_eq!(s.proxy(), second);
    assert!(inspect::is_alive(s.shim));
    s.finish();
}
