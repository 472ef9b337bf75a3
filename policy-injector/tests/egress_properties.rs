//! Property tests of the egress allowlist: entries print and parse back, `covers` agrees with
//! `matches`, a narrowing the policy accepts never reaches a host the policy does not, and
//! hardening with egress on is idempotent.

use proptest::prelude::*;
use serde_json::json;

use policy_injector::egress::{check_narrowing, AllowEntry, HostPattern};
use policy_injector::{harden, Context, Policy};

/// Names from a small alphabet so generated hosts and suffixes often overlap.
fn host() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "b", "api", "pkg", "x-1"]),
        1..4,
    )
    .prop_map(|mut labels| {
        labels.push("test");
        labels.join(".")
    })
}

fn entry() -> impl Strategy<Value = AllowEntry> {
    (
        host(),
        any::<bool>(),
        prop::sample::select(vec![443u16, 80, 8443]),
    )
        .prop_map(|(h, wildcard, port)| AllowEntry {
            host: if wildcard {
                HostPattern::Subdomains(h)
            } else {
                HostPattern::Exact(h)
            },
            port,
        })
}

proptest! {
    #[test]
    fn entries_print_and_parse_back(e in entry()) {
        prop_assert_eq!(e.to_string().parse::<AllowEntry>().unwrap(), e);
    }

    #[test]
    fn covering_an_exact_host_is_matching_it(e in entry(), h in host(), port in prop::sample::select(vec![443u16, 80])) {
        let exact = AllowEntry { host: HostPattern::Exact(h.clone()), port };
        prop_assert_eq!(e.covers(&exact), e.matches(&h, port));
    }

    #[test]
    fn an_accepted_narrowing_reaches_nothing_new(
        policy in prop::collection::vec(entry(), 1..4),
        wanted in prop::collection::vec(entry(), 1..4),
        probes in prop::collection::vec((host(), prop::sample::select(vec![443u16, 80, 8443])), 1..16),
    ) {
        if check_narrowing(&policy, &wanted).is_ok() {
            for (h, port) in probes {
                let narrow = wanted.iter().any(|e| e.matches(&h, port));
                let wide = policy.iter().any(|e| e.matches(&h, port));
                prop_assert!(!narrow || wide, "{h}:{port} allowed by {wanted:?}, not by {policy:?}");
            }
        }
    }

    #[test]
    fn hardening_with_egress_on_is_idempotent(
        env in prop::collection::vec(prop::sample::select(vec![
            "PATH=/bin", "HTTPS_PROXY=http://x.test:1", "no_proxy=*", "http_proxy=http://y.test:2", "A=b",
        ]), 0..5),
    ) {
        let policy = Policy::from_toml_str("[network.egress]\nallow = [\"api.example.test\"]\n").unwrap();
        let spec = json!({
            "ociVersion": "1.0.2",
            "process": {"user": {"uid": 1000, "gid": 1000}, "args": ["sh"], "env": env, "cwd": "/"},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
            "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}, {"type": "network"}]}
        });
        let once = harden(&spec, &policy, &Context::default()).unwrap();
        let twice = harden(&once.spec, &policy, &Context::default()).unwrap();
        prop_assert_eq!(&twice.spec, &once.spec);
        prop_assert_eq!(twice.egress, once.egress);
    }
}
