//! Egress for a pod through CRI: the pod's sandbox container runs the one forwarder, the pod's
//! containers share it, and the proxy dials from the pod's own network namespace (CNI's), so the
//! pod IP and NetworkPolicies still apply. The upstream is a busybox httpd on the loopback of
//! the pod's network namespace, which only a dial from inside that namespace can reach.

use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::egress::{egress_section, probe_counts, PodLocalServer};
use gvisor_hardened_tests::{shim_binary, TEST_IMAGE_REF};

const BODY: &str = "hello from the pod's own network namespace";

#[test]
fn a_pods_containers_share_one_forwarder_and_the_proxy_dials_from_the_pods_netns() {
    // The section ends inside [network.egress]: the pod's cap goes there (a rate the flood
    // below does not meet, so its counts are exact).
    let policy = format!(
        "version = 1\n{}max_connections = 20\nmax_connection_rate = 4000\n",
        egress_section(
            &["podlocal.example.test:8081"],
            &[("podlocal.example.test", "127.0.0.1".into())],
            &["127.0.0.1/32".into()],
        )
    );
    let cri = CriContainerd::start(CriOptions {
        policies: vec![(HARDENED_HANDLER.to_string(), policy)],
        ..CriOptions::with_shim(shim_binary().unwrap())
    })
    .unwrap();
    let pod = cri.run_pod("egress", HARDENED_HANDLER).unwrap();
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("hello.txt"), BODY).unwrap();
    let _server = PodLocalServer::start(pod.netns.as_deref().expect("a pod netns"), www.path());

    let fetch = "wget -q -O - http://podlocal.example.test:8081/hello.txt";
    let mut ids = Vec::new();
    for name in ["first", "second"] {
        let config = container_config(name, TEST_IMAGE_REF, &["sleep", "600"]);
        ids.push(cri.run_container(&pod, &config).unwrap());
    }
    for id in &ids {
        let out = cri
            .client()
            .exec_sync(id, &["sh", "-c", fetch], 20)
            .unwrap();
        assert!(out.success() && out.stdout == BODY, "{id}: {out}");
    }

    // A flood from the first container meets the pod's cap: 100 connections held open at
    // once, 20 tunnels, the rest answered 503 or closed at once by the forwarder, none silent.
    let flood = "exec sandbox-probe http-flood \"$https_proxy\" podlocal.example.test 8081 100 20";
    let out = cri
        .client()
        .exec_sync(&ids[0], &["sh", "-c", flood], 60)
        .unwrap();
    assert!(out.success(), "{out}");
    eprintln!("flood through a CRI pod: {}", out.stdout.trim());
    assert!(out.stdout.starts_with("ok "), "{out}");
    let counts = probe_counts(&out.stdout);
    assert_eq!(counts["s200"], 20, "{out}");
    assert_eq!(
        (counts["silent"], counts["unconnected"], counts["other"]),
        (0, 0, 0),
        "{out}"
    );
    assert_eq!(
        counts["s200"] + counts["s503"] + counts["s429"] + counts["closed"],
        100,
        "{out}"
    );

    // One forwarder for the pod, in its sandbox container; both containers' connections went
    // through it and are filed under the sandbox. The flood's tunnels are recorded as they
    // close, after the exec returned: every connection's record is waited for.
    let read_audit = || -> Vec<serde_json::Value> {
        cri.audit_log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let audit = gvisor_hardened_tests::poll_until(
        "a record for every connection",
        std::time::Duration::from_secs(30),
        || {
            let audit = read_audit();
            let n = audit
                .iter()
                .filter(|r| r["event"] == "egress-connection")
                .count();
            (n >= 2 + 100).then_some(audit)
        },
    )
    .unwrap();
    let ready: Vec<_> = audit
        .iter()
        .filter(|r| r["event"] == "egress-forwarder-ready")
        .collect();
    assert_eq!(ready.len(), 1, "{ready:?}");
    assert_eq!(ready[0]["container_id"], pod.id.as_str());
    let allowed = audit
        .iter()
        .filter(|r| {
            r["event"] == "egress-connection"
                && r["verdict"] == "allowed"
                && r["sandbox_id"] == pod.id.as_str()
        })
        .count();
    assert_eq!(allowed, 2 + 20);
    let by_rule = |rule: &str| {
        audit
            .iter()
            .filter(|r| r["event"] == "egress-connection" && r["rule"] == rule)
            .count()
    };
    assert_eq!(by_rule("max-connections"), counts["s503"]);
    assert_eq!(by_rule("forwarder-limit"), counts["closed"]);
    cri.remove_pod(&pod).unwrap();
}
