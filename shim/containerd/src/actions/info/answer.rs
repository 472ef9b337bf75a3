//! The `containerd.types.RuntimeInfo` the `-info` action prints, built from facts the action
//! gathered (pure: no I/O here).
//!
//! What goes in, and why:
//! - `name`: the runtime type containerd knows us by, as containerd-shim-runc-v2 answers
//!   `io.containerd.runc.v2`.
//! - `version`: this crate's version; no revision (the build records none).
//! - `options`: the runtime options containerd sent, echoed back when they are the type this
//!   shim reads (`runtimeoptions.v1.Options`, carrying the policy path). runc's options type is
//!   accepted and ignored by the shim, so it is not echoed as if it were in force.
//! - `features`: the OCI features document (runtime-spec `features.md`) of the runsc the policy
//!   names, narrowed to what a container of this runtime can actually get ([`hardened_features`]).
//!   containerd reads it in two places: CRI at startup (`mountOptions` containing `rro` turns on
//!   recursive read-only mounts for kubelet; `linux.namespaces` containing `user` plus
//!   `mountExtensions.idmap.enabled` turns on `hostUsers: false` pods), and a Create whose spec
//!   has idmapped mounts (refused unless `idmap` is enabled). Absent when the runsc has no
//!   `features` subcommand (20221219), as runc's shim leaves it out when `runc features` fails.
//! - `annotations`: facts about this runtime for an operator (`ctr plugins inspect-runtime`):
//!   which policy a Create with these options would load, its hash and mode, which runsc.
//!   Not `containerd.io/runtime-allow-mounts` (deprecated): the shim mounts the overlay and
//!   bind rootfs containerd gives it, and claims nothing else, so containerd's mount manager
//!   keeps doing any other mount type.

use std::collections::HashMap;

use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::types::introspection::{RuntimeInfo, RuntimeVersion};
use policy_injector::{Mode, Policy};
use serde_json::{Map, Value};

use gvisor_hardened_core::policy_source::LoadedPolicy;

/// The runtime type containerd's config names us by.
pub const RUNTIME_NAME: &str = "io.containerd.gvisor-hardened.v1";

/// typeurl's name for runtime-spec's `features.Features`, as containerd registers it
/// (`core/runtime/typeurl.go`). It is a Go struct, not a protobuf message, so typeurl encodes
/// the value as JSON.
pub const FEATURES_TYPE_URL: &str =
    "types.containerd.io/opencontainers/runtime-spec/1/features/Features";

/// The keys of `RuntimeInfo.annotations`. Their own prefix, so they are never mistaken for the
/// `gvisor-hardened.dev/*` spec annotations a workload tightens its limits with.
pub mod keys {
    pub const POLICY: &str = "info.gvisor-hardened.dev/policy";
    pub const POLICY_SHA256: &str = "info.gvisor-hardened.dev/policy-sha256";
    pub const POLICY_MODE: &str = "info.gvisor-hardened.dev/policy-mode";
    pub const RUNSC: &str = "info.gvisor-hardened.dev/runsc";
    /// Set only when `features` is absent: why runsc gave none.
    pub const RUNSC_FEATURES: &str = "info.gvisor-hardened.dev/runsc-features";
}

/// What the action found out.
pub struct Facts<'a> {
    /// The options containerd sent, if they are the type the shim reads.
    pub options: Option<Any>,
    pub policy: &'a LoadedPolicy,
    /// The runsc binary the policy resolves to.
    pub runsc: String,
    /// `runsc features`, parsed, or why there is none.
    pub runsc_features: Result<Value, String>,
}

pub fn build(facts: Facts<'_>) -> RuntimeInfo {
    let mut info = RuntimeInfo::new();
    info.name = RUNTIME_NAME.to_string();
    let mut version = RuntimeVersion::new();
    version.version = env!("CARGO_PKG_VERSION").to_string();
    info.version = Some(version).into();
    info.options = facts.options.into();

    let mut annotations = HashMap::new();
    annotations.insert(keys::POLICY.to_string(), facts.policy.source.display_path());
    annotations.insert(keys::POLICY_SHA256.to_string(), facts.policy.sha256.clone());
    annotations.insert(
        keys::POLICY_MODE.to_string(),
        match facts.policy.policy.mode {
            Mode::Enforce => "enforce",
            Mode::Audit => "audit",
        }
        .to_string(),
    );
    annotations.insert(keys::RUNSC.to_string(), facts.runsc);

    let features = facts.runsc_features.and_then(|doc| {
        hardened_features(doc, &facts.policy.policy)
            .ok_or_else(|| "`runsc features` printed no JSON object".to_string())
    });
    match features {
        Ok(doc) => {
            let mut any = Any::new();
            any.type_url = FEATURES_TYPE_URL.to_string();
            any.value = serde_json::to_vec(&doc).expect("a JSON value serialises");
            info.features = Some(any).into();
        }
        Err(why) => {
            annotations.insert(
                keys::RUNSC_FEATURES.to_string(),
                format!("unavailable: {}", first_line(&why, 200)),
            );
        }
    }
    info.annotations = annotations;
    info
}

/// runsc's features document narrowed to what a container of this runtime can get. `None` if
/// `runsc` is not a JSON object.
///
/// - User namespaces and idmapped mounts are taken out (`linux.namespaces` loses `user`,
///   `mountExtensions.idmap.enabled` becomes false): runsc has them, but nothing has run them
///   through the hardening (the forced user, the read-only root, the workspace staging), so CRI
///   must not offer `hostUsers: false` pods on this runtime and containerd must refuse idmapped
///   mounts before the shim sees them.
/// - Enforce mode: `hooks` becomes empty when the policy rejects every hook, and the
///   annotations the policy strips (`dev.gvisor.*`: runsc lists one per flag it lets an
///   annotation override) leave `annotations` and `potentiallyUnsafeConfigAnnotations`.
///   Audit mode runs the spec as given, so those stay as runsc says.
pub fn hardened_features(runsc: Value, policy: &Policy) -> Option<Value> {
    let Value::Object(mut doc) = runsc else {
        return None;
    };
    if let Some(Value::Object(linux)) = doc.get_mut("linux") {
        if let Some(Value::Array(namespaces)) = linux.get_mut("namespaces") {
            namespaces.retain(|n| n != "user");
        }
        if let Some(Value::Object(ext)) = linux.get_mut("mountExtensions") {
            if ext.contains_key("idmap") {
                ext.insert("idmap".into(), serde_json::json!({"enabled": false}));
            }
        }
    }
    if policy.mode == Mode::Enforce {
        if policy.hooks.reject {
            doc.insert("hooks".into(), Value::Array(Vec::new()));
        }
        let stripped = |key: &str| {
            policy
                .annotations
                .strip_prefixes
                .iter()
                .any(|p| key.starts_with(p.as_str()))
        };
        if let Some(Value::Object(annotations)) = doc.get_mut("annotations") {
            annotations.retain(|k, _| !stripped(k));
        }
        if let Some(Value::Array(unsafe_keys)) = doc.get_mut("potentiallyUnsafeConfigAnnotations") {
            unsafe_keys.retain(|k| !k.as_str().is_some_and(stripped));
        }
        drop_if_empty(&mut doc, "annotations");
        drop_if_empty(&mut doc, "potentiallyUnsafeConfigAnnotations");
    }
    Some(Value::Object(doc))
}

/// The first line of `text`, at most `max` characters: runsc answers an unknown subcommand
/// with its whole usage text.
fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim_end();
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_string(),
    }
}

/// runtime-spec marks these `omitempty`: an empty one says nothing, so it goes.
fn drop_if_empty(doc: &mut Map<String, Value>, key: &str) {
    let empty = match doc.get(key) {
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    };
    if empty {
        doc.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::protobuf::Message;
    use gvisor_hardened_core::policy_source::{self, PolicySource};
    use serde_json::json;

    /// Trimmed from the output of runsc v0.0.0-20260905035102-160fafc42237.
    fn runsc_features() -> Value {
        json!({
            "ociVersionMin": "1.0.0",
            "ociVersionMax": "1.2.1",
            "hooks": ["prestart", "createRuntime", "poststop"],
            "mountOptions": ["bind", "nodev", "ro", "rbind"],
            "linux": {
                "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"],
                "cgroup": {"v1": true, "v2": false},
                "seccomp": {"enabled": true},
                "mountExtensions": {"idmap": {"enabled": true}}
            },
            "annotations": {
                "dev.gvisor.flag.allow-flag-override": "false",
                "dev.gvisor.flag.directfs": "true"
            },
            "potentiallyUnsafeConfigAnnotations": ["dev.gvisor.flag."]
        })
    }

    fn facts(policy: &LoadedPolicy, features: Result<Value, String>) -> Facts<'_> {
        Facts {
            options: None,
            policy,
            runsc: "/usr/local/bin/runsc".into(),
            runsc_features: features,
        }
    }

    fn decoded(info: RuntimeInfo) -> RuntimeInfo {
        RuntimeInfo::parse_from_bytes(&info.write_to_bytes().unwrap()).unwrap()
    }

    fn features_of(info: &RuntimeInfo) -> Value {
        let any = info.features.as_ref().expect("features present");
        assert_eq!(any.type_url, FEATURES_TYPE_URL);
        serde_json::from_slice(&any.value).expect("features are JSON")
    }

    #[test]
    fn name_and_version_have_the_wire_form_containerd_decodes() {
        let policy = policy_source::embedded();
        let mut info = build(facts(&policy, Err("none".into())));
        // Only the first two fields, so the bytes are fixed: field 1 (name), field 2 (a
        // RuntimeVersion whose field 1 is the version), both length-delimited.
        info.annotations.clear();
        let bytes = info.write_to_bytes().unwrap();
        let version = env!("CARGO_PKG_VERSION");
        let mut want = vec![0x0a, RUNTIME_NAME.len() as u8];
        want.extend_from_slice(RUNTIME_NAME.as_bytes());
        want.extend_from_slice(&[0x12, version.len() as u8 + 2, 0x0a, version.len() as u8]);
        want.extend_from_slice(version.as_bytes());
        assert_eq!(bytes, want);
    }

    #[test]
    fn encoded_info_carries_hardened_features_as_typeurl_json() {
        let policy = policy_source::embedded();
        let info = decoded(build(facts(&policy, Ok(runsc_features()))));
        assert_eq!(info.name, "io.containerd.gvisor-hardened.v1");
        assert_eq!(info.version.version, env!("CARGO_PKG_VERSION"));
        assert!(info.options.is_none());
        let f = features_of(&info);
        assert_eq!(f["ociVersionMax"], "1.2.1");
        assert_eq!(f["hooks"], json!([]));
        assert_eq!(f["mountOptions"], json!(["bind", "nodev", "ro", "rbind"]));
        assert_eq!(
            f["linux"]["namespaces"],
            json!(["cgroup", "ipc", "mount", "network", "pid", "uts"])
        );
        assert_eq!(
            f["linux"]["mountExtensions"]["idmap"]["enabled"],
            json!(false)
        );
        assert!(f.get("annotations").is_none(), "{f}");
        assert!(f.get("potentiallyUnsafeConfigAnnotations").is_none());
        assert!(!info.annotations.contains_key(keys::RUNSC_FEATURES));
    }

    #[test]
    fn annotations_name_the_policy_and_runsc() {
        let policy = policy_source::embedded();
        let info = decoded(build(facts(&policy, Ok(runsc_features()))));
        let a = &info.annotations;
        assert_eq!(a[keys::POLICY], "<embedded default>");
        assert_eq!(a[keys::POLICY_SHA256], policy.sha256);
        assert_eq!(a[keys::POLICY_MODE], "enforce");
        assert_eq!(a[keys::RUNSC], "/usr/local/bin/runsc");
        assert!(
            !a.contains_key("containerd.io/runtime-allow-mounts"),
            "the shim claims no mount types from containerd's mount manager"
        );
    }

    #[test]
    fn runtime_options_are_echoed() {
        let policy = policy_source::embedded();
        let mut any = Any::new();
        any.type_url = "runtimeoptions.v1.Options".into();
        any.value = b"\x12\x07/p.toml".to_vec();
        let mut f = facts(&policy, Err("none".into()));
        f.options = Some(any.clone());
        let info = decoded(build(f));
        assert_eq!(info.options.as_ref(), Some(&any));
    }

    #[test]
    fn a_runsc_without_features_gives_none_and_says_why() {
        let policy = policy_source::embedded();
        let info = decoded(build(facts(
            &policy,
            Err("runsc features exited 128: unknown subcommand".into()),
        )));
        assert!(info.features.is_none());
        assert_eq!(
            info.annotations[keys::RUNSC_FEATURES],
            "unavailable: runsc features exited 128: unknown subcommand"
        );
        let info = decoded(build(facts(
            &policy,
            Err(format!(
                "runsc features failed (exit code 128): Usage: runsc <flags>\n\nSubcommands:\n{}",
                "x".repeat(500)
            )),
        )));
        assert_eq!(
            info.annotations[keys::RUNSC_FEATURES],
            "unavailable: runsc features failed (exit code 128): Usage: runsc <flags>",
            "only the first line of runsc's usage text"
        );
        assert_eq!(
            first_line(&"y".repeat(300), 200),
            format!("{}...", "y".repeat(200))
        );
        let info = decoded(build(facts(&policy, Ok(json!(["not", "an", "object"])))));
        assert!(info.features.is_none());
        assert!(info.annotations[keys::RUNSC_FEATURES].contains("no JSON object"));
    }

    #[test]
    fn audit_mode_keeps_hooks_and_annotations_but_not_user_namespaces() {
        let policy = Policy {
            mode: Mode::Audit,
            ..Policy::default()
        };
        let f = hardened_features(runsc_features(), &policy).unwrap();
        assert_eq!(f["hooks"], json!(["prestart", "createRuntime", "poststop"]));
        assert_eq!(f["annotations"]["dev.gvisor.flag.directfs"], "true");
        assert_eq!(
            f["potentiallyUnsafeConfigAnnotations"],
            json!(["dev.gvisor.flag."])
        );
        assert!(!f["linux"]["namespaces"]
            .as_array()
            .unwrap()
            .contains(&json!("user")));
        assert_eq!(f["linux"]["mountExtensions"]["idmap"]["enabled"], false);
    }

    #[test]
    fn a_policy_that_allows_hooks_keeps_runscs_list() {
        let mut policy = Policy::default();
        policy.hooks.reject = false;
        let f = hardened_features(runsc_features(), &policy).unwrap();
        assert_eq!(f["hooks"], json!(["prestart", "createRuntime", "poststop"]));
    }

    #[test]
    fn only_stripped_annotations_leave() {
        let mut doc = runsc_features();
        doc["annotations"]["org.example.version"] = json!("1");
        let f = hardened_features(doc, &Policy::default()).unwrap();
        assert_eq!(f["annotations"], json!({"org.example.version": "1"}));
    }

    #[test]
    fn a_document_without_linux_or_idmap_is_left_as_is() {
        let doc = json!({"ociVersionMin": "1.0.0", "mountOptions": ["ro"]});
        let f = hardened_features(doc, &Policy::default()).unwrap();
        assert_eq!(
            f,
            json!({"ociVersionMin": "1.0.0", "mountOptions": ["ro"], "hooks": []})
        );
    }

    #[test]
    fn policy_source_is_shown_as_a_path() {
        let policy = LoadedPolicy {
            policy: Policy::default(),
            source: PolicySource::RuntimeOptions("/etc/gvisor-hardened/tool.toml".into()),
            sha256: "ab".into(),
        };
        let info = build(facts(&policy, Err("x".into())));
        assert_eq!(
            info.annotations[keys::POLICY],
            "/etc/gvisor-hardened/tool.toml"
        );
    }
}
