//! The specs containerd 1.6.20 writes for `ctr` (captured by tests/fixtures/capture-ctr.sh):
//! the expected verdict for each, the invariants on the accepted ones, idempotence, and that
//! every field no rule touches survives unchanged, in order.

mod common;

use serde_json::Value;

use policy_injector::{harden, Context, HardenError, Policy, Rule};

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const ACCEPTED: &[&str] = &[
    "ctr-plain.json",
    "ctr-tty.json",
    "ctr-bind.json",
    "ctr-env.json",
    "ctr-limits.json",
    "ctr-read-only.json",
];

/// Fixture, rule and field of the first rejection.
const REJECTED: &[(&str, Rule, &str)] = &[
    ("ctr-bind-etc.json", Rule::Mounts, "mounts[/host-etc]"),
    (
        "ctr-privileged.json",
        Rule::Devices,
        "linux.devices[/dev/autofs]",
    ),
    (
        "ctr-net-host.json",
        Rule::Namespaces,
        "linux.namespaces[network]",
    ),
    (
        "ctr-with-host-pidns.json",
        Rule::Namespaces,
        "linux.namespaces[pid]",
    ),
];

#[test]
fn every_fixture_is_listed() {
    let dir = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("ctr-") && name.ends_with(".json") {
            assert!(
                ACCEPTED.contains(&name.as_str()) || REJECTED.iter().any(|r| r.0 == name),
                "{name} has no expected verdict"
            );
        }
    }
}

#[test]
fn ordinary_ctr_specs_are_hardened_and_satisfy_the_invariants() {
    let policy = Policy::default();
    for name in ACCEPTED {
        let h = harden(&fixture(name), &policy, &Context::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        common::check_spec(&h.spec, &policy).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(h.runsc.oci_seccomp, "{name}");
    }
}

#[test]
fn dangerous_ctr_specs_are_rejected_naming_rule_and_field() {
    for (name, rule, field) in REJECTED {
        match harden(&fixture(name), &Policy::default(), &Context::default()) {
            Err(HardenError::Rejected(r)) => {
                assert_eq!((r[0].rule, r[0].field.as_str()), (*rule, *field), "{name}");
            }
            other => panic!("{name}: expected a rejection, got {other:?}"),
        }
    }
}

#[test]
fn privileged_ctr_spec_is_rejected_for_its_host_devices() {
    let Err(HardenError::Rejected(r)) = harden(
        &fixture("ctr-privileged.json"),
        &Policy::default(),
        &Context::default(),
    ) else {
        panic!("privileged must be rejected")
    };
    assert!(r.iter().all(|r| r.rule == Rule::Devices));
    assert!(r.len() > 10, "each host device is named: {}", r.len());
}

#[test]
fn hardening_a_hardened_ctr_spec_changes_nothing() {
    let policy = Policy::default();
    for name in ACCEPTED {
        let once = harden(&fixture(name), &policy, &Context::default()).unwrap();
        let twice = harden(&once.spec, &policy, &Context::default()).unwrap();
        assert_eq!(
            serde_json::to_string(&once.spec).unwrap(),
            serde_json::to_string(&twice.spec).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn output_is_byte_identical_across_runs() {
    let spec = fixture("ctr-limits.json");
    let a = harden(&spec, &Policy::default(), &Context::default()).unwrap();
    let b = harden(&spec, &Policy::default(), &Context::default()).unwrap();
    assert_eq!(
        serde_json::to_vec(&a.spec).unwrap(),
        serde_json::to_vec(&b.spec).unwrap()
    );
    assert_eq!(
        serde_json::to_vec(&a.decisions).unwrap(),
        serde_json::to_vec(&b.decisions).unwrap()
    );
}

/// Fields some rule may write. Everything else must come out exactly as it went in.
const TOUCHED: &[&[&str]] = &[
    &["process", "capabilities"],
    &["process", "noNewPrivileges"],
    &["process", "user"],
    &["process", "rlimits"],
    &["process", "env"],
    &["process", "selinuxLabel"],
    &["root", "readonly"],
    &["mounts"],
    &["annotations"],
    &["hooks"],
    &["linux", "resources"],
    &["linux", "seccomp"],
    &["linux", "devices"],
    &["linux", "namespaces"],
    &["linux", "sysctl"],
];

fn without_touched(mut v: Value) -> Value {
    for path in TOUCHED {
        let (last, parents) = path.split_last().unwrap();
        let pointer: String = parents.iter().map(|p| format!("/{p}")).collect();
        if let Some(obj) = v.pointer_mut(&pointer).and_then(Value::as_object_mut) {
            obj.shift_remove(*last);
        }
    }
    v
}

#[test]
fn fields_no_rule_touches_survive_in_order() {
    for name in ACCEPTED {
        let input = fixture(name);
        let out = harden(&input, &Policy::default(), &Context::default())
            .unwrap()
            .spec;
        assert_eq!(
            serde_json::to_string_pretty(&without_touched(input)).unwrap(),
            serde_json::to_string_pretty(&without_touched(out)).unwrap(),
            "{name}"
        );
    }
}

#[test]
fn untouched_mount_fields_and_order_survive() {
    let input = fixture("ctr-bind.json");
    let out = harden(&input, &Policy::default(), &Context::default())
        .unwrap()
        .spec;
    let key = |m: &Value| {
        (
            m["destination"].clone(),
            m["type"].clone(),
            m["source"].clone(),
        )
    };
    let before: Vec<_> = input["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| !["/run", "/dev/shm"].contains(&m["destination"].as_str().unwrap()))
        .map(key)
        .collect();
    let after: Vec<_> = out["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] != "tmpfs" || m["destination"] == "/dev")
        .map(key)
        .collect();
    assert_eq!(before, after);
}

#[test]
fn audit_mode_returns_every_fixture_unchanged_but_for_runscs_annotations() {
    let policy = Policy {
        mode: policy_injector::Mode::Audit,
        ..Policy::default()
    };
    for name in ACCEPTED.iter().chain(REJECTED.iter().map(|r| &r.0)) {
        let input = fixture(name);
        let h =
            harden(&input, &policy, &Context::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        // Audit mode's one change: runsc's own `dev.gvisor.*` annotations go (harden.rs).
        let mut expected = input.clone();
        if let Some(ann) = expected
            .get_mut("annotations")
            .and_then(|a| a.as_object_mut())
        {
            ann.retain(|k, _| !k.starts_with("dev.gvisor."));
        }
        assert_eq!(h.spec, expected, "{name}");
        let rejected = h
            .decisions
            .iter()
            .any(|d| d.action == policy_injector::Action::Rejected);
        assert_eq!(rejected, !ACCEPTED.contains(name), "{name}");
    }
}

#[test]
fn hand_written_cri_like_spec_is_hardened_for_its_pod() {
    let ctx = Context {
        pod_namespace_paths: vec!["/proc/4242/ns/ipc".into(), "/proc/4242/ns/uts".into()],
        ..Context::default()
    };
    let policy = Policy::default();
    let h = harden(&fixture("bench-cri-like.json"), &policy, &ctx).unwrap();
    common::check_spec(&h.spec, &policy).unwrap();
    let mounts = h.spec["mounts"].as_array().unwrap();
    let at = |d: &str| mounts.iter().find(|m| m["destination"] == d).cloned();
    assert!(at("/var/run/secrets/kubernetes.io/serviceaccount").is_none());
    assert_eq!(at("/dev/shm").unwrap()["type"], "tmpfs");
    assert_eq!(
        at("/scratch").unwrap()["options"],
        serde_json::json!(["rbind", "rprivate", "rw", "nosuid", "nodev"])
    );
    assert_eq!(
        at("/etc/hosts").unwrap()["options"],
        serde_json::json!(["rbind", "rprivate", "ro", "nosuid", "nodev"])
    );
    assert_eq!(h.spec["linux"]["resources"]["memory"]["limit"], 1i64 << 30);
    assert_eq!(h.spec["linux"]["resources"]["cpu"]["quota"], 50000);
}
