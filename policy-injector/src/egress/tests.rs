//! The egress section, plan and rule, through the public entry points.

use serde_json::{json, Value};

use super::*;
use crate::decision::{Action, Rule};
use crate::error::{HardenError, PolicyError};
use crate::harden::{harden, harden_process, Context};
use crate::policy::{Mode, NetworkMode, Policy};
use crate::rules::testutil::base_spec;

const ON: &str = r#"
[network]
mode = "none"
[network.egress]
allow = ["api.example.test", "*.pkg.example.test:443", "git.example.test:8443"]
allow_cidrs = ["10.213.0.0/16"]
hosts = { "api.example.test" = "10.213.7.2" }
max_bytes = "10Mi"
"#;

fn on() -> Policy {
    Policy::from_toml_str(ON).unwrap()
}

fn load_err(extra: &str) -> PolicyError {
    Policy::from_toml_str(&format!("{ON}{extra}")).unwrap_err()
}

fn env_of(v: &Value) -> Vec<String> {
    v["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn default_policy_has_egress_off() {
    let p = Policy::default();
    assert!(p.network.egress.allow.is_empty());
    let h = harden(&base_spec(), &p, &Context::default()).unwrap();
    assert_eq!(h.egress, None);
    assert!(!env_of(&h.spec["process"])
        .iter()
        .any(|e| e.contains("PROXY")));
    assert!(!h.decisions.iter().any(|d| d.rule == Rule::Egress));
}

#[test]
fn a_policy_with_an_allowlist_loads_into_a_plan() {
    let plan = EgressPlan::from_policy(&on().network.egress)
        .unwrap()
        .unwrap();
    assert_eq!(plan.allow.len(), 3);
    assert_eq!(plan.allow[1].to_string(), "*.pkg.example.test:443");
    assert_eq!(
        plan.hosts["api.example.test"],
        "10.213.7.2".parse::<IpAddr>().unwrap()
    );
    assert_eq!(plan.max_bytes, 10 << 20);
    assert_eq!(plan.listen, "127.0.0.1:3128".parse().unwrap());
    assert!(plan.require_sni && !plan.plain_http && !plan.narrowed);
    assert_eq!(plan.forwarder.host_path, DEFAULT_FORWARDER);
    assert_eq!((plan.forwarder.uid, plan.forwarder.gid), (65532, 65532));
}

#[test]
fn a_plan_survives_a_json_round_trip() {
    // runsc-hardened keeps the plan in its state file for the guard that runs the proxy.
    let plan = EgressPlan::from_policy(&on().network.egress)
        .unwrap()
        .unwrap();
    let text = serde_json::to_string(&plan).unwrap();
    let back: EgressPlan = serde_json::from_str(&text).unwrap();
    assert_eq!(back, plan);
}

#[test]
fn bad_egress_settings_name_the_key_and_line() {
    let cases = [
        ("allow = [\"*\"]", "network.egress.allow[0]", "wildcard"),
        (
            "allow = [\"a.test\", \"A.test:443\"]",
            "network.egress.allow[1]",
            "listed twice",
        ),
        (
            "allow = [\"10.0.0.1\"]",
            "network.egress.allow[0]",
            "allow_cidrs",
        ),
        (
            "allow_cidrs = [\"10.0.0.1/8\"]",
            "network.egress.allow_cidrs[0]",
            "host bits",
        ),
        (
            "hosts = { \"x.test\" = \"nowhere\" }",
            "network.egress.hosts.x.test",
            "not an IP",
        ),
        (
            "hosts = { \"bad_name.test\" = \"10.0.0.1\" }",
            "network.egress.hosts.bad_name.test",
            "invalid label",
        ),
        ("max_bytes = \"0\"", "network.egress.max_bytes", "0 bytes"),
        (
            "max_connections = 0",
            "network.egress.max_connections",
            "1..=4096",
        ),
        (
            "max_connections = 5000",
            "network.egress.max_connections",
            "1..=4096",
        ),
        (
            "max_rate = \"1Ki\"",
            "network.egress.max_rate",
            "below 65536 bytes per second",
        ),
        (
            "max_connection_rate = 0",
            "network.egress.max_connection_rate",
            "0 connections per second",
        ),
        ("listen = \"3128\"", "network.egress.listen", "address:port"),
        (
            "listen = \"0.0.0.0:3128\"",
            "network.egress.listen",
            "loopback",
        ),
        (
            "listen = \"127.0.0.1:0\"",
            "network.egress.listen",
            "loopback",
        ),
        (
            "forwarder = \"bin/fwd\"",
            "network.egress.forwarder",
            "absolute",
        ),
        ("forwarder_uid = 0", "network.egress.forwarder_uid", "root"),
    ];
    for (line, key, why) in cases {
        // The section header is repeated so each case's key lands on a known line.
        let src = format!("[network.egress]\n{line}\n");
        let err = Policy::from_toml_str(&src).unwrap_err();
        let PolicyError::Invalid {
            key: k,
            line: l,
            reason,
        } = &err
        else {
            panic!("{line}: {err}");
        };
        assert_eq!(k, key, "{line}");
        assert_eq!(*l, Some(2), "{line}: {err}");
        assert!(reason.contains(why), "{line}: {reason}");
    }
}

#[test]
fn unknown_egress_keys_are_parse_errors() {
    let err = load_err("alow = []\n");
    assert!(
        matches!(&err, PolicyError::Parse { key: Some(k), .. } if k.contains("egress")),
        "{err}"
    );
    assert!(err.to_string().contains("alow"), "{err}");
}

#[test]
fn an_allowlist_with_another_network_mode_is_a_contradiction() {
    let src = ON.replace("mode = \"none\"", "mode = \"sandbox\"");
    let err = Policy::from_toml_str(&src).unwrap_err();
    let PolicyError::Contradiction { keys, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(keys, &["network.egress.allow", "network.mode"]);
}

#[test]
fn the_forwarder_may_not_share_the_workloads_uid() {
    let err = Policy::from_toml_str(&format!("{ON}forwarder_uid = 65534\n")).unwrap_err();
    assert!(
        matches!(&err, PolicyError::Contradiction { keys, .. } if keys[1] == "user.uid"),
        "{err}"
    );
}

#[test]
fn egress_on_injects_proxy_env_and_the_forwarder_mount() {
    let mut spec = base_spec();
    spec["process"]["env"] = json!([
        "PATH=/bin",
        "HTTPS_PROXY=http://user:secret@elsewhere:8080",
        "no_proxy=*"
    ]);
    let h = harden(&spec, &on(), &Context::default()).unwrap();
    let env = env_of(&h.spec["process"]);
    assert_eq!(
        env,
        [
            "PATH=/bin",
            "HTTPS_PROXY=http://127.0.0.1:3128",
            "HTTP_PROXY=http://127.0.0.1:3128",
            "https_proxy=http://127.0.0.1:3128",
            "http_proxy=http://127.0.0.1:3128",
            "NO_PROXY=localhost,127.0.0.1,::1",
            "no_proxy=localhost,127.0.0.1,::1",
        ]
    );
    let mounts = h.spec["mounts"].as_array().unwrap();
    let fwd = mounts
        .iter()
        .find(|m| m["destination"] == FORWARDER_IN_SANDBOX)
        .expect("forwarder mount");
    assert_eq!(fwd["source"], DEFAULT_FORWARDER);
    assert_eq!(fwd["options"], json!(["bind", "ro", "nosuid", "nodev"]));
    let overrides: Vec<_> = h
        .decisions
        .iter()
        .filter(|d| d.rule == Rule::Egress && d.reason.starts_with("overrides"))
        .map(|d| d.field.as_str())
        .collect();
    assert_eq!(
        overrides,
        ["process.env[HTTPS_PROXY]", "process.env[no_proxy]"]
    );
    let text = serde_json::to_string(&h.decisions).unwrap();
    assert!(!text.contains("secret@"), "the spec's proxy URL leaked");
    assert_eq!(h.egress.unwrap().allow.len(), 3);
}

#[test]
fn a_spec_without_env_or_mounts_still_gets_both() {
    let mut spec = base_spec();
    spec["process"].as_object_mut().unwrap().remove("env");
    spec.as_object_mut().unwrap().remove("mounts");
    let h = harden(&spec, &on(), &Context::default()).unwrap();
    assert_eq!(env_of(&h.spec["process"]).len(), 6);
    assert!(h.spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["destination"] == FORWARDER_IN_SANDBOX));
}

#[test]
fn a_spec_mount_in_the_reserved_directory_is_rejected() {
    let mut spec = base_spec();
    spec["mounts"].as_array_mut().unwrap().push(json!({
        "destination": "/.gvisor-hardened/forwarder", "type": "bind",
        "source": "/tmp/evil", "options": ["bind"]
    }));
    let err = harden(&spec, &on(), &Context::default()).unwrap_err();
    let HardenError::Rejected(r) = &err else {
        panic!("{err}")
    };
    assert!(
        r.iter()
            .any(|r| r.rule == Rule::Egress && r.reason.contains("reserved")),
        "{err}"
    );
}

fn with_annotation(value: &str) -> Value {
    let mut spec = base_spec();
    spec["annotations"] = json!({ crate::annotations::EGRESS: value });
    spec
}

#[test]
fn the_annotation_narrows_the_allowlist() {
    let spec = with_annotation("a.pkg.example.test, api.example.test");
    let h = harden(&spec, &on(), &Context::default()).unwrap();
    let plan = h.egress.unwrap();
    assert!(plan.narrowed);
    let allow: Vec<String> = plan.allow.iter().map(|e| e.to_string()).collect();
    assert_eq!(allow, ["a.pkg.example.test:443", "api.example.test:443"]);
}

#[test]
fn the_annotation_never_widens() {
    for (value, names) in [
        ("evil.test", "evil.test:443"),
        ("api.example.test:80", "api.example.test:80"),
        ("*.example.test", "*.example.test:443"),
        ("pkg.example.test", "pkg.example.test:443"),
    ] {
        let err = harden(&with_annotation(value), &on(), &Context::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(names) && text.contains("not covered"),
            "{value}: {text}"
        );
    }
}

#[test]
fn the_annotation_cannot_turn_egress_on() {
    let err = harden(
        &with_annotation("api.example.test"),
        &Policy::default(),
        &Context::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("the policy allows no egress"),
        "{err}"
    );
}

#[test]
fn a_malformed_annotation_is_rejected() {
    let err = harden(
        &with_annotation("api.example.test,,"),
        &on(),
        &Context::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("gvisor-hardened.dev/egress"),
        "{err}"
    );
}

#[test]
fn an_empty_annotation_turns_egress_off_for_the_sandbox() {
    let h = harden(&with_annotation(""), &on(), &Context::default()).unwrap();
    assert_eq!(h.egress, None);
    assert!(!env_of(&h.spec["process"])
        .iter()
        .any(|e| e.contains("PROXY")));
    assert!(h
        .decisions
        .iter()
        .any(|d| d.rule == Rule::Egress && d.action == Action::Removed));
}

#[test]
fn an_exec_gets_the_proxy_env_and_the_plan() {
    let process =
        json!({"args": ["sh"], "env": ["http_proxy=http://x:1"], "user": {"uid": 1, "gid": 1}});
    let h = harden_process(&process, &on(), &Context::default()).unwrap();
    let env = env_of(&h.process);
    assert!(env.contains(&"http_proxy=http://127.0.0.1:3128".to_string()));
    assert_eq!(
        env.iter().filter(|e| e.starts_with("http_proxy=")).count(),
        1
    );
    assert!(h.egress.is_some());
    let off = harden_process(&process, &Policy::default(), &Context::default()).unwrap();
    assert_eq!(off.egress, None);
    assert_eq!(env_of(&off.process), ["http_proxy=http://x:1"]);
}

#[test]
fn audit_mode_reports_but_carries_no_plan() {
    let mut p = on();
    p.mode = Mode::Audit;
    let h = harden(&base_spec(), &p, &Context::default()).unwrap();
    assert_eq!(h.egress, None);
    assert!(h.decisions.iter().any(|d| d.rule == Rule::Egress));
}

#[test]
fn the_forwarder_process_has_its_own_uid_and_no_capabilities() {
    let plan = EgressPlan::from_policy(&on().network.egress)
        .unwrap()
        .unwrap();
    let p = plan.forwarder_process();
    assert_eq!(p["user"]["uid"], 65532);
    assert_eq!(p["user"]["gid"], 65532);
    for set in [
        "bounding",
        "effective",
        "inheritable",
        "permitted",
        "ambient",
    ] {
        assert_eq!(p["capabilities"][set], json!([]), "{set}");
    }
    assert_eq!(p["noNewPrivileges"], true);
    assert_eq!(p["cwd"], "/");
    assert_eq!(p["env"], json!([]));
    assert_eq!(
        p["args"],
        json!([
            FORWARDER_IN_SANDBOX,
            "--listen",
            "127.0.0.1:3128",
            "--max-connections",
            "512"
        ])
    );
}

#[test]
fn the_forwarders_descriptor_limit_follows_the_connection_cap() {
    let mut policy = on();
    policy.network.egress.max_connections = 1000;
    let plan = EgressPlan::from_policy(&policy.network.egress)
        .unwrap()
        .unwrap();
    assert_eq!(plan.max_connections, 1000);
    let p = plan.forwarder_process();
    assert_eq!(p["args"][4], "2000");
    assert_eq!(
        p["rlimits"],
        json!([{"type": "RLIMIT_NOFILE", "hard": 2064, "soft": 2064}])
    );
}

#[test]
fn a_plan_kept_before_the_connection_caps_loads_with_the_defaults() {
    let plan = EgressPlan::from_policy(&on().network.egress)
        .unwrap()
        .unwrap();
    let mut old = serde_json::to_value(&plan).unwrap();
    let o = old.as_object_mut().unwrap();
    o.remove("max_connections");
    o.remove("max_connection_rate");
    let loaded: EgressPlan = serde_json::from_value(old).unwrap();
    assert_eq!(loaded.max_connections, 256);
    assert_eq!(loaded.max_connection_rate, 100);
    assert_eq!(loaded.max_rate, None);
}

#[test]
fn max_rate_reaches_the_plan_in_bytes_per_second() {
    let mut policy = on();
    policy.network.egress.max_rate = Some(crate::quantity::ByteSize(10 << 20));
    let plan = EgressPlan::from_policy(&policy.network.egress)
        .unwrap()
        .unwrap();
    assert_eq!(plan.max_rate, Some(10 << 20));
}

#[test]
fn network_mode_none_is_what_egress_runs_with() {
    let h = harden(&base_spec(), &on(), &Context::default()).unwrap();
    assert_eq!(h.runsc.network, NetworkMode::None);
}

#[test]
fn a_workload_may_not_run_as_the_forwarders_uid() {
    let mut spec = base_spec();
    spec["process"]["user"] = json!({"uid": 65532, "gid": 1000});
    let err = harden(&spec, &on(), &Context::default()).unwrap_err();
    assert!(err.to_string().contains("forwarder's"), "{err}");
    let exec = json!({"args": ["sh"], "user": {"uid": 65532, "gid": 65532}});
    let err = harden_process(&exec, &on(), &Context::default()).unwrap_err();
    assert!(err.to_string().contains("process.user.uid"), "{err}");
    // Without egress the uid is nobody's in particular.
    assert!(harden(&spec, &Policy::default(), &Context::default()).is_ok());
}

fn args_of(spec: &Value) -> Vec<String> {
    spec["process"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_standalone_workload_starts_only_once_the_forwarder_listens() {
    let mut spec = base_spec();
    spec["process"]["args"] = json!(["sh", "-c", "echo hi"]);
    let h = harden(&spec, &on(), &Context::default()).unwrap();
    assert_eq!(
        args_of(&h.spec),
        [
            "/.gvisor-hardened/forwarder",
            "--await-listener",
            "127.0.0.1:3128",
            "--",
            "sh",
            "-c",
            "echo hi"
        ]
    );
    assert!(h
        .decisions
        .iter()
        .any(|d| d.rule == Rule::Egress && d.field == "process.args"));
    // Hardening the result again does not wrap it twice.
    let again = harden(&h.spec, &on(), &Context::default()).unwrap();
    assert_eq!(args_of(&again.spec), args_of(&h.spec));
}

#[test]
fn containers_of_a_pod_run_their_command_unchanged() {
    for kind in ["sandbox", "container"] {
        let mut spec = base_spec();
        spec["process"]["args"] = json!(["/pause"]);
        spec["annotations"] = json!({"io.kubernetes.cri.container-type": kind});
        let h = harden(&spec, &on(), &Context::default()).unwrap();
        assert_eq!(args_of(&h.spec), ["/pause"], "{kind}");
    }
}

#[test]
fn without_egress_the_command_is_untouched() {
    let mut spec = base_spec();
    spec["process"]["args"] = json!(["sh"]);
    let h = harden(&spec, &Policy::default(), &Context::default()).unwrap();
    assert_eq!(args_of(&h.spec), ["sh"]);
}

const CREDS: &str = r#"
upstream_ca = "/etc/gvisor-hardened/upstream-ca.pem"
[network.egress.credentials]
"API.example.test" = { header = "X-Api-Key", file = "/etc/gvisor-hardened/secrets/api-key", rules = ["POST /v1/messages", "GET /v1/models"] }
"#;

fn with_creds() -> Policy {
    Policy::from_toml_str(&format!("{ON}{CREDS}")).unwrap()
}

fn ctx(id: &str) -> Context {
    Context {
        container_id: id.into(),
        namespace: "k8s.io".into(),
        ..Context::default()
    }
}

#[test]
fn credentials_load_into_the_plan() {
    let plan = EgressPlan::from_policy(&with_creds().network.egress)
        .unwrap()
        .unwrap();
    let c = plan
        .credential("api.example.test", 443)
        .expect("normalised host, the default port");
    assert_eq!(c.header, "x-api-key");
    assert_eq!(c.file, "/etc/gvisor-hardened/secrets/api-key");
    assert_eq!(
        c.rules.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["POST /v1/messages", "GET /v1/models"]
    );
    assert_eq!(
        plan.upstream_ca_file(),
        "/etc/gvisor-hardened/upstream-ca.pem"
    );
    let back: EgressPlan = serde_json::from_value(serde_json::to_value(&plan).unwrap()).unwrap();
    assert_eq!(back, plan);
    let plain = EgressPlan::from_policy(&on().network.egress)
        .unwrap()
        .unwrap();
    assert_eq!(plain.upstream_ca_file(), NODE_TRUST_STORE);
    // A plan kept before credentials existed has none of their keys and loads.
    let old = serde_json::to_value(&plain).unwrap();
    assert!(old.get("credentials").is_none() && old.get("upstream_ca").is_none());
    assert_eq!(serde_json::from_value::<EgressPlan>(old).unwrap(), plain);
}

#[test]
fn a_credential_goes_to_its_host_and_port_only() {
    let policy = Policy::from_toml_str(&format!(
        "{ON}[network.egress.credentials]\n\"git.example.test:8443\" = {{ header = \"authorization\", file = \"/k\" }}\n\"api.example.test\" = {{ header = \"x-k\", file = \"/k2\" }}\n"
    ))
    .unwrap();
    let plan = EgressPlan::from_policy(&policy.network.egress)
        .unwrap()
        .unwrap();
    assert!(plan.credential("git.example.test", 8443).is_some());
    assert!(plan.credential("git.example.test", 443).is_none());
    assert!(plan.credential("api.example.test", 443).is_some());
    assert!(plan.credential("api.example.test", 8443).is_none());
    assert_eq!(
        plan.credential_hosts(),
        ["api.example.test", "git.example.test"]
    );
    // A plan runsc-hardened kept when the key was the host alone: that meant port 443.
    let mut old = serde_json::to_value(&plan).unwrap();
    let creds = old["credentials"].as_object_mut().unwrap();
    let c = creds.remove("api.example.test:443").unwrap();
    creds.insert("api.example.test".into(), c);
    let old: EgressPlan = serde_json::from_value(old).unwrap();
    assert!(old.credential("api.example.test", 443).is_some());
    assert!(old.credential("api.example.test", 8443).is_none());
}

#[test]
fn bad_credentials_name_the_key() {
    let cases = [
        (
            "[network.egress.credentials]\n\"other.test\" = { header = \"x-k\", file = \"/k\" }",
            "network.egress.credentials.other.test",
            "not listed by name",
        ),
        (
            "[network.egress.credentials]\n\"x.pkg.example.test\" = { header = \"x-k\", file = \"/k\" }",
            "network.egress.credentials.x.pkg.example.test",
            "not listed by name",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"Host\", file = \"/k\" }",
            "network.egress.credentials.api.example.test.header",
            "frames the request",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"a b\", file = \"/k\" }",
            "network.egress.credentials.api.example.test.header",
            "not a header name",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"x-k\", file = \"k\" }",
            "network.egress.credentials.api.example.test.file",
            "absolute",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"x-k\", file = \"/k\", rules = [\"GET /a/../b\"] }",
            "network.egress.credentials.api.example.test.rules[0]",
            "a dot segment",
        ),
        (
            // git.example.test is allowed on 8443 only: a credential for its 443 is no entry's.
            "[network.egress.credentials]\n\"git.example.test\" = { header = \"x-k\", file = \"/k\" }",
            "network.egress.credentials.git.example.test",
            "git.example.test:443 is not listed by name and port in allow",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test:8443\" = { header = \"x-k\", file = \"/k\" }",
            "network.egress.credentials.api.example.test:8443",
            "not listed by name and port",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"x-k\", file = \"/k\" }\n\"api.example.test:443\" = { header = \"x-k\", file = \"/k\" }",
            "network.egress.credentials.api.example.test",
            "api.example.test:443 has a credential twice",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"x-k\", file = \"/k\", rules = [\"GET /v1/models/..;/admin\"] }",
            "network.egress.credentials.api.example.test.rules[0]",
            "a ; parameter",
        ),
        (
            "[network.egress.credentials]\n\"api.example.test\" = { header = \"x-k\", file = \"/k\", value = \"s\" }",
            "network.egress.credentials",
            "unknown field",
        ),
    ];
    for (extra, key, words) in cases {
        let text = format!("{}", load_err(&format!("\n{extra}\n")));
        assert!(
            text.contains(key) && text.contains(words),
            "{extra}: {text}"
        );
    }
    let text = format!("{}", load_err("upstream_ca = \"ca.pem\"\n"));
    assert!(text.contains("network.egress.upstream_ca"), "{text}");
}

#[test]
fn credentials_add_the_ca_bundle_mount_and_variables() {
    let mut spec = base_spec();
    spec["process"]["env"] = json!(["PATH=/bin", "SSL_CERT_FILE=/workload/own.pem"]);
    let h = harden(&spec, &with_creds(), &ctx("sb1")).unwrap();
    let env = env_of(&h.spec["process"]);
    for var in CA_VARS {
        let want = format!("{var}={CA_BUNDLE_IN_SANDBOX}");
        assert_eq!(
            env.iter()
                .filter(|e| e.starts_with(&format!("{var}=")))
                .count(),
            1,
            "{var}: {env:?}"
        );
        assert!(env.contains(&want), "{want}: {env:?}");
    }
    let ca = h.spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == CA_BUNDLE_IN_SANDBOX)
        .expect("CA bundle mount");
    assert_eq!(
        ca["source"],
        "/run/gvisor-hardened-egress-ca/k8s.io/sb1/ca-bundle.pem"
    );
    assert_eq!(
        ca["options"],
        json!(["bind", "ro", "nosuid", "nodev", "noexec"])
    );
    // Hardening the result again gives the same spec (our own mount is not "in the reserved
    // directory").
    let again = harden(&h.spec, &with_creds(), &ctx("sb1")).unwrap();
    assert_eq!(again.spec["mounts"], h.spec["mounts"]);
    // A pod's container uses its sandbox's bundle.
    let mut member = base_spec();
    member["annotations"] = json!({
        "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.cri.sandbox-id": "pod1"
    });
    let m = harden(&member, &with_creds(), &ctx("c2")).unwrap();
    assert!(m.spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|x| x["source"] == "/run/gvisor-hardened-egress-ca/k8s.io/pod1/ca-bundle.pem"));
    // An exec gets the variables too.
    let process =
        json!({"args": ["sh"], "env": ["CURL_CA_BUNDLE=/x"], "user": {"uid": 1, "gid": 1}});
    let e = harden_process(&process, &with_creds(), &ctx("sb1")).unwrap();
    assert!(env_of(&e.process).contains(&format!("CURL_CA_BUNDLE={CA_BUNDLE_IN_SANDBOX}")));
    // Without credentials: no bundle, the workload's own variables stay.
    let plain = harden(&spec, &on(), &ctx("sb1")).unwrap();
    assert!(env_of(&plain.spec["process"]).contains(&"SSL_CERT_FILE=/workload/own.pem".to_string()));
    assert!(!plain.spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["destination"] == CA_BUNDLE_IN_SANDBOX));
}
