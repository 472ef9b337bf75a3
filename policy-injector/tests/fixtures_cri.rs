//! The specs containerd 1.6.20's CRI plugin writes for a pod (captured from a runc pod by
//! `cargo run -p gvisor-hardened-tests --example capture-cri-fixtures`): the sandbox (pause)
//! container and an app container with resources, an env var and a read-only hostPath. Their
//! verdicts, the invariants on the accepted ones, idempotence, and that what CRI and the pod
//! depend on survives hardening.

mod common;

use serde_json::Value;

use policy_injector::{harden, Context, HardenError, Mode, Policy, Rule};

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const SANDBOX: &str = "cri-sandbox.json";
const CONTAINER: &str = "cri-container.json";

/// The namespace paths the app container joins: the sandbox's, as the shim supplies them in
/// [`Context::pod_namespace_paths`].
fn pod_paths(spec: &Value) -> Vec<String> {
    spec["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["path"].as_str().map(str::to_string))
        .collect()
}

fn in_pod(spec: &Value) -> Context {
    Context {
        pod_namespace_paths: pod_paths(spec),
        ..Context::default()
    }
}

fn mount<'a>(spec: &'a Value, dest: &str) -> Option<&'a Value> {
    spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == dest)
}

#[test]
fn every_cri_fixture_is_listed() {
    let dir = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("cri-") && name.ends_with(".json") {
            assert!(
                [SANDBOX, CONTAINER].contains(&name.as_str()),
                "{name} has no verdict"
            );
        }
    }
}

#[test]
fn the_fixtures_are_what_cri_writes_for_a_pod() {
    let sb = fixture(SANDBOX);
    let c = fixture(CONTAINER);
    assert_eq!(
        sb["annotations"]["io.kubernetes.cri.container-type"],
        "sandbox"
    );
    assert_eq!(
        c["annotations"]["io.kubernetes.cri.container-type"],
        "container"
    );
    let sandbox_id = &sb["annotations"]["io.kubernetes.cri.sandbox-id"];
    assert_eq!(
        &c["annotations"]["io.kubernetes.cri.sandbox-id"],
        sandbox_id
    );
    assert_eq!(sb["process"]["args"], serde_json::json!(["/pause"]));
    // The app container joins the sandbox's namespaces by /proc path; the sandbox has a CNI
    // netns under /var/run/netns.
    assert_eq!(pod_paths(&c).len(), 3, "{:?}", pod_paths(&c));
    assert!(pod_paths(&sb)[0].starts_with("/var/run/netns/cni-"));
}

#[test]
fn the_sandbox_spec_is_hardened_and_satisfies_the_invariants() {
    let policy = Policy::default();
    let h = harden(&fixture(SANDBOX), &policy, &Context::default()).unwrap();
    common::check_spec(&h.spec, &policy).unwrap();
    assert!(h.runsc.oci_seccomp);
    // CRI's host-backed /dev/shm becomes the policy's bounded tmpfs.
    assert_eq!(mount(&h.spec, "/dev/shm").unwrap()["type"], "tmpfs");
}

#[test]
fn the_app_container_outside_its_pod_is_rejected_for_joining_foreign_namespaces() {
    match harden(&fixture(CONTAINER), &Policy::default(), &Context::default()) {
        Err(HardenError::Rejected(r)) => {
            assert!(r.iter().all(|r| r.rule == Rule::Namespaces), "{r:?}");
            let fields: Vec<&str> = r.iter().map(|r| r.field.as_str()).collect();
            // In `namespaces.reject_host` order; uts is not guarded.
            assert_eq!(
                fields,
                ["linux.namespaces[network]", "linux.namespaces[ipc]"],
                "{r:?}"
            );
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn the_app_container_in_its_pod_is_hardened_and_keeps_what_the_pod_needs() {
    let input = fixture(CONTAINER);
    let policy = Policy::default();
    let h = harden(&input, &policy, &in_pod(&input)).unwrap();
    common::check_spec(&h.spec, &policy).unwrap();
    let out = &h.spec;
    // The pod's namespaces and cgroup, and every CRI annotation, are left alone.
    assert_eq!(out["linux"]["namespaces"], input["linux"]["namespaces"]);
    assert_eq!(out["linux"]["cgroupsPath"], input["linux"]["cgroupsPath"]);
    for (k, v) in input["annotations"].as_object().unwrap() {
        assert_eq!(&out["annotations"][k], v, "{k}");
    }
    // Requests below the policy's ceilings are kept.
    assert_eq!(out["linux"]["resources"]["memory"]["limit"], 256i64 << 20);
    assert_eq!(out["linux"]["resources"]["cpu"]["quota"], 50000);
    // The pod's files stay bound, read-only; the hostPath was read-only already.
    for dest in ["/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/data"] {
        let m = mount(out, dest).unwrap_or_else(|| panic!("{dest} dropped"));
        assert_eq!(
            m["source"],
            mount(&input, dest).unwrap()["source"],
            "{dest}"
        );
        let opts = m["options"].as_array().unwrap();
        assert!(opts.contains(&Value::from("ro")), "{dest}: {opts:?}");
    }
    assert_eq!(mount(out, "/dev/shm").unwrap()["type"], "tmpfs");
    assert_eq!(out["process"]["env"], input["process"]["env"]);
}

#[test]
fn hardening_a_hardened_cri_spec_changes_nothing() {
    let policy = Policy::default();
    for (name, ctx) in [
        (SANDBOX, Context::default()),
        (CONTAINER, in_pod(&fixture(CONTAINER))),
    ] {
        let once = harden(&fixture(name), &policy, &ctx).unwrap();
        let twice = harden(&once.spec, &policy, &ctx).unwrap();
        assert_eq!(
            serde_json::to_string(&once.spec).unwrap(),
            serde_json::to_string(&twice.spec).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn audit_mode_returns_the_cri_specs_unchanged_and_records_the_rejection() {
    let policy = Policy {
        mode: Mode::Audit,
        ..Policy::default()
    };
    for name in [SANDBOX, CONTAINER] {
        let input = fixture(name);
        let h = harden(&input, &policy, &Context::default()).unwrap();
        assert_eq!(h.spec, input, "{name}");
        let rejected = h
            .decisions
            .iter()
            .any(|d| d.action == policy_injector::Action::Rejected);
        assert_eq!(rejected, name == CONTAINER, "{name}");
    }
}
