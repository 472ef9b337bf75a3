use super::super::testutil::*;
use crate::decision::{Action, Rule};
use crate::harden::types::Context;
use crate::policy::Policy;
use serde_json::json;

fn with_mount(m: serde_json::Value) -> serde_json::Value {
    let mut spec = base_spec();
    spec["mounts"].as_array_mut().unwrap().push(m);
    spec
}

fn bind(src: &str, dst: &str, opts: serde_json::Value) -> serde_json::Value {
    json!({"destination": dst, "type": "bind", "source": src, "options": opts})
}

#[test]
fn every_mount_gets_nosuid_nodev() {
    let spec = with_mount(
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["ro", "suid", "dev"]}),
    );
    let h = harden_ok(&spec);
    for m in h.spec["mounts"].as_array().unwrap() {
        let o = m["options"].as_array().unwrap();
        assert!(
            o.contains(&json!("nosuid")) && o.contains(&json!("nodev")),
            "{m}"
        );
        assert!(
            !o.contains(&json!("suid")) && !o.contains(&json!("dev")),
            "{m}"
        );
    }
}

#[test]
fn writable_bind_becomes_readonly() {
    let spec = with_mount(bind("/srv/data", "/data", json!(["rbind", "rw"])));
    let h = harden_ok(&spec);
    assert_eq!(
        mount_at(&h.spec, "/data").unwrap()["options"],
        json!(["rbind", "ro", "nosuid", "nodev"])
    );
}

#[test]
fn empty_dir_bind_stays_writable() {
    let src = "/var/lib/kubelet/pods/0b7e/volumes/kubernetes.io~empty-dir/cache";
    let h = harden_ok(&with_mount(bind(src, "/cache", json!(["rbind", "rw"]))));
    assert_eq!(
        mount_at(&h.spec, "/cache").unwrap()["options"],
        json!(["rbind", "rw", "nosuid", "nodev"])
    );
}

#[test]
fn a_kubelet_root_elsewhere_moves_the_empty_dir_and_kubelet_entries_with_it() {
    let policy = Policy::from_toml_str("[mounts]\nkubelet_root = \"/srv/kubelet\"\n").unwrap();
    let ctx = Context::default();
    let src = "/srv/kubelet/pods/0b7e/volumes/kubernetes.io~empty-dir/cache";
    let h = harden_with(
        &with_mount(bind(src, "/cache", json!(["rbind", "rw"]))),
        &policy,
        &ctx,
    )
    .unwrap();
    assert_eq!(
        mount_at(&h.spec, "/cache").unwrap()["options"],
        json!(["rbind", "rw", "nosuid", "nodev"])
    );
    for denied in [
        "/srv/kubelet",
        "/srv/kubelet/pods",
        "/srv/kubelet/pki/kubelet.key",
    ] {
        let spec = with_mount(bind(denied, "/x", json!(["rbind", "ro"])));
        assert!(harden_with(&spec, &policy, &ctx).is_err(), "{denied}");
    }
    // The entries for /var/lib/kubelet stay; loading the policy again adds nothing.
    assert!(policy
        .mounts
        .writable_sources
        .contains(&"/var/lib/kubelet/pods/*/volumes/kubernetes.io~empty-dir/**".to_string()));
    assert_eq!(
        Policy::from_toml_str(&policy.to_toml_string()).unwrap(),
        policy
    );
}

#[test]
fn empty_dir_that_resolves_elsewhere_is_made_readonly() {
    let src = "/var/lib/kubelet/pods/0b7e/volumes/kubernetes.io~empty-dir/cache";
    let spec = with_mount(bind(src, "/cache", json!(["rbind", "rw"])));
    let mut ctx = Context::default();
    ctx.resolved_sources
        .insert(src.into(), "/srv/elsewhere".into());
    let h = harden_with(&spec, &Policy::default(), &ctx).unwrap();
    assert!(mount_at(&h.spec, "/cache").unwrap()["options"]
        .as_array()
        .unwrap()
        .contains(&json!("ro")));
}

#[test]
fn bind_of_denied_host_paths_is_rejected() {
    for src in [
        "/",
        "/etc",
        "/etc/shadow",
        "/proc/1/root",
        "/var/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/var/lib/kubelet",
        "/var/lib/kubelet/pods",
        "/run",
        "/var",
        "/home/user",
        "/srv/../etc",
        "/run/gvisor-hardened/runsc",
    ] {
        let r = rejections(&with_mount(bind(src, "/host", json!(["rbind", "ro"]))));
        assert_eq!(
            (r[0].rule, r[0].field.as_str()),
            (Rule::Mounts, "mounts[/host]"),
            "{src}"
        );
    }
}

#[test]
fn writable_bind_of_host_root_is_rejected() {
    let r = rejections(&with_mount(bind("/", "/host", json!(["rbind", "rw"]))));
    assert!(r[0].reason.contains("denied host path"), "{}", r[0].reason);
}

#[test]
fn symlink_to_a_denied_path_is_rejected_through_the_resolved_source() {
    let spec = with_mount(bind("/srv/innocent", "/x", json!(["bind"])));
    let mut ctx = Context::default();
    ctx.resolved_sources
        .insert("/srv/innocent".into(), "/var/run/docker.sock".into());
    let r = rejections_with(&spec, &Policy::default(), &ctx);
    assert!(r[0].reason.contains("resolved source"), "{}", r[0].reason);
}

#[test]
fn pod_files_under_kubelet_and_containerd_dirs_are_allowed() {
    let mut spec = base_spec();
    spec["mounts"] = json!([
        bind(
            "/var/lib/kubelet/pods/0b7e/etc-hosts",
            "/etc/hosts",
            json!(["rbind", "rprivate", "rw"])
        ),
        bind(
            "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/resolv.conf",
            "/etc/resolv.conf",
            json!(["rbind", "rprivate", "rw"])
        )
    ]);
    harden_ok(&spec);
}

#[test]
fn relative_dotdot_root_and_duplicate_destinations_are_rejected() {
    for (m, field) in [
        (bind("/srv/a", "data", json!(["bind"])), "mounts[data]"),
        (
            bind("/srv/a", "/data/../etc", json!(["bind"])),
            "mounts[/data/../etc]",
        ),
        (bind("/srv/a", "/", json!(["bind"])), "mounts[/]"),
        (bind("/srv/a", "//.", json!(["bind"])), "mounts[//.]"),
        (
            json!({"destination": "/proc/", "type": "proc", "source": "proc"}),
            "mounts[/proc/]",
        ),
    ] {
        let r = rejections(&with_mount(m.clone()));
        assert_eq!(
            (r[0].rule, r[0].field.as_str()),
            (Rule::Mounts, field),
            "{m}"
        );
    }
}

#[test]
fn destinations_are_normalised() {
    let h = harden_ok(&with_mount(bind(
        "/srv/a",
        "/data//./x/",
        json!(["bind", "ro"]),
    )));
    assert!(mount_at(&h.spec, "/data/x").is_some());
}

#[test]
fn disallowed_types_are_rejected() {
    let r = rejections(&with_mount(
        json!({"destination": "/mnt", "type": "overlay", "source": "overlay"}),
    ));
    assert!(r[0].reason.contains("overlay"));
    let r = rejections(&with_mount(json!({"destination": "/mnt", "source": "x"})));
    assert_eq!(r[0].field, "mounts[/mnt]");
}

#[test]
fn bind_by_option_counts_as_bind() {
    let r = rejections(&with_mount(
        json!({"destination": "/h", "type": "none", "source": "/etc", "options": ["rbind"]}),
    ));
    assert!(r[0].reason.contains("denied"));
}

#[test]
fn service_account_token_is_removed() {
    let mut spec = base_spec();
    for dst in [
        "/var/run/secrets/kubernetes.io/serviceaccount",
        "/run/secrets/kubernetes.io/serviceaccount/token",
    ] {
        spec["mounts"].as_array_mut().unwrap().push(bind(
            "/var/lib/kubelet/pods/x/volumes/kubernetes.io~projected/kube-api-access-1",
            dst,
            json!(["rbind", "ro"]),
        ));
    }
    let h = harden_ok(&spec);
    assert!(h.spec["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| !m["destination"]
            .as_str()
            .unwrap()
            .contains("serviceaccount")));
    assert_eq!(count(&h, Rule::Mounts, Action::Removed), 2);
}

#[test]
fn service_account_token_is_kept_when_the_policy_says_so() {
    let mut policy = Policy::default();
    policy.mounts.remove_service_account_token = false;
    let spec = with_mount(bind(
        "/var/lib/kubelet/pods/x/volumes/kubernetes.io~projected/t",
        "/var/run/secrets/kubernetes.io/serviceaccount",
        json!(["rbind", "ro"]),
    ));
    let h = harden_ok_with(&spec, &policy);
    assert!(mount_at(&h.spec, "/var/run/secrets/kubernetes.io/serviceaccount").is_some());
}

#[test]
fn malformed_mounts_are_malformed() {
    for m in [
        json!("x"),
        json!({"type": "tmpfs"}),
        json!({"destination": 1}),
        json!({"destination": "/a", "options": "ro"}),
    ] {
        assert!(matches!(
            harden_err(&with_mount(m)),
            crate::HardenError::Malformed { .. }
        ));
    }
}

#[test]
fn conflicting_ro_and_rw_end_as_a_single_ro() {
    let h = harden_ok(&with_mount(bind(
        "/srv/a",
        "/a",
        json!(["bind", "ro", "rw"]),
    )));
    assert_eq!(
        mount_at(&h.spec, "/a").unwrap()["options"],
        json!(["bind", "ro", "nosuid", "nodev"])
    );
}

#[test]
fn podmans_tmpcopyup_is_dropped_with_a_reason() {
    let spec = with_mount(
        json!({"destination": "/data", "type": "tmpfs", "source": "tmpfs", "options": ["rw", "rprivate", "nosuid", "nodev", "tmpcopyup"]}),
    );
    let h = harden_ok(&spec);
    let opts = mount_at(&h.spec, "/data").unwrap()["options"].clone();
    assert!(
        !opts.as_array().unwrap().contains(&json!("tmpcopyup")),
        "{opts}"
    );
    assert!(h
        .decisions
        .iter()
        .any(|d| d.field == "mounts[/data].options" && d.reason.contains("tmpcopyup")));
}

#[test]
fn the_engines_own_files_pass_the_deny_list_read_only() {
    let src = "/var/lib/docker/containers/c1/hosts";
    let spec = with_mount(bind(src, "/etc/hosts", json!(["rbind", "rprivate"])));
    assert!(rejections(&spec)[0].reason.contains("denied host path"));
    let ctx = Context {
        engine: Some(crate::harden::types::EngineContext {
            engine: crate::harden::types::Engine::Docker,
            rootfs: None,
            files: [src.to_string()].into_iter().collect(),
        }),
        ..Context::default()
    };
    let h = harden_with(&spec, &Policy::default(), &ctx).unwrap();
    assert_eq!(
        mount_at(&h.spec, "/etc/hosts").unwrap()["options"],
        json!(["rbind", "rprivate", "ro", "nosuid", "nodev"])
    );
    // Another file in the same place is still denied.
    let other = with_mount(bind(
        "/var/lib/docker/containers/c2/hosts",
        "/x",
        json!(["rbind"]),
    ));
    assert_eq!(rejections_with(&other, &Policy::default(), &ctx).len(), 1);
}

/// The context of a sandbox (credentials need one to name the CA bundle's file).
fn sandbox() -> Context {
    Context {
        container_id: "sb".into(),
        namespace: "k8s.io".into(),
        ..Context::default()
    }
}

/// A policy whose egress proxy adds a key read from /srv/keys/api-key (outside every denied
/// source of the default policy).
fn with_credential_file() -> Policy {
    Policy::from_toml_str(
        "[network]\nmode = \"none\"\n[network.egress]\nallow = [\"api.example.test\"]\n\
         [network.egress.credentials]\n\"api.example.test\" = { header = \"x-api-key\", file = \"/srv/keys/api-key\" }\n",
    )
    .unwrap()
}

#[test]
fn a_bind_of_an_egress_credentials_file_or_its_directory_is_rejected() {
    let policy = with_credential_file();
    for src in [
        "/srv/keys/api-key",
        "/srv/keys",
        "/srv",
        "/srv/keys/../keys/api-key",
    ] {
        let spec = with_mount(bind(src, "/k", json!(["rbind", "ro"])));
        let r = rejections_with(&spec, &policy, &sandbox());
        assert_eq!(
            (r[0].rule, r[0].field.as_str()),
            (Rule::Mounts, "mounts[/k]"),
            "{src}"
        );
        assert!(
            r[0].reason.contains("bind of a credentials file")
                && r[0].reason.contains("/srv/keys/api-key")
                && r[0].reason.contains("network.egress.credentials"),
            "{src}: {}",
            r[0].reason
        );
    }
    // A sibling is no credentials file: bound read-only as any other.
    let spec = with_mount(bind("/srv/keys-public", "/k", json!(["rbind", "ro"])));
    harden_with(&spec, &policy, &sandbox()).unwrap();
    let spec = with_mount(bind("/srv/keys/other", "/k", json!(["rbind", "ro"])));
    harden_with(&spec, &policy, &sandbox()).unwrap();
}

#[test]
fn a_bind_that_resolves_to_an_egress_credentials_file_is_rejected() {
    let policy = with_credential_file();
    let src = "/var/lib/kubelet/pods/0b7e/volumes/kubernetes.io~empty-dir/cache/k";
    let spec = with_mount(bind(src, "/k", json!(["rbind", "ro"])));
    let mut ctx = sandbox();
    ctx.resolved_sources
        .insert(src.into(), "/srv/keys/api-key".into());
    let r = rejections_with(&spec, &policy, &ctx);
    assert!(
        r[0].reason.contains("resolved source /srv/keys/api-key"),
        "{}",
        r[0].reason
    );
    // Control: the same bind resolving to itself is an ordinary emptyDir file.
    harden_with(&spec, &policy, &sandbox()).unwrap();
}
