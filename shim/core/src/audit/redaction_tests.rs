//! No environment value reaches the audit file or its exports: a create record made the way
//! the shim makes it (the real `harden` over a spec with a planted secret in its environment,
//! a policy whose `environment.defaults` carries a credential in a value, a hook with its own
//! environment) is written by [`AuditLog`], and neither the line nor its OCSF and OTel exports
//! contain a planted value.

use policy_injector::export::{Exporter, Format};
use policy_injector::{harden, Context, Engine, EngineContext, Policy};
use serde_json::json;

use super::test_support::subject;
use super::*;

const SECRETS: [&str; 3] = [
    "planted-secret-api-key-7f3a",
    "planted-secret-index-token-91c2",
    "planted-secret-hook-55d0",
];

fn spec() -> serde_json::Value {
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "user": {"uid": 1000, "gid": 1000},
            "args": ["sh"],
            "env": [
                "PATH=/usr/bin:/bin",
                "HOME=/",
                format!("API_KEY={}", SECRETS[0]),
                format!("OPENAI_API_KEY={}", SECRETS[0]),
            ],
            "cwd": "/"
        },
        "root": {"path": "rootfs"},
        // Docker's setkey hook, which the hooks rule removes and records whole.
        "hooks": {"prestart": [{
            "path": "/proc/4242/exe",
            "args": ["libnetwork-setkey", "-exec-root=/var/run/docker", "c1", "0123abcd"],
            "env": [format!("HOOK_TOKEN={}", SECRETS[2])]
        }]},
        "linux": {"namespaces": [
            {"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}
        ]}
    })
}

fn policy() -> Policy {
    let mut p = Policy::default();
    p.environment.defaults = [
        ("HOME".to_string(), "/home/agent".to_string()),
        // A credential in a value under a name no secret pattern matches.
        (
            "PIP_INDEX_URL".to_string(),
            format!("https://ci:{}@pypi.internal.test/simple", SECRETS[1]),
        ),
    ]
    .into_iter()
    .collect();
    p
}

#[test]
fn planted_env_values_are_in_no_record_and_no_export() {
    let ctx = Context {
        engine: Some(EngineContext {
            engine: Engine::Docker,
            rootfs: None,
            files: Default::default(),
        }),
        ..Context::default()
    };
    let hardened = harden(&spec(), &policy(), &ctx).unwrap();
    let decisions = serde_json::to_string(&hardened.decisions).unwrap();
    // The path this test guards: the decisions themselves carry values.
    assert!(decisions.contains(SECRETS[1]), "{decisions}");
    assert!(decisions.contains(SECRETS[2]), "{decisions}");
    // OPENAI_API_KEY matches the default secret pattern *_API_KEY and is reported by name; a
    // bare API_KEY matches none and is not mentioned at all.
    assert!(decisions.contains("OPENAI_API_KEY"), "{decisions}");

    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path().join("audit.jsonl"));
    let s = subject("c1");
    let mut rec = AuditRecord::new(AuditEvent::Create, &s);
    rec.decisions = Some(&hardened.decisions);
    log.append(&rec).unwrap();

    let text = std::fs::read_to_string(log.path()).unwrap();
    for secret in SECRETS {
        assert!(!text.contains(secret), "the log has {secret}: {text}");
    }
    // What was changed is still there, by name.
    assert!(text.contains("PIP_INDEX_URL=<redacted>"), "{text}");
    assert!(text.contains("HOOK_TOKEN=<redacted>"), "{text}");
    assert!(
        text.contains("OPENAI_API_KEY"),
        "the secret's name stays: {text}"
    );
    super::test_support::verify(log.path(), None).expect("the chain holds");

    for format in [Format::Ocsf, Format::Otel] {
        let mut x = Exporter::new(format, "node");
        let out: Vec<String> = text.lines().filter_map(|l| x.line(l.as_bytes())).collect();
        assert!(!out.is_empty());
        for line in &out {
            for secret in SECRETS {
                assert!(!line.contains(secret), "{format:?} export has {secret}");
            }
        }
    }
}
