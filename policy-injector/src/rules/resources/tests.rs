use super::super::testutil::*;
use crate::decision::Rule;
use crate::policy::Policy;
use crate::AtCreate;
use serde_json::json;

fn with_resources(res: serde_json::Value) -> serde_json::Value {
    let mut spec = base_spec();
    spec["linux"]["resources"] = res;
    spec
}

const GI2: i64 = 2 << 30;

#[test]
fn no_limits_get_the_ceilings() {
    let h = harden_ok(&base_spec());
    let r = &h.spec["linux"]["resources"];
    assert_eq!(r["memory"], json!({"limit": GI2, "swap": GI2}));
    assert_eq!(r["cpu"], json!({"period": 100000, "quota": 200000}));
    assert_eq!(r["pids"], json!({"limit": 32 + 12 * 512}));
    assert_eq!(h.spec["annotations"]["gvisor-hardened.dev/pids"], "512");
}

#[test]
fn huge_limits_are_clamped() {
    let spec = with_resources(json!({
        "memory": {"limit": i64::MAX, "reservation": i64::MAX, "swap": -1},
        "cpu": {"quota": 10_000_000, "period": 100000, "shares": 1024},
        "pids": {"limit": 1_000_000}
    }));
    let h = harden_ok(&spec);
    let r = &h.spec["linux"]["resources"];
    assert_eq!(
        r["memory"],
        json!({"limit": GI2, "reservation": GI2, "swap": GI2})
    );
    assert_eq!(
        r["cpu"],
        json!({"quota": 200000, "period": 100000, "shares": 1024})
    );
    assert_eq!(r["pids"]["limit"], json!(32 + 12 * 512));
}

#[test]
fn a_disabled_oom_killer_is_turned_back_on() {
    // docker run --oom-kill-disable
    let spec = with_resources(json!({"memory": {"limit": 100 << 20, "disableOOMKiller": true}}));
    let h = harden_ok(&spec);
    assert_eq!(
        h.spec["linux"]["resources"]["memory"]["disableOOMKiller"],
        json!(false)
    );
    assert!(h
        .decisions
        .iter()
        .any(|d| d.field == "linux.resources.memory.disableOOMKiller"));
    assert_eq!(harden_ok(&h.spec).spec, h.spec);
}

#[test]
fn lower_limits_are_kept() {
    let spec = with_resources(json!({
        "memory": {"limit": 100 << 20},
        "cpu": {"quota": 50000, "period": 200000},
        "pids": {"limit": 20}
    }));
    let h = harden_ok(&spec);
    let r = &h.spec["linux"]["resources"];
    assert_eq!(r["memory"], json!({"limit": 100 << 20, "swap": 100 << 20}));
    assert_eq!(r["cpu"], json!({"quota": 50000, "period": 200000}));
    assert_eq!(r["pids"]["limit"], json!(32 + 12 * 20));
    assert_eq!(h.spec["annotations"]["gvisor-hardened.dev/pids"], "20");
}

#[test]
fn minus_one_means_unlimited_and_gets_the_ceiling() {
    let spec = with_resources(
        json!({"memory": {"limit": -1}, "cpu": {"quota": -1}, "pids": {"limit": -1}}),
    );
    let h = harden_ok(&spec);
    let r = &h.spec["linux"]["resources"];
    assert_eq!(r["memory"]["limit"], json!(GI2));
    assert_eq!(r["cpu"]["quota"], json!(200000));
    assert_eq!(r["pids"]["limit"], json!(32 + 12 * 512));
}

#[test]
fn negative_garbage_is_rejected() {
    for (res, field) in [
        (
            json!({"memory": {"limit": -5}}),
            "linux.resources.memory.limit",
        ),
        (
            json!({"memory": {"reservation": -2}}),
            "linux.resources.memory.reservation",
        ),
        (json!({"cpu": {"quota": -100}}), "linux.resources.cpu.quota"),
        (
            json!({"cpu": {"period": -100000}}),
            "linux.resources.cpu.period",
        ),
        (json!({"cpu": {"period": 10}}), "linux.resources.cpu.period"),
        (
            json!({"cpu": {"period": 5_000_000u64}}),
            "linux.resources.cpu.period",
        ),
        (json!({"pids": {"limit": -7}}), "linux.resources.pids.limit"),
    ] {
        let r = rejections(&with_resources(res.clone()));
        assert_eq!(
            (r[0].rule, r[0].field.as_str()),
            (Rule::Resources, field),
            "{res}"
        );
    }
}

#[test]
fn unified_cgroup_limits_are_rejected() {
    let spec = with_resources(json!({"unified": {"memory.max": "max", "io.weight": "100"}}));
    let r = rejections(&spec);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].field, "linux.resources.unified.memory.max");
}

#[test]
fn strings_for_numbers_are_malformed() {
    let spec = with_resources(json!({"memory": {"limit": "2Gi"}}));
    assert!(
        matches!(harden_err(&spec), crate::HardenError::Malformed { field, .. } if field == "linux.resources.memory.limit")
    );
}

#[test]
fn pids_budget_is_idempotent_through_the_annotation() {
    let spec = with_resources(json!({"pids": {"limit": 40}}));
    let once = harden_ok(&spec);
    let twice = harden_ok(&once.spec);
    assert_eq!(once.spec, twice.spec);
    assert_eq!(
        twice.spec["linux"]["resources"]["pids"]["limit"],
        json!(32 + 12 * 40)
    );
}

#[test]
fn clamp_resources_applies_policy_and_annotations() {
    let policy = Policy::default();
    let mut ann = std::collections::BTreeMap::new();
    ann.insert("gvisor-hardened.dev/memory".to_string(), "1Gi".to_string());
    ann.insert("gvisor-hardened.dev/pids".to_string(), "100".to_string());
    let update =
        json!({"memory": {"limit": 8i64 << 30}, "cpu": {"quota": 400000, "period": 100000}});
    let c = crate::clamp_resources(&update, &policy, &ann, &AtCreate::default()).unwrap();
    assert_eq!(
        c.resources["memory"],
        json!({"limit": 1i64 << 30, "swap": 1i64 << 30})
    );
    assert_eq!(c.resources["cpu"]["quota"], json!(200000));
    assert_eq!(c.resources["pids"]["limit"], json!(32 + 12 * 100));
}

#[test]
fn an_update_of_a_hardened_spec_ignores_the_runtimes_own_summary() {
    // Docker and Podman hand runsc-hardened's `update` the hardened spec's annotations, which
    // carry what the hardening changed: an output, not an unknown setting to refuse.
    let mut ann = std::collections::BTreeMap::new();
    ann.insert(
        crate::annotations::DECISIONS.to_string(),
        "gvisor-hardened changed user: set 1; each change is in the create record".to_string(),
    );
    let update = json!({"cpu": {"quota": 50000, "period": 100000}});
    let c =
        crate::clamp_resources(&update, &Policy::default(), &ann, &AtCreate::default()).unwrap();
    assert_eq!(c.resources["cpu"]["quota"], json!(50000));
}

#[test]
fn an_update_on_systrap_gives_the_pids_limit_the_create_gave() {
    let policy = Policy::default();
    let ctx = crate::harden::types::Context {
        runsc_platform: Some("systrap".into()),
        ..crate::harden::types::Context::default()
    };
    let created = harden_with(&base_spec(), &policy, &ctx).unwrap();
    let at_create = &created.spec["linux"]["resources"]["pids"]["limit"];
    // What `crictl update --memory` and `nerdctl update` send: no pids at all.
    let update = json!({"memory": {"limit": 1i64 << 30}});
    let none = std::collections::BTreeMap::new();
    let systrap = AtCreate {
        runsc_platform: Some("systrap".into()),
        ..AtCreate::default()
    };
    let c = crate::clamp_resources(&update, &policy, &none, &systrap).unwrap();
    assert_eq!(&c.resources["pids"]["limit"], at_create);
    // Before, the update was sized as on ptrace: about four times the limit.
    let ptrace = crate::clamp_resources(&update, &policy, &none, &AtCreate::default()).unwrap();
    assert!(ptrace.resources["pids"]["limit"].as_i64() > at_create.as_i64());
}

#[test]
fn clamp_resources_rejects_a_looser_annotation() {
    let mut ann = std::collections::BTreeMap::new();
    ann.insert("gvisor-hardened.dev/cpu".to_string(), "64".to_string());
    let err = crate::clamp_resources(&json!({}), &Policy::default(), &ann, &AtCreate::default())
        .unwrap_err();
    assert!(err.to_string().contains("gvisor-hardened.dev/cpu"), "{err}");
}

fn created_with(memory: i64) -> AtCreate {
    AtCreate {
        runsc_platform: Some("systrap".into()),
        memory_limit: Some(memory),
    }
}

#[test]
fn an_update_that_changes_the_memory_limit_is_refused_naming_the_rule() {
    let none = std::collections::BTreeMap::new();
    for asked in [300i64 << 20, 4i64 << 30, -1] {
        let update = json!({"memory": {"limit": asked}});
        let err =
            crate::clamp_resources(&update, &Policy::default(), &none, &created_with(1 << 30))
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("rejected by policy: resources: resources.memory.limit")
                && err.contains("cannot change")
                && err.contains("1073741824 bytes at create"),
            "{asked}: {err}"
        );
    }
}

#[test]
fn an_update_that_keeps_or_names_no_memory_limit_keeps_the_one_at_create() {
    let none = std::collections::BTreeMap::new();
    let at = created_with(300 << 20);
    for update in [
        json!({"memory": {"limit": 300i64 << 20}, "cpu": {"quota": 50000, "period": 100000}}),
        json!({"cpu": {"quota": 50000, "period": 100000}}),
        json!({"memory": {"limit": 0}, "cpu": {"quota": 50000, "period": 100000}}),
    ] {
        let c = crate::clamp_resources(&update, &Policy::default(), &none, &at).unwrap();
        assert_eq!(
            c.resources["memory"],
            json!({"limit": 300i64 << 20, "swap": 300i64 << 20}),
            "{update}"
        );
        assert_eq!(c.resources["cpu"]["quota"], json!(50000), "{update}");
    }
}

#[test]
fn an_update_asking_above_the_ceiling_of_a_sandbox_at_the_ceiling_is_no_change() {
    // `docker update --memory 64g` on a sandbox created at the 2 GiB ceiling: clamped to what
    // it already has.
    let none = std::collections::BTreeMap::new();
    let ceiling = i64::try_from(Policy::default().resources.memory.0).unwrap();
    let update = json!({"memory": {"limit": 64i64 << 30}});
    let c =
        crate::clamp_resources(&update, &Policy::default(), &none, &created_with(ceiling)).unwrap();
    assert_eq!(c.resources["memory"]["limit"], json!(ceiling));
}

#[test]
fn the_pids_budget_uses_systraps_factor_when_runsc_runs_on_systrap() {
    let mut spec = base_spec();
    spec["annotations"] = json!({"gvisor-hardened.dev/pids": "16"});
    let ctx = crate::harden::types::Context {
        runsc_platform: Some("systrap".into()),
        ..crate::harden::types::Context::default()
    };
    let h = harden_with(&spec, &Policy::default(), &ctx).unwrap();
    assert_eq!(
        h.spec["linux"]["resources"]["pids"]["limit"],
        json!(32 + 3 * 16)
    );
    let ptrace = harden_with(
        &spec,
        &Policy::default(),
        &crate::harden::types::Context::default(),
    )
    .unwrap();
    assert_eq!(
        ptrace.spec["linux"]["resources"]["pids"]["limit"],
        json!(32 + 12 * 16)
    );
}

#[test]
fn a_pod_sandbox_stays_within_the_pods_cpu_limit() {
    // containerd's CRI: the pod's limit (1 CPU + 20m overhead) on a pause container's spec,
    // which has no quota of its own; the pod's cgroup already has 102000us per 100000us.
    let mut spec = base_spec();
    spec["annotations"] = json!({
        "io.kubernetes.cri.sandbox-cpu-quota": "102000",
        "io.kubernetes.cri.sandbox-cpu-period": "100000",
    });
    let h = harden_ok(&spec);
    assert_eq!(
        h.spec["linux"]["resources"]["cpu"],
        json!({"period": 100000, "quota": 102000})
    );
    assert_eq!(harden_ok(&h.spec).spec, h.spec);
    // Above the policy's ceiling (2 CPUs), or no limit (0), the ceiling stays.
    for (quota, period) in [("800000", "100000"), ("0", "100000"), ("-1", "0")] {
        spec["annotations"]["io.kubernetes.cri.sandbox-cpu-quota"] = json!(quota);
        spec["annotations"]["io.kubernetes.cri.sandbox-cpu-period"] = json!(period);
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["linux"]["resources"]["cpu"]["quota"],
            json!(200000),
            "{quota}"
        );
    }
    // A period other than the sandbox's: the same share, rounded down.
    spec["annotations"]["io.kubernetes.cri.sandbox-cpu-quota"] = json!("50001");
    spec["annotations"]["io.kubernetes.cri.sandbox-cpu-period"] = json!("200000");
    let h = harden_ok(&spec);
    assert_eq!(h.spec["linux"]["resources"]["cpu"]["quota"], json!(25000));
}
