//! Service-account tokens that arrive by another path than the default destination: binds of
//! sources the caller found to hold a token (`Context::token_sources`).

use super::super::testutil::*;
use crate::decision::{Action, Rule};
use crate::harden::types::Context;
use crate::policy::{Mode, Policy, TokenVolumeAction};
use serde_json::json;

const TOKENS: &str = "/var/lib/kubelet/pods/0b7e/volumes/kubernetes.io~projected/tokens";
const CONFIG: &str = "/var/lib/kubelet/pods/0b7e/volumes/kubernetes.io~projected/config";

fn spec_with_binds() -> serde_json::Value {
    let mut spec = base_spec();
    let mounts = spec["mounts"].as_array_mut().unwrap();
    mounts.push(json!({"destination": "/tokens", "type": "bind", "source": TOKENS, "options": ["rbind", "ro"]}));
    mounts.push(json!({"destination": "/config", "type": "bind", "source": CONFIG, "options": ["rbind", "ro"]}));
    spec
}

fn ctx_with_token_at(source: &str) -> Context {
    let mut ctx = Context::default();
    ctx.token_sources.insert(source.to_string());
    ctx
}

#[test]
fn a_token_volume_mounted_anywhere_is_removed_saying_why() {
    let h = harden_with(
        &spec_with_binds(),
        &Policy::default(),
        &ctx_with_token_at(TOKENS),
    )
    .unwrap();
    assert!(
        mount_at(&h.spec, "/tokens").is_none(),
        "{}",
        h.spec["mounts"]
    );
    // The other volume of the same pod, which holds no token, stays.
    assert!(mount_at(&h.spec, "/config").is_some());
    let removed: Vec<_> = h
        .decisions
        .iter()
        .filter(|d| d.rule == Rule::Mounts && d.action == Action::Removed)
        .collect();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].field, "mounts[/tokens]");
    assert_eq!(removed[0].before.as_ref().unwrap()["source"], TOKENS);
    assert!(
        removed[0].reason.contains(&format!(
            "bind source {TOKENS} holds a Kubernetes service-account token"
        )),
        "{}",
        removed[0].reason
    );
}

#[test]
fn a_token_volume_is_rejected_when_the_policy_says_reject() {
    let mut policy = Policy::default();
    policy.mounts.token_volumes = TokenVolumeAction::Reject;
    let r = rejections_with(&spec_with_binds(), &policy, &ctx_with_token_at(TOKENS));
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].rule, Rule::Mounts);
    assert_eq!(r[0].field, "mounts[/tokens]");
    assert!(
        r[0].reason.contains("service-account token")
            && r[0].reason.contains("mounts.token_volumes = \"reject\""),
        "{}",
        r[0].reason
    );
}

#[test]
fn the_default_token_mount_is_still_removed_not_rejected_under_reject() {
    // Every pod with automountServiceAccountToken gets kube-api-access-* at the default
    // destination: that one is removed by destination, so "reject" does not refuse every pod.
    let mut policy = Policy::default();
    policy.mounts.token_volumes = TokenVolumeAction::Reject;
    let source = "/var/lib/kubelet/pods/0b7e/volumes/kubernetes.io~projected/kube-api-access-x";
    let spec = {
        let mut s = base_spec();
        s["mounts"].as_array_mut().unwrap().push(json!({
            "destination": "/var/run/secrets/kubernetes.io/serviceaccount",
            "type": "bind", "source": source, "options": ["rbind", "ro"]
        }));
        s
    };
    let h = harden_with(&spec, &policy, &ctx_with_token_at(source)).unwrap();
    assert!(mount_at(&h.spec, "/var/run/secrets/kubernetes.io/serviceaccount").is_none());
    assert_eq!(count(&h, Rule::Mounts, Action::Removed), 1);
}

#[test]
fn token_volumes_are_kept_when_the_policy_keeps_tokens() {
    let mut policy = Policy::default();
    policy.mounts.remove_service_account_token = false;
    let h = harden_with(&spec_with_binds(), &policy, &ctx_with_token_at(TOKENS)).unwrap();
    assert!(mount_at(&h.spec, "/tokens").is_some());
    assert_eq!(count(&h, Rule::Mounts, Action::Removed), 0);
}

#[test]
fn without_token_sources_every_bind_stays() {
    let h = harden_with(&spec_with_binds(), &Policy::default(), &Context::default()).unwrap();
    assert!(mount_at(&h.spec, "/tokens").is_some());
    assert!(mount_at(&h.spec, "/config").is_some());
}

#[test]
fn only_binds_match_a_token_source() {
    // A tmpfs whose "source" string happens to equal a token source is not that directory.
    let mut spec = base_spec();
    spec["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/scratch", "type": "tmpfs", "source": TOKENS, "options": ["size=1m"]}),
    );
    let h = harden_with(&spec, &Policy::default(), &ctx_with_token_at(TOKENS)).unwrap();
    assert!(mount_at(&h.spec, "/scratch").is_some());
}

#[test]
fn audit_mode_reports_the_removal_and_changes_nothing() {
    let policy = Policy {
        mode: Mode::Audit,
        ..Policy::default()
    };
    let spec = spec_with_binds();
    let h = harden_with(&spec, &policy, &ctx_with_token_at(TOKENS)).unwrap();
    assert_eq!(h.spec, spec);
    assert!(h
        .decisions
        .iter()
        .any(|d| d.action == Action::Removed && d.field == "mounts[/tokens]"));
}
