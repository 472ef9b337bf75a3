//! The node label client against a fake API server.

mod support;

use std::path::Path;

use gvisor_hardened_installer::kube::{KubeClient, KubeError};
use support::fake_api::FakeApi;

#[test]
fn label_is_a_merge_patch_of_only_our_label_with_the_token() {
    let api = FakeApi::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "s3cret\n").unwrap();
    let client = KubeClient::new(
        Some(api.url.clone()),
        &dir.path().join("token"),
        &dir.path().join("ca.crt"),
    )
    .unwrap();
    client
        .set_node_label("node-a", "gvisor-hardened.dev/installed", Some("true"))
        .unwrap();
    client
        .set_node_label("node-a", "gvisor-hardened.dev/installed", None)
        .unwrap();
    let reqs = api.recorded();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].method, "PATCH");
    assert_eq!(reqs[0].path, "/api/v1/nodes/node-a");
    assert_eq!(
        reqs[0].header("content-type"),
        Some("application/merge-patch+json")
    );
    assert_eq!(reqs[0].header("authorization"), Some("Bearer s3cret"));
    let set: serde_json::Value = serde_json::from_str(&reqs[0].body).unwrap();
    assert_eq!(
        set,
        serde_json::json!({"metadata":{"labels":{"gvisor-hardened.dev/installed":"true"}}})
    );
    let unset: serde_json::Value = serde_json::from_str(&reqs[1].body).unwrap();
    assert_eq!(
        unset,
        serde_json::json!({"metadata":{"labels":{"gvisor-hardened.dev/installed":null}}})
    );
    // The token never shows in Debug output.
    assert!(!format!("{client:?}").contains("s3cret"));
}

#[test]
fn forbidden_answer_is_a_status_error_with_the_body() {
    let api = FakeApi::start();
    api.answer_with(403);
    let client = KubeClient::new(
        Some(api.url.clone()),
        Path::new("/nonexistent/token"),
        Path::new("/nonexistent/ca.crt"),
    )
    .unwrap();
    let err = client
        .set_node_label("node-a", "gvisor-hardened.dev/installed", Some("true"))
        .unwrap_err();
    match &err {
        KubeError::Status { status, body, .. } => {
            assert_eq!(*status, 403);
            assert!(body.contains("forbidden"), "{body}");
        }
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn unreachable_api_is_an_http_error() {
    // Bind and drop to get a port with nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = KubeClient::new(
        Some(format!("http://127.0.0.1:{port}")),
        Path::new("/nonexistent/token"),
        Path::new("/nonexistent/ca.crt"),
    )
    .unwrap();
    let err = client.set_node_label("n", "k", Some("v")).unwrap_err();
    assert!(matches!(err, KubeError::Http { .. }), "{err}");
}

#[test]
fn garbage_ca_bundle_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.crt"), "not a pem").unwrap();
    let err = KubeClient::new(
        Some("https://127.0.0.1:1".into()),
        &dir.path().join("token"),
        &dir.path().join("ca.crt"),
    )
    .unwrap_err();
    assert!(matches!(err, KubeError::Ca { .. }), "{err}");
}
