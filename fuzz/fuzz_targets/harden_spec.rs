//! Fuzz target: `harden` and `harden_process` on arbitrary JSON specs.
//!
//! config.json comes from whoever creates the container, so the rewriter must answer every
//! JSON value with a hardened spec or an error, never a panic. Beyond that, the target checks
//! the properties the shim relies on:
//! - an accepted spec hardens again to the same spec (re-hardening is idempotent: the shim may
//!   see a spec it already rewrote, e.g. after a restart);
//! - audit mode returns the input unchanged;
//! - the result does not depend on anything but the input (two calls agree).
//!
//! Each input runs under three policies: the embedded default, the default in audit mode, and
//! the stricter policy shipped for the `gvisor-hardened-tool` RuntimeClass.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use policy_injector::{harden, harden_process, Context, HardenError, Mode, Policy};
use serde_json::Value;

const TOOL_POLICY: &str =
    include_str!("../../deploy/kustomize/runtimeclasses/policies/gvisor-hardened-tool.toml");

fn policies() -> &'static [Policy] {
    static POLICIES: OnceLock<Vec<Policy>> = OnceLock::new();
    POLICIES.get_or_init(|| {
        let tool = Policy::from_toml_str(TOOL_POLICY).expect("the shipped tool policy loads");
        vec![
            Policy::default(),
            Policy {
                mode: Mode::Audit,
                ..Policy::default()
            },
            tool,
        ]
    })
}

fn context() -> Context {
    Context {
        container_id: "fuzz".into(),
        namespace: "default".into(),
        ..Context::default()
    }
}

fn check_spec(spec: &Value, policy: &Policy, ctx: &Context) {
    let first = harden(spec, policy, ctx);
    let second = harden(spec, policy, ctx);
    assert_eq!(
        format!("{first:?}"),
        format!("{second:?}"),
        "harden is not deterministic"
    );
    match (&first, policy.mode) {
        (Ok(h), Mode::Audit) => {
            // Audit mode's one change: runsc's own `dev.gvisor.*` annotations go (runsc applies
            // them as flags whatever the mode).
            let mut want = spec.clone();
            if let Some(ann) = want.get_mut("annotations").and_then(Value::as_object_mut) {
                ann.retain(|k, _| !k.starts_with("dev.gvisor."));
            }
            assert_eq!(
                h.spec, want,
                "audit mode changed more than runsc's annotations"
            )
        }
        (Ok(h), Mode::Enforce) => match harden(&h.spec, policy, ctx) {
            Ok(again) => {
                assert_eq!(
                    again.spec, h.spec,
                    "re-hardening changed an accepted spec\ninput: {spec}"
                );
                assert_eq!(again.runsc, h.runsc, "re-hardening changed the runsc flags");
                assert_eq!(
                    again.lifetime, h.lifetime,
                    "re-hardening changed the lifetime"
                );
            }
            Err(e) => panic!("a hardened spec is refused on the second pass: {e}\ninput: {spec}"),
        },
        (Err(HardenError::Rejected(r)), _) => assert!(!r.is_empty(), "empty rejection list"),
        (Err(e @ HardenError::Malformed { .. }), _) => assert!(!e.to_string().is_empty()),
    }
}

fn check_process(process: &Value, policy: &Policy, ctx: &Context) {
    if let Ok(h) = harden_process(process, policy, ctx) {
        if policy.mode == Mode::Enforce {
            let again = harden_process(&h.process, policy, ctx)
                .unwrap_or_else(|e| panic!("a hardened process is refused again: {e}"));
            assert_eq!(again.process, h.process, "re-hardening changed a process");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(spec) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let ctx = context();
    for policy in policies() {
        check_spec(&spec, policy, &ctx);
        // Exec requests carry a bare process: the same rules, through the other entry point.
        if let Some(process) = spec.get("process") {
            check_process(process, policy, &ctx);
        }
    }
});
