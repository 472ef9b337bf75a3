//! Egress through the whole runtime: a private containerd, `ctr run` with the hardened runtime
//! and a policy with an allowlist, real runsc, the real forwarder started by the shim inside the
//! sandbox, the shim's proxy. The upstream is a busybox httpd inside a network namespace the test
//! creates (veth pair), named through the policy's static `hosts` and allowed by `allow_cidrs`:
//! nothing leaves the machine.

use gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema;
use gvisor_hardened_tests::egress::{
    egress_section, hostile_names_section, Connections, UpstreamNetns,
};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;

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
