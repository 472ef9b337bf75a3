//! Egress from a claimed sandbox. A warm sandbox boots before its pod's network namespace
//! exists; the claim starts the pod's forwarder in it, and the proxy must dial from the pod's
//! own namespace, as for a cold pod (`egress_cri`).

use std::time::Duration;

use gvisor_hardened_tests::egress::{egress_section, PodLocalServer};

use super::*;

const BODY: &str = "hello from the claimed pod's own network namespace";

#[test]
fn a_claimed_sandbox_reaches_the_allowlist_from_the_pods_netns_and_nothing_else() {
    let egress = egress_section(
        &["podlocal.example.test:8081"],
        &[("podlocal.example.test", "127.0.0.1".into())],
        &["127.0.0.1/32".into()],
    );
    let policy = pooled(
        &format!("version = 1\n{egress}"),
        "size = 1\nrefill_per_minute = 600",
    );
    let cri = CriContainerd::start(CriOptions {
        policies: vec![(HARDENED_HANDLER.to_string(), policy)],
        ..CriOptions::with_shim(shim_binary().unwrap())
    })
    .unwrap();
    let (cold, ready, key) = filled(&cri, HARDENED_HANDLER, 1);
    let taken = ready[0]["id"].as_str().unwrap().to_string();
    let pod = cri.run_pod("warm", HARDENED_HANDLER).unwrap();
    assert_eq!(
        cri.pool_claim_of(&pod.id)
            .map(|c| c["pool"]["sandbox"].clone()),
        Some(serde_json::json!(taken)),
        "the pod did not claim the warm sandbox"
    );
    // The upstream listens on the loopback of the pod's namespace only.
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("hello.txt"), BODY).unwrap();
    let _server = PodLocalServer::start(pod.netns.as_deref().expect("a pod netns"), www.path());
    let app = cri.run_container(&pod, &sleeper("app")).unwrap();

    let fetch = |host: &str| {
        let url = format!("http://{host}:8081/hello.txt");
        cri.client()
            .exec_sync(&app, &["wget", "-q", "-O", "-", &url], 20)
            .unwrap()
    };
    let allowed = fetch("podlocal.example.test");
    assert!(allowed.success() && allowed.stdout == BODY, "{allowed}");
    let refused = fetch("elsewhere.example.test");
    assert!(!refused.success(), "{refused}");
    assert!(refused.stderr.contains("403"), "{refused}");

    // One forwarder, started for the pod (not for the warm sandbox), and each connection
    // filed under the pod with its verdict.
    let verdicts = poll_until("a record per connection", Duration::from_secs(20), || {
        let found: Vec<(String, String)> = records(&cri, "egress-connection")
            .iter()
            .filter(|r| r["sandbox_id"] == pod.id.as_str())
            .map(|r| {
                let text = |k: &str| r[k].as_str().unwrap_or_default().to_string();
                (text("host"), text("verdict"))
            })
            .collect();
        (found.len() == 2).then_some(found)
    })
    .unwrap_or_else(|e| panic!("{e}: {:#?}", records(&cri, "egress-connection")));
    assert_eq!(
        verdicts,
        [
            ("podlocal.example.test".to_string(), "allowed".to_string()),
            ("elsewhere.example.test".to_string(), "denied".to_string()),
        ]
    );
    let ready_records = records(&cri, "egress-forwarder-ready");
    let for_pod: Vec<_> = ready_records
        .iter()
        .filter(|r| r["container_id"] == pod.id.as_str())
        .collect();
    assert_eq!(for_pod.len(), 1, "{ready_records:#?}");
    assert!(
        ready_records
            .iter()
            .all(|r| r["container_id"] != taken.as_str()),
        "a forwarder ran for the warm sandbox itself: {ready_records:#?}"
    );

    remove_pods(&cri, &[(pod, vec![app]), (cold, vec![])]);
    assert_warm_sandbox_gone(&cri, &key, &taken);
    let left = ids_of(&wait_ready(&cri, HARDENED_HANDLER, 1));
    drain_and_check(&cri, &key, &left);
    assert_clean_cri_shutdown(cri);
}
