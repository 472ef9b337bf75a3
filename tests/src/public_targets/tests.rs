use super::*;

fn flagged(line: &str) -> bool {
    !scan_line(line).is_empty()
}

#[test]
fn public_and_foreign_addresses_are_flagged() {
    for line in [
        // Documentation addresses (RFC 5737): never routed, and still outside the machine.
        r#"&["connect", "198.51.100.1", "80", "2000"]"#,
        "nslookup gvh.test 198.51.100.53",
        "connect 192.168.1.10 22 500",
        "addr add 10.0.0.1/24 dev eth1",
        // This machine's own uplink address is still outside: only veths the test made count.
        "sandbox-probe connect 192.0.2.2 443 1000",
        "let target = \"203.0.113.7:80\";",
        "10.212.255.1 is just below the netns range",
        "10.215.0.1 is just above the egress upstreams' range",
    ] {
        assert!(flagged(line), "{line}");
    }
}

#[test]
fn public_host_names_are_flagged() {
    for line in [
        "nslookup example.com",
        "let url = \"agents.example.com\";",
        "ping -c1 google.com",
        "dig @127.0.0.1 gvisor.dev",
        "dig @ns1.dns-host.net gvh.test",
        "wget -q http://deb.debian.org/debian",
        "curl -sSf https://registry.npmjs.org/x",
        "nc -z some.host.net 443",
        "one.one.one.one",
    ] {
        assert!(flagged(line), "{line}");
    }
}

#[test]
fn the_harness_own_targets_and_non_targets_pass() {
    for line in [
        "TcpListener::bind(\"127.0.0.1:0\")",
        "bind 0.0.0.0:0",
        "connect 10.213.4.2 40123 2000",
        "a veth pair on a /30 of 10.214.0.0/16",
        "\"subnet\": \"10.129.35.0/24\"",
        "nslookup gvh-dns-probe.test 10.213.0.2",
        "nslookup gvh-dns-probe.test",
        "format!(\"http://127.0.0.1:{port}\")",
        "Endpoint::try_from(\"http://[::]:50051\")",
        "format!(\"http://{addr}\")",
        "xmlns=\"http://www.w3.org/2000/svg\"",
        "runsc 0.0~20221219.0 (gVisor release 20221219)",
        "release v1.2.3.4",
        "nc -l localhost 8080",
        "curl http://api.invalid/",
        "\"podCIDR\": \"10.0.0.0/24\"  // net-scan: data",
        "ping the server before the test",
        "/var/run/secrets/eks.amazonaws.com/serviceaccount",
    ] {
        assert!(!flagged(line), "{line}: {:?}", scan_line(line));
    }
}

#[test]
fn findings_name_file_line_and_reason() {
    let f = scan_text("x.rs", "fine\nconnect 198.51.100.9 53 1\n");
    assert_eq!(f.len(), 1);
    assert_eq!(
        f[0].to_string(),
        "x.rs:2: IPv4 address 198.51.100.9 is outside 127.0.0.0/8 and the harness's own networks"
    );
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn scanned_files_cover_tests_demo_and_benches() {
    let files = scanned_files(&repo());
    for f in [
        "tests/src/attacks/network.rs",
        "tests/tests/integration/shim_hardening.rs",
        "tests/examples/demo.rs",
        "tests/examples/probe-matrix.rs",
        "tests/examples/bench/main.rs",
        "tests/probe/net.c",
        "hack/demo.sh",
        "hack/bench.sh",
        "hack/bench/runsc-replay-features",
        "deploy/installer/tests/admission_cel.rs",
        "policy-injector/benches/harden.rs",
        ".ci/run",
    ] {
        assert!(files.iter().any(|x| x == f), "{f} not scanned: {files:?}");
    }
    assert!(!files.iter().any(|x| x == "hack/lib.sh"));
}

#[test]
fn no_test_demo_or_bench_aims_outside_the_machine() {
    let findings = scan_repo(&repo());
    assert!(
        findings.is_empty(),
        "targets that are not the harness's own (use crate::netns):\n{}",
        findings
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}
