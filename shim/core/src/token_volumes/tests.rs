use super::*;
use std::os::unix::fs::symlink;

/// A bound (projected) service-account token: `kubernetes.io` claim; signature not real.
const BOUND: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6Imd2aC10ZXN0In0.eyJhdWQiOlsiaHR0cHM6Ly9rdWJlcm5ldGVzLmRlZmF1bHQuc3ZjIl0sImV4cCI6NDEwMjQ0NDgwMCwiaWF0IjoxNzAwMDAwMDAwLCJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMuZGVmYXVsdC5zdmMiLCJrdWJlcm5ldGVzLmlvIjp7Im5hbWVzcGFjZSI6ImFnZW50cyIsInBvZCI6eyJuYW1lIjoicCIsInVpZCI6IjBiN2UifSwic2VydmljZWFjY291bnQiOnsibmFtZSI6ImRlZmF1bHQiLCJ1aWQiOiI1YTFmIn19LCJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6YWdlbnRzOmRlZmF1bHQifQ.c2lnbmF0dXJlLW5vdC1jaGVja2Vk";
/// A legacy Secret token: issuer `kubernetes/serviceaccount`.
const LEGACY: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6Imd2aC10ZXN0In0.eyJpc3MiOiJrdWJlcm5ldGVzL3NlcnZpY2VhY2NvdW50Iiwia3ViZXJuZXRlcy5pby9zZXJ2aWNlYWNjb3VudC9uYW1lc3BhY2UiOiJhZ2VudHMiLCJrdWJlcm5ldGVzLmlvL3NlcnZpY2VhY2NvdW50L3NlY3JldC5uYW1lIjoiZGVmYXVsdC10b2tlbi14MSIsImt1YmVybmV0ZXMuaW8vc2VydmljZWFjY291bnQvc2VydmljZS1hY2NvdW50Lm5hbWUiOiJkZWZhdWx0Iiwic3ViIjoic3lzdGVtOnNlcnZpY2VhY2NvdW50OmFnZW50czpkZWZhdWx0In0.c2lnbmF0dXJlLW5vdC1jaGVja2Vk";
/// Some other issuer's JWT: not a service-account token.
const OTHER_JWT: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6Imd2aC10ZXN0In0.eyJpc3MiOiJodHRwczovL2lzc3Vlci50ZXN0Iiwic3ViIjoiYWxpY2UiLCJhdWQiOiJhcHAifQ.c2lnbmF0dXJlLW5vdC1jaGVja2Vk";

/// A kubelet root in a temp dir with one pod, `0b7e`.
struct Kubelet {
    dir: tempfile::TempDir,
}

impl Kubelet {
    fn new() -> Kubelet {
        Kubelet {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("kubelet")
    }

    fn pod(&self) -> PathBuf {
        self.root().join("pods/0b7e")
    }

    /// A volume written the way kubelet's atomic writer does: the files in a timestamped
    /// directory, `..data` pointing at it, and a symlink per top-level name.
    fn volume(&self, plugin: &str, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let vol = self.pod().join("volumes").join(plugin).join(name);
        let data = vol.join("..2026_12_01_15_00_00.123456789");
        for (path, content) in files {
            let f = data.join(path);
            fs::create_dir_all(f.parent().unwrap()).unwrap();
            fs::write(f, content).unwrap();
        }
        fs::create_dir_all(&data).unwrap();
        symlink(data.file_name().unwrap(), vol.join("..data")).unwrap();
        let mut tops: Vec<&str> = files
            .iter()
            .map(|(p, _)| p.split('/').next().unwrap())
            .collect();
        tops.dedup();
        for top in tops {
            symlink(format!("..data/{top}"), vol.join(top)).unwrap();
        }
        vol
    }

    /// A subPath bind source as kubelet prepares it (here a copy standing in for its bind).
    fn subpath(&self, volume: &str, content: &str) -> PathBuf {
        let dir = self.pod().join("volume-subpaths").join(volume).join("c");
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("0");
        fs::write(&p, content).unwrap();
        p
    }

    fn holds(&self, p: &Path) -> bool {
        holds_token(p, &self.root())
    }
}

#[test]
fn projected_token_under_any_file_name_is_found() {
    let k = Kubelet::new();
    let tokens = k.volume(
        "kubernetes.io~projected",
        "tokens",
        &[
            ("agent/credential", BOUND),
            ("ca.crt", "-----BEGIN CERTIFICATE-----"),
        ],
    );
    assert!(k.holds(&tokens));
    // A bind of one file inside it, or of its ..data directory, too.
    assert!(k.holds(&tokens.join("agent/credential")));
    assert!(k.holds(&tokens.join("..data")));
}

#[test]
fn legacy_token_secret_is_found() {
    let k = Kubelet::new();
    let secret = k.volume(
        "kubernetes.io~secret",
        "default-token-x1",
        &[("token", &format!("{LEGACY}\n")), ("namespace", "agents")],
    );
    assert!(k.holds(&secret));
}

#[test]
fn volumes_without_a_token_are_not_flagged() {
    let k = Kubelet::new();
    let config = k.volume(
        "kubernetes.io~projected",
        "config",
        &[
            ("ca.crt", "-----BEGIN CERTIFICATE-----"),
            ("namespace", "agents"),
        ],
    );
    // A Secret with a key named `token` that is not a service-account token (an API key, a
    // JWT of another issuer) stays: the name proves nothing, the claims do.
    let api_key = k.volume(
        "kubernetes.io~secret",
        "github",
        &[("token", "ghp_notakubernetestoken"), ("oidc", OTHER_JWT)],
    );
    assert!(!k.holds(&config));
    assert!(!k.holds(&api_key));
}

#[test]
fn other_plugins_are_never_read() {
    let k = Kubelet::new();
    // A token copied into an emptyDir or a ConfigMap is not a kubelet token volume: not read.
    let empty = k.volume("kubernetes.io~empty-dir", "scratch", &[("token", BOUND)]);
    let cm = k.volume("kubernetes.io~configmap", "cfg", &[("token", BOUND)]);
    assert!(!k.holds(&empty));
    assert!(!k.holds(&cm));
    // Nor is anything outside the kubelet root.
    let elsewhere = k.dir.path().join("srv");
    fs::create_dir_all(&elsewhere).unwrap();
    fs::write(elsewhere.join("token"), BOUND).unwrap();
    assert!(!k.holds(&elsewhere));
}

#[test]
fn subpath_of_a_token_volume_is_found_and_of_other_volumes_is_not() {
    let k = Kubelet::new();
    k.volume("kubernetes.io~projected", "tokens", &[("token", BOUND)]);
    k.volume("kubernetes.io~empty-dir", "scratch", &[]);
    let of_tokens = k.subpath("tokens", BOUND);
    assert!(k.holds(&of_tokens));
    // The same bytes under an emptyDir's subPath: that volume is not looked into.
    let of_scratch = k.subpath("scratch", BOUND);
    assert!(!k.holds(&of_scratch));
}

#[test]
fn pod_level_directories_containing_a_token_volume_are_found() {
    let k = Kubelet::new();
    k.volume("kubernetes.io~projected", "tokens", &[("token", BOUND)]);
    for p in [
        k.pod(),
        k.pod().join("volumes"),
        k.pod().join("volumes/kubernetes.io~projected"),
    ] {
        assert!(k.holds(&p), "{}", p.display());
    }
    // The kubelet root and its pods directory hold every pod's tokens: always counted.
    assert!(k.holds(&k.root()));
    assert!(k.holds(&k.root().join("pods")));
}

#[test]
fn a_symlink_into_a_token_volume_is_followed_at_the_top() {
    let k = Kubelet::new();
    let tokens = k.volume("kubernetes.io~projected", "tokens", &[("token", BOUND)]);
    let link = k.dir.path().join("innocent");
    symlink(&tokens, &link).unwrap();
    assert!(k.holds(&link));
}

#[test]
fn trees_over_the_bounds_count_as_tokens() {
    let k = Kubelet::new();
    let vol = k.pod().join("volumes/kubernetes.io~secret/many");
    fs::create_dir_all(&vol).unwrap();
    for i in 0..MAX_ENTRIES {
        fs::write(vol.join(format!("k{i}")), "v").unwrap();
    }
    assert!(k.holds(&vol));
}

#[test]
fn spec_binds_with_tokens_are_listed_as_written() {
    let k = Kubelet::new();
    let tokens = k.volume("kubernetes.io~projected", "tokens", &[("token", BOUND)]);
    let config = k.volume("kubernetes.io~projected", "config", &[("ca.crt", "x")]);
    let spec = serde_json::json!({"mounts": [
        {"destination": "/tokens", "type": "bind", "source": tokens, "options": ["rbind", "ro"]},
        {"destination": "/config", "source": config, "options": ["rbind", "ro"]},
        {"destination": "/t2", "type": "none", "source": tokens, "options": ["rbind"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"}
    ]});
    let mut policy = MountsPolicy {
        kubelet_root: k.root().display().to_string(),
        ..MountsPolicy::default()
    };
    assert_eq!(
        token_sources(&spec, &policy),
        BTreeSet::from([tokens.display().to_string()])
    );
    // A policy that keeps tokens does not look at all.
    policy.remove_service_account_token = false;
    assert!(token_sources(&spec, &policy).is_empty());
}

#[test]
fn jwt_recognition() {
    assert!(is_service_account_token(BOUND.as_bytes()));
    assert!(is_service_account_token(format!("  {LEGACY}\n").as_bytes()));
    for not in [
        OTHER_JWT,
        "ghp_notakubernetestoken",
        "",
        "a.b.c",
        // Claims right, no signature part.
        BOUND.rsplit_once('.').unwrap().0,
    ] {
        assert!(!is_service_account_token(not.as_bytes()), "{not}");
    }
    assert!(!is_service_account_token(&[0xff, 0xfe, b'.']));
}

#[test]
fn base64url_decodes_with_and_without_padding() {
    assert_eq!(base64url("aGk").unwrap(), b"hi");
    assert_eq!(base64url("aGk=").unwrap(), b"hi");
    assert_eq!(base64url("-_8").unwrap(), [0xfb, 0xff]);
    assert!(base64url("a").is_none());
    assert!(base64url("a+b").is_none());
}
