//! Egress through the whole runtime: a private containerd, `ctr run` with the hardened runtime
//! and a policy with an allowlist, real runsc, the real forwarder started by the shim inside the
//! sandbox, the shim's proxy. The upstream is a busybox httpd inside a network namespace the test
//! creates (veth pair), named through the policy's static `hosts` and allowed by `allow_cidrs`:
//! nothing leaves the machine.

use gvisor_hardened_tests::audit_tools::{policy_injector_audit, validate_against_schema};
use gvisor_hardened_tests::egress::{hostile_names_section, UpstreamNetns};
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
    assert!(line(text, "direct").contains("EHOSTUNREACH"), "{text}");
    // The workload (uid 65534, no capabilities) can neither stop the forwarder (uid 65532) nor
    // take its port: it started only once the forwarder listened.
    assert!(
        line(text, "kill-forwarder").contains("not permitted"),
        "{text}"
    );
    assert!(line(text, "take-port").contains("EADDRINUSE"), "{text}");
    assert!(line(text, "still-allowed").ends_with(BODY), "{text}");

    // One audit record per connection, with the verdict and the rule or reason.
    let records = policy.audit_lines();
    let connections: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "egress-connection" && r["container_id"] == id.as_str())
        .collect();
    let of = |host: &str| {
        connections
            .iter()
            .filter(|r| r["host"] == host)
            .map(|r| r["verdict"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        of("upstream.example.test"),
        ["allowed", "denied", "allowed"],
        "{connections:?}"
    );
    assert_eq!(of("elsewhere.example.test"), ["denied"]);
    assert_eq!(of("metadata.example.test"), ["denied"]);
    let metadata = connections
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
    // The log, egress records included, is one intact chain and every record fits the schema.
    let path = policy.audit_path.display().to_string();
    let verify = policy_injector_audit(&["verify", &path]).unwrap();
    assert!(verify.status.success(), "{verify:?}");
    validate_against_schema(&[&policy.audit_path]).unwrap();

    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}
