//! Property tests over generated specs: whatever `harden` accepts satisfies every invariant of
//! the policy, hardening is idempotent, audit mode never changes a spec, and nothing well-typed
//! is reported as malformed.

mod common;

use proptest::prelude::*;
use serde_json::{json, Map, Value};

use policy_injector::{harden, harden_process, Action, Context, HardenError, Mode, Policy};

const CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_NET_RAW",
    "CAP_SYS_ADMIN",
    "CAP_NET_BIND_SERVICE",
    "CAP_KILL",
];
const ENV_NAMES: &[&str] = &[
    "PATH",
    "HOME",
    "GITHUB_TOKEN",
    "db_password",
    "AWS_SECRET_ACCESS_KEY",
    "LANG",
    "MY_SECRET_X",
];
const RLIMITS: &[&str] = &[
    "RLIMIT_NOFILE",
    "RLIMIT_FSIZE",
    "RLIMIT_CORE",
    "RLIMIT_NPROC",
    "RLIMIT_STACK",
];
const DESTS: &[&str] = &[
    "/tmp",
    "/var/tmp",
    "/run",
    "/dev/shm",
    "/data",
    "/data/",
    "/cache",
    "/dev",
    "/dev/pts",
    "/srv/x",
    "/var/run/secrets/kubernetes.io/serviceaccount",
    "/a/../b",
];
const SOURCES: &[&str] = &[
    "/srv/a",
    "/srv/b/../c",
    "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/v",
    "/var/lib/kubelet/pods/u1/etc-hosts",
    "/etc",
    "/var/run/docker.sock",
    "/",
];
const OPTS: &[&str] = &[
    "rw",
    "ro",
    "rbind",
    "bind",
    "suid",
    "dev",
    "nosuid",
    "nodev",
    "noexec",
    "mode=755",
    "size=100g",
    "size=50%",
    "size=64k",
];
const SYSCTLS: &[&str] = &[
    "net.ipv4.ip_unprivileged_port_start",
    "kernel.shm_rmid_forced",
    "kernel.core_pattern",
];

fn subset(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::subsequence(pool, 0..=pool.len())
}

fn int_limit() -> impl Strategy<Value = Option<i64>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(-1)),
        1 => Just(Some(0)),
        4 => (1i64..=(8i64 << 30)).prop_map(Some),
        1 => Just(Some(i64::MAX)),
        1 => (i64::MIN..-1).prop_map(Some),
    ]
}

fn caps() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(
        (subset(CAPS), subset(CAPS), subset(CAPS), subset(CAPS), subset(CAPS)).prop_map(|(b, e, i, p, a)| {
            json!({"bounding": b, "effective": e, "inheritable": i, "permitted": p, "ambient": a})
        }),
    )
}

fn rlimits() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(
        (
            subset(RLIMITS),
            proptest::collection::vec((any::<u64>(), any::<u64>()), RLIMITS.len()),
        )
            .prop_map(|(kinds, values)| {
                Value::Array(
                    kinds
                        .iter()
                        .zip(values)
                        .map(|(k, (h, s))| json!({"type": k, "hard": h, "soft": s}))
                        .collect(),
                )
            }),
    )
}

fn process() -> impl Strategy<Value = Value> {
    (
        prop_oneof![Just(0u32), 1u32..70000],
        prop_oneof![Just(0u32), 1u32..70000],
        proptest::collection::vec(prop_oneof![Just(0u32), Just(10), Just(1000)], 0..4),
        caps(),
        rlimits(),
        subset(ENV_NAMES),
        proptest::option::of(any::<bool>()),
        proptest::option::of(Just("system_u:system_r:container_t:s0")),
    )
        .prop_map(|(uid, gid, groups, caps, rlimits, env, nnp, label)| {
            let mut p = Map::new();
            p.insert(
                "user".into(),
                json!({"uid": uid, "gid": gid, "additionalGids": groups}),
            );
            p.insert("args".into(), json!(["sh"]));
            p.insert(
                "env".into(),
                json!(env.iter().map(|n| format!("{n}=v4lue")).collect::<Vec<_>>()),
            );
            p.insert("cwd".into(), json!("/"));
            if let Some(c) = caps {
                p.insert("capabilities".into(), c);
            }
            if let Some(r) = rlimits {
                p.insert("rlimits".into(), r);
            }
            if let Some(n) = nnp {
                p.insert("noNewPrivileges".into(), json!(n));
            }
            if let Some(l) = label {
                p.insert("selinuxLabel".into(), json!(l));
            }
            Value::Object(p)
        })
}

fn mount() -> impl Strategy<Value = Value> {
    prop_oneof![
        (proptest::sample::select(DESTS), subset(OPTS)).prop_map(|(d, o)| json!({
            "destination": d, "type": "tmpfs", "source": "tmpfs", "options": o
        })),
        (
            proptest::sample::select(DESTS),
            proptest::sample::select(SOURCES),
            subset(OPTS)
        )
            .prop_map(|(d, s, o)| json!({
                "destination": d, "type": "bind", "source": s, "options": o
            })),
    ]
}

fn annotations() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(
        (
            proptest::option::of(prop_oneof![
                Just("512Mi"),
                Just("1Gi"),
                Just("4Gi"),
                Just("junk")
            ]),
            proptest::option::of(prop_oneof![Just("500m"), Just("1"), Just("8")]),
            proptest::option::of(prop_oneof![
                Just("1"),
                Just("64"),
                Just("512"),
                Just("9999")
            ]),
            any::<bool>(),
        )
            .prop_map(|(mem, cpu, pids, gvisor)| {
                let mut a = Map::new();
                if let Some(m) = mem {
                    a.insert("gvisor-hardened.dev/memory".into(), json!(m));
                }
                if let Some(c) = cpu {
                    a.insert("gvisor-hardened.dev/cpu".into(), json!(c));
                }
                if let Some(p) = pids {
                    a.insert("gvisor-hardened.dev/pids".into(), json!(p));
                }
                if gvisor {
                    a.insert("dev.gvisor.flag.network".into(), json!("host"));
                }
                a.insert(
                    "io.kubernetes.cri.container-type".into(),
                    json!("container"),
                );
                Value::Object(a)
            }),
    )
}

fn resources() -> impl Strategy<Value = Option<Value>> {
    proptest::option::of(
        (
            int_limit(),
            int_limit(),
            int_limit(),
            int_limit(),
            prop_oneof![
                Just(None),
                Just(Some(100_000i64)),
                (1000i64..=1_000_000).prop_map(Some)
            ],
            int_limit(),
        )
            .prop_map(|(limit, res, swap, quota, period, pids)| {
                let mut mem = Map::new();
                for (k, v) in [("limit", limit), ("reservation", res), ("swap", swap)] {
                    if let Some(v) = v {
                        mem.insert(k.into(), json!(v));
                    }
                }
                let mut cpu = Map::new();
                for (k, v) in [("quota", quota), ("period", period)] {
                    if let Some(v) = v {
                        cpu.insert(k.into(), json!(v));
                    }
                }
                let mut r = json!({"memory": mem, "cpu": cpu});
                if let Some(p) = pids {
                    r["pids"] = json!({"limit": p});
                }
                r
            }),
    )
}

fn spec() -> impl Strategy<Value = Value> {
    (
        process(),
        proptest::option::of(any::<bool>()),
        proptest::collection::vec(mount(), 0..5),
        prop_oneof![4 => Just(vec!["pid", "ipc", "network", "mount"]), 1 => subset(&["pid", "ipc", "network", "uts"])],
        annotations(),
        resources(),
        prop_oneof![4 => Just(vec![]), 1 => subset(SYSCTLS)],
        any::<bool>(),
    )
        .prop_map(|(process, readonly, mounts, ns, ann, res, sysctl, seccomp)| {
            let mut root = json!({"path": "rootfs"});
            if let Some(r) = readonly {
                root["readonly"] = json!(r);
            }
            let mut linux = json!({
                "namespaces": ns.iter().map(|t| json!({"type": t})).collect::<Vec<_>>(),
                "cgroupsPath": "/k8s/pod/ctr",
                "maskedPaths": ["/proc/kcore"],
            });
            if let Some(r) = res {
                linux["resources"] = r;
            }
            if !sysctl.is_empty() {
                linux["sysctl"] = Value::Object(sysctl.iter().map(|k| (k.to_string(), json!("1"))).collect());
            }
            if seccomp {
                linux["seccomp"] = json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}]});
            }
            let mut s = json!({
                "ociVersion": "1.0.2-dev",
                "process": process,
                "root": root,
                "hostname": "h",
                "mounts": mounts,
                "linux": linux,
            });
            if let Some(a) = ann {
                s["annotations"] = a;
            }
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn accepted_specs_satisfy_every_invariant_and_rehardening_changes_nothing(spec in spec()) {
        let policy = Policy::default();
        let ctx = Context::default();
        match harden(&spec, &policy, &ctx) {
            Ok(h) => {
                prop_assert!(h.decisions.windows(2).all(|w| w[0].rule <= w[1].rule), "decisions out of rule order");
                prop_assert!(h.decisions.iter().all(|d| d.action != Action::Rejected));
                if let Err(e) = common::check_spec(&h.spec, &policy) {
                    return Err(TestCaseError::fail(format!("invariant broken: {e}\n{}", h.spec)));
                }
                let again = harden(&h.spec, &policy, &ctx).map_err(|e| TestCaseError::fail(format!("re-harden failed: {e}")))?;
                prop_assert_eq!(serde_json::to_string(&again.spec).unwrap(), serde_json::to_string(&h.spec).unwrap());
                prop_assert!(again.decisions.iter().all(|d| matches!(d.action, Action::Reported | Action::Set) && d.before.is_none()),
                    "second pass changed something: {:?}", again.decisions);
                prop_assert_eq!(again.runsc, h.runsc);
                prop_assert_eq!(again.lifetime, h.lifetime);
            }
            Err(HardenError::Rejected(r)) => prop_assert!(!r.is_empty()),
            Err(e @ HardenError::Malformed { .. }) => {
                return Err(TestCaseError::fail(format!("well-typed spec called malformed: {e}")));
            }
        }
    }

    #[test]
    fn audit_mode_changes_nothing_but_runscs_annotations_and_reports_what_enforce_rejects(spec in spec()) {
        let enforce = harden(&spec, &Policy::default(), &Context::default());
        let audit_policy = Policy { mode: Mode::Audit, ..Policy::default() };
        let audit = harden(&spec, &audit_policy, &Context::default()).map_err(|e| TestCaseError::fail(e.to_string()))?;
        // Audit mode's one change: runsc's own `dev.gvisor.*` annotations go (harden.rs).
        let mut expected = spec.clone();
        if let Some(ann) = expected.get_mut("annotations").and_then(|a| a.as_object_mut()) {
            ann.retain(|k, _| !k.starts_with("dev.gvisor."));
        }
        prop_assert_eq!(&audit.spec, &expected);
        let audit_rejections: Vec<_> = audit.decisions.iter().filter(|d| d.action == Action::Rejected).map(|d| (d.rule, d.field.clone())).collect();
        match enforce {
            Ok(h) => {
                prop_assert!(audit_rejections.is_empty());
                let changes: Vec<_> = audit.decisions.iter().map(|d| (d.rule, d.field.clone(), d.action)).collect();
                let enforced: Vec<_> = h.decisions.iter().map(|d| (d.rule, d.field.clone(), d.action)).collect();
                prop_assert_eq!(changes, enforced);
            }
            Err(HardenError::Rejected(r)) => {
                let fields: Vec<_> = r.iter().map(|r| (r.rule, r.field.clone())).collect();
                prop_assert_eq!(audit_rejections, fields);
            }
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        }
    }

    #[test]
    fn harden_is_deterministic(spec in spec()) {
        let a = harden(&spec, &Policy::default(), &Context::default());
        let b = harden(&spec, &Policy::default(), &Context::default());
        prop_assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn exec_processes_satisfy_the_process_rules_idempotently(p in process()) {
        let policy = Policy::default();
        match harden_process(&p, &policy, &Context::default()) {
            Ok(h) => {
                if let Err(e) = common::check_process(&h.process, &policy) {
                    return Err(TestCaseError::fail(format!("{e}: {}", h.process)));
                }
                let again = harden_process(&h.process, &policy, &Context::default()).unwrap();
                prop_assert_eq!(again.process, h.process);
            }
            Err(HardenError::Rejected(r)) => prop_assert!(r.iter().all(|r| r.rule == policy_injector::Rule::Rlimits)),
            Err(e) => return Err(TestCaseError::fail(e.to_string())),
        }
    }
}

/// The generator must reach the interesting side too: a fixed sample has both verdicts.
#[test]
fn generator_produces_accepted_and_rejected_specs() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = spec();
    let (mut ok, mut rejected) = (0, 0);
    for _ in 0..300 {
        let s = strategy.new_tree(&mut runner).unwrap().current();
        match harden(&s, &Policy::default(), &Context::default()) {
            Ok(_) => ok += 1,
            Err(HardenError::Rejected(_)) => rejected += 1,
            Err(e) => panic!("{e}"),
        }
    }
    eprintln!("accepted {ok}, rejected {rejected}");
    assert!(
        ok >= 30 && rejected >= 30,
        "accepted {ok}, rejected {rejected}"
    );
}
