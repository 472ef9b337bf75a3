//! The CEL of our admission policies, evaluated on fixture objects with the `cel` crate.
//!
//! This is a logic test of the expressions, not a conformance oracle: the `cel` crate lacks
//! Kubernetes' CEL libraries and optional syntax, so the policies are written in the common
//! subset (has(), in, all/exists, ternaries, startsWith, map indexing) and every expression here
//! is evaluated. Not covered: the MutatingAdmissionPolicy's `Object{...}` apply configuration
//! (Kubernetes-only syntax; its matchCondition is evaluated), and admission plumbing itself
//! (binding selectors, failurePolicy, messageExpression), which needs a real API server.

use std::path::{Path, PathBuf};

use cel::{Context, Program, Value};
use serde_json::{json, Value as Json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One admission policy's expressions, read from its manifest.
struct Policy {
    name: String,
    match_conditions: Vec<String>,
    validations: Vec<(String, String)>,
}

fn load_policies(file: &str) -> Vec<Policy> {
    let text = std::fs::read_to_string(repo().join(file)).unwrap();
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Json = serde::Deserialize::deserialize(doc).unwrap();
        let kind = v["kind"].as_str().unwrap_or_default();
        if !kind.ends_with("AdmissionPolicy") {
            continue;
        }
        let spec = &v["spec"];
        out.push(Policy {
            name: v["metadata"]["name"].as_str().unwrap().to_string(),
            match_conditions: spec["matchConditions"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| c["expression"].as_str().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default(),
            validations: spec["validations"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|c| {
                            (
                                c["expression"].as_str().unwrap().to_string(),
                                c["message"].as_str().unwrap_or_default().to_string(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    assert!(!out.is_empty(), "{file}: no policies");
    out
}

fn policy(file: &str, name: &str) -> Policy {
    load_policies(file)
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("{file}: no policy {name}"))
}

fn eval(expr: &str, object: &Json, old: &Json, request: &Json) -> bool {
    let program =
        Program::compile(expr).unwrap_or_else(|e| panic!("does not compile: {expr}\n{e:?}"));
    let mut ctx = Context::default();
    ctx.add_variable("object", object.clone()).unwrap();
    ctx.add_variable("oldObject", old.clone()).unwrap();
    ctx.add_variable("request", request.clone()).unwrap();
    match program.execute(&ctx) {
        Ok(Value::Bool(b)) => b,
        other => panic!("expression did not evaluate to a bool: {expr}\n=> {other:?}"),
    }
}

#[derive(Debug, PartialEq)]
enum Verdict {
    NotMatched,
    Allowed,
    Denied(Vec<String>),
}

fn admit(p: &Policy, object: &Json, old: &Json, request: &Json) -> Verdict {
    if !p
        .match_conditions
        .iter()
        .all(|c| eval(c, object, old, request))
    {
        return Verdict::NotMatched;
    }
    let denied: Vec<String> = p
        .validations
        .iter()
        .filter(|(e, _)| !eval(e, object, old, request))
        .map(|(_, m)| m.clone())
        .collect();
    if denied.is_empty() {
        Verdict::Allowed
    } else {
        Verdict::Denied(denied)
    }
}

fn create() -> Json {
    json!({"operation": "CREATE", "userInfo": {"username": "alice", "groups": ["system:authenticated"]}})
}

fn pod(spec: Json) -> Json {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "agents"}, "spec": spec})
}

fn base_spec() -> Json {
    json!({"runtimeClassName": "gvisor-hardened", "containers": [{"name": "c", "image": "busybox"}]})
}

fn with(mut v: Json, pointer: &str, value: Json) -> Json {
    *v.pointer_mut(pointer)
        .unwrap_or_else(|| panic!("{pointer}")) = value;
    v
}

fn example_pods() -> Vec<(String, Json)> {
    let mut out = Vec::new();
    for file in ["pod.yaml", "tool-job.yaml", "agent-sandbox.yaml"] {
        let text =
            std::fs::read_to_string(repo().join("runtimeclass/examples").join(file)).unwrap();
        let v: Json = serde_yaml_ng::from_str(&text).unwrap();
        let spec = match v["kind"].as_str().unwrap() {
            "Pod" => v["spec"].clone(),
            "Job" => v["spec"]["template"]["spec"].clone(),
            "Sandbox" => v["spec"]["podTemplate"]["spec"].clone(),
            k => panic!("unexpected example kind {k}"),
        };
        out.push((file.to_string(), pod(spec)));
    }
    out
}

const REQUIRE: &str = "runtimeclass/admission/require-runtimeclass.yaml";
const HOST: &str = "runtimeclass/admission/deny-host-access.yaml";
const TOKENS: &str = "runtimeclass/admission/deny-token-volumes.yaml";
const PROTECT: &str = "runtimeclass/admission/protect-runtimeclasses.yaml";
const SCOPE: &str = "deploy/kustomize/common/installer-scope.yaml";
const MUTATE: &str = "runtimeclass/admission-mutating/default-runtimeclass.yaml";

#[test]
fn examples_pass_every_pod_policy() {
    let req = policy(REQUIRE, "gvisor-hardened-require-runtimeclass");
    let host = policy(HOST, "gvisor-hardened-deny-host-access");
    let tokens = policy(TOKENS, "gvisor-hardened-deny-token-volumes");
    for (name, p) in example_pods() {
        assert_eq!(
            admit(&tokens, &p, &Json::Null, &create()),
            Verdict::Allowed,
            "{name}"
        );
        assert_eq!(
            admit(&req, &p, &Json::Null, &create()),
            Verdict::Allowed,
            "{name}"
        );
        assert_eq!(
            admit(&host, &p, &Json::Null, &create()),
            Verdict::Allowed,
            "{name}"
        );
    }
}

#[test]
fn runtime_class_must_be_one_of_ours() {
    let req = policy(REQUIRE, "gvisor-hardened-require-runtimeclass");
    let r = create();
    for ok in [
        "gvisor-hardened",
        "gvisor-hardened-tool",
        "gvisor-hardened-agent",
    ] {
        let p = pod(with(base_spec(), "/runtimeClassName", json!(ok)));
        assert_eq!(admit(&req, &p, &Json::Null, &r), Verdict::Allowed, "{ok}");
    }
    let missing = pod(json!({"containers": [{"name": "c", "image": "busybox"}]}));
    for (case, p) in [
        ("missing", missing),
        (
            "runc",
            pod(with(base_spec(), "/runtimeClassName", json!("runc"))),
        ),
        (
            "lookalike",
            pod(with(
                base_spec(),
                "/runtimeClassName",
                json!("gvisor-hardened-x"),
            )),
        ),
    ] {
        match admit(&req, &p, &Json::Null, &r) {
            Verdict::Denied(m) => {
                assert!(m[0].contains("set spec.runtimeClassName"), "{case}: {m:?}")
            }
            v => panic!("{case}: {v:?}"),
        }
    }
}

#[test]
fn host_access_is_denied_with_the_rule_named() {
    let host = policy(HOST, "gvisor-hardened-deny-host-access");
    let r = create();
    let privileged = json!([{"securityContext": {"privileged": true}, "name": "x", "image": "i"}]);
    let cases: Vec<(&str, &str, Json, &str)> = vec![
        (
            "hostNetwork",
            "hostNetwork",
            json!(true),
            "hostNetwork is not allowed",
        ),
        ("hostPID", "hostPID", json!(true), "hostPID is not allowed"),
        ("hostIPC", "hostIPC", json!(true), "hostIPC is not allowed"),
        (
            "hostPath",
            "volumes",
            json!([{"name": "e", "emptyDir": {}}, {"name": "h", "hostPath": {"path": "/var/run"}}]),
            "hostPath volumes are not allowed",
        ),
        (
            "privileged container",
            "containers",
            json!([{"name": "c", "image": "i"}, privileged[0].clone()]),
            "privileged containers are not allowed",
        ),
        (
            "privileged init container",
            "initContainers",
            privileged.clone(),
            "privileged containers are not allowed",
        ),
        (
            "privileged ephemeral container",
            "ephemeralContainers",
            privileged.clone(),
            "privileged containers are not allowed",
        ),
    ];
    let cases: Vec<(&str, Json, &str)> = cases
        .into_iter()
        .map(|(name, key, value, expect)| {
            let mut spec = base_spec();
            spec.as_object_mut().unwrap().insert(key.into(), value);
            (name, spec, expect)
        })
        .collect();
    for (name, spec, expect) in cases {
        match admit(&host, &pod(spec), &Json::Null, &r) {
            Verdict::Denied(m) => {
                assert_eq!(m.len(), 1, "{name}: {m:?}");
                assert!(m[0].contains(expect), "{name}: {m:?}");
            }
            v => panic!("{name}: {v:?}"),
        }
    }
}

#[test]
fn explicit_false_host_settings_are_allowed() {
    let host = policy(HOST, "gvisor-hardened-deny-host-access");
    let mut spec = base_spec();
    let m = spec.as_object_mut().unwrap();
    for k in ["hostNetwork", "hostPID", "hostIPC"] {
        m.insert(k.into(), json!(false));
    }
    m.insert(
        "containers".into(),
        json!([{"name": "c", "image": "i", "securityContext": {"privileged": false, "runAsUser": 1000}}]),
    );
    m.insert("volumes".into(), json!([{"name": "e", "emptyDir": {}}]));
    assert_eq!(
        admit(&host, &pod(spec), &Json::Null, &create()),
        Verdict::Allowed
    );
}

/// A pod whose `group` has one container mounting, from volume `volume`, at `paths`.
fn mounting(volume: Json, group: &str, paths: &[&str]) -> Json {
    let name = volume["name"].clone();
    let mounts: Vec<Json> = paths
        .iter()
        .map(|p| json!({"name": name, "mountPath": p}))
        .collect();
    let mut s = base_spec();
    s["volumes"] = json!([volume]);
    s[group] = json!([{"name": "x", "image": "i", "volumeMounts": mounts}]);
    pod(s)
}

#[test]
fn token_volumes_are_allowed_only_where_the_runtime_removes_them() {
    let p = policy(TOKENS, "gvisor-hardened-deny-token-volumes");
    // What kubelet's kube-api-access-* is: a projected serviceAccountToken + CA bundle.
    let token = json!({"name": "t", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt"}}]}});
    let config = json!({"name": "t", "projected": {"sources": [{"configMap": {"name": "x"}}]}});
    let secret = json!({"name": "t", "secret": {"secretName": "default-token-x1"}});
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let sa_file = format!("{sa}/token");
    let sa_lookalike = format!("{sa}-copy");
    for (case, obj) in [
        (
            "at the default path",
            mounting(token.clone(), "containers", &[sa]),
        ),
        (
            "below it",
            mounting(token.clone(), "containers", &[&sa_file]),
        ),
        (
            "mounted by nobody",
            mounting(token.clone(), "containers", &[]),
        ),
        (
            "no token source",
            mounting(config, "containers", &["/config"]),
        ),
        (
            "a secret (left to the runtime)",
            mounting(secret, "containers", &["/t"]),
        ),
    ] {
        assert_eq!(
            admit(&p, &obj, &Json::Null, &create()),
            Verdict::Allowed,
            "{case}"
        );
    }
    for (case, obj) in [
        (
            "container",
            mounting(token.clone(), "containers", &["/tokens"]),
        ),
        (
            "init container",
            mounting(token.clone(), "initContainers", &["/tokens"]),
        ),
        (
            "ephemeral",
            mounting(token.clone(), "ephemeralContainers", &["/tokens"]),
        ),
        (
            "default and elsewhere",
            mounting(token.clone(), "containers", &[sa, "/t"]),
        ),
        (
            "lookalike path",
            mounting(token.clone(), "containers", &[&sa_lookalike]),
        ),
    ] {
        match admit(&p, &obj, &Json::Null, &create()) {
            Verdict::Denied(m) => assert!(
                m.len() == 1 && m[0].contains("serviceAccountToken volume may only be mounted at"),
                "{case}: {m:?}"
            ),
            v => panic!("{case}: {v:?}"),
        }
    }
}

fn runtime_class(name: &str) -> Json {
    let file = repo().join(format!("runtimeclass/runtimeclass-{name}.yaml"));
    serde_yaml_ng::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
}

fn request(op: &str, groups: &[&str]) -> Json {
    json!({"operation": op, "userInfo": {"username": "u", "groups": groups}})
}

#[test]
fn our_runtime_classes_are_changed_only_by_admins_and_never_repointed() {
    let p = policy(PROTECT, "gvisor-hardened-protect-runtimeclasses");
    let admin = ["system:authenticated", "gvisor-hardened:admins"];
    let user = ["system:authenticated"];
    for name in [
        "gvisor-hardened",
        "gvisor-hardened-tool",
        "gvisor-hardened-agent",
    ] {
        let rc = runtime_class(name);
        assert_eq!(
            admit(&p, &rc, &Json::Null, &request("CREATE", &admin)),
            Verdict::Allowed
        );
        assert_eq!(
            admit(&p, &rc, &rc, &request("UPDATE", &["system:masters"])),
            Verdict::Allowed
        );
        assert_eq!(
            admit(&p, &Json::Null, &rc, &request("DELETE", &admin)),
            Verdict::Allowed
        );
        for (op, obj, old) in [
            ("CREATE", rc.clone(), Json::Null),
            ("UPDATE", rc.clone(), rc.clone()),
            ("DELETE", Json::Null, rc.clone()),
        ] {
            match admit(&p, &obj, &old, &request(op, &user)) {
                Verdict::Denied(m) => assert!(
                    m[0].contains("only members of gvisor-hardened:admins"),
                    "{m:?}"
                ),
                v => panic!("{name} {op} by a user: {v:?}"),
            }
        }
        // Even an admin cannot point it at runc or schedule it anywhere.
        let repointed = with(rc.clone(), "/handler", json!("runc"));
        let unscheduled = with(rc.clone(), "/scheduling", json!({}));
        for bad in [repointed, unscheduled] {
            match admit(&p, &bad, &rc, &request("UPDATE", &admin)) {
                Verdict::Denied(m) => assert!(m[0].contains("must keep handler equal"), "{m:?}"),
                v => panic!("{name}: {v:?}"),
            }
        }
    }
    // Other RuntimeClasses are none of this policy's business.
    let other = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata"});
    assert_eq!(
        admit(&p, &other, &Json::Null, &request("CREATE", &user)),
        Verdict::NotMatched
    );
    assert_eq!(
        admit(&p, &Json::Null, &other, &request("DELETE", &user)),
        Verdict::NotMatched
    );
}

fn node(name: &str, labels: Json) -> Json {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": labels, "annotations": {"a": "1"}},
           "spec": {"podCIDR": "10.0.0.0/24"}}) // net-scan: data (a Node's podCIDR)
}

fn installer_request(node: &str) -> Json {
    json!({"operation": "UPDATE", "userInfo": {
        "username": "system:serviceaccount:gvisor-hardened-system:gvisor-hardened-installer",
        "groups": ["system:serviceaccounts"],
        "extra": {"authentication.kubernetes.io/node-name": [node]}}})
}

#[test]
fn installer_may_only_touch_our_labels_on_its_own_node() {
    let p = policy(SCOPE, "gvisor-hardened-installer-scope");
    let before = node("node-a", json!({"kubernetes.io/hostname": "node-a"}));
    let labelled = node(
        "node-a",
        json!({"kubernetes.io/hostname": "node-a", "gvisor-hardened.dev/installed": "true"}),
    );
    let r = installer_request("node-a");
    assert_eq!(admit(&p, &labelled, &before, &r), Verdict::Allowed, "label");
    assert_eq!(
        admit(&p, &before, &labelled, &r),
        Verdict::Allowed,
        "unlabel"
    );

    let deny = |obj: &Json, old: &Json, req: &Json, want: &str| match admit(&p, obj, old, req) {
        Verdict::Denied(m) => assert!(m.iter().any(|x| x.contains(want)), "{want}: {m:?}"),
        v => panic!("{want}: {v:?}"),
    };
    let other_node_before = node("node-b", json!({}));
    let other_node_after = node("node-b", json!({"gvisor-hardened.dev/installed": "true"}));
    deny(
        &other_node_after,
        &other_node_before,
        &r,
        "only change its own node",
    );
    let foreign = node(
        "node-a",
        json!({"kubernetes.io/hostname": "node-a", "node-role.kubernetes.io/control-plane": ""}),
    );
    deny(
        &foreign,
        &before,
        &r,
        "only add or change gvisor-hardened.dev/ labels",
    );
    let relabelled = node("node-a", json!({"kubernetes.io/hostname": "evil"}));
    deny(
        &relabelled,
        &before,
        &r,
        "only add or change gvisor-hardened.dev/ labels",
    );
    let removed = node("node-a", json!({}));
    deny(
        &removed,
        &before,
        &r,
        "only remove gvisor-hardened.dev/ labels",
    );
    let tainted = with(
        before.clone(),
        "/spec",
        json!({"podCIDR": "10.0.0.0/24", "taints": [{"key": "x", "effect": "NoSchedule"}]}), // net-scan: data
    );
    deny(&tainted, &before, &r, "may not change a node's spec");
    let annotated = with(before.clone(), "/metadata/annotations", json!({"a": "2"}));
    deny(
        &annotated,
        &before,
        &r,
        "may not change a node's spec or annotations",
    );
    // A token without the node binding is refused outright.
    let unbound = json!({"operation": "UPDATE", "userInfo": {
        "username": "system:serviceaccount:gvisor-hardened-system:gvisor-hardened-installer"}});
    deny(&labelled, &before, &unbound, "only change its own node");

    // Anyone else is not matched (RBAC decides for them).
    let kubelet = json!({"operation": "UPDATE", "userInfo": {"username": "system:node:node-a"}});
    assert_eq!(admit(&p, &foreign, &before, &kubelet), Verdict::NotMatched);
}

#[test]
fn mutating_policy_matches_only_pods_without_a_runtime_class() {
    let p = policy(MUTATE, "gvisor-hardened-default-runtimeclass");
    assert!(p.validations.is_empty());
    let without = pod(json!({"containers": [{"name": "c", "image": "i"}]}));
    let with_rc = pod(base_spec());
    assert_eq!(
        admit(&p, &without, &Json::Null, &create()),
        Verdict::Allowed
    );
    assert_eq!(
        admit(&p, &with_rc, &Json::Null, &create()),
        Verdict::NotMatched
    );
}

#[test]
fn every_policy_expression_compiles_with_the_cel_crate() {
    let mut n = 0;
    for file in [REQUIRE, HOST, TOKENS, PROTECT, SCOPE, MUTATE] {
        for p in load_policies(file) {
            for e in p
                .match_conditions
                .iter()
                .chain(p.validations.iter().map(|(e, _)| e))
            {
                Program::compile(e).unwrap_or_else(|err| panic!("{file} {}: {e}\n{err:?}", p.name));
                n += 1;
            }
        }
    }
    assert_eq!(
        n, 16,
        "expression count changed: update the tests to cover the new ones"
    );
}
