//! The `-info` action (containerd 2.x): read the runtime options on stdin, print a
//! `containerd.types.RuntimeInfo` protobuf on stdout, exit.
//!
//! containerd runs `<shim> -info` (a flag, not an action: older shims fail on an unknown action
//! in confusing ways) when it asks what a runtime is: before a runtime's first task in each
//! containerd process (the deprecated `containerd.io/runtime-allow-mounts` lookup; a failure is
//! logged at error level and retried on the next task), when CRI starts (per runtime handler,
//! for the features kubelet is told about), for `ctr plugins inspect-runtime`, and before a
//! Create whose spec has idmapped mounts. stdin is the options `Any` marshalled (empty when
//! there are none), as the task's Create would carry them.
//!
//! The answer describes what a Create with the same options would get, so it loads the same
//! policy Create would (the options' `ConfigPath`, else the node policy, else the embedded
//! one) and asks that policy's runsc for its features. Options of a type the shim does not read,
//! or a policy that does not load, fail the action: Create would fail the same way.

mod answer;

pub use answer::{build, hardened_features, keys, Facts, FEATURES_TYPE_URL, RUNTIME_NAME};

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::protobuf::Message;

use crate::options;
use gvisor_hardened_core::policy_source::{self, NODE_POLICY_PATH};
use gvisor_hardened_core::reaper::Reaper;
use gvisor_hardened_core::runsc::client::Runsc;
use gvisor_hardened_core::runsc::feature_cache::Identity;

/// The options are one small message; anything larger is not from containerd.
const MAX_STDIN_BYTES: u64 = 1 << 20;
/// `runsc features` answers in ~20 ms; containerd waits on this action before a first Create.
const FEATURES_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the action; returns the bytes to print on stdout.
pub fn run(stdin: impl Read) -> anyhow::Result<Vec<u8>> {
    let options = read_options(stdin)?;
    // runsc runs through the reaper, as everywhere in the shim; not a subreaper: nothing
    // runsc leaves behind is ours to wait for here.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let reaper = Reaper::install_without_subreaper()?;
            answer(options, Path::new(NODE_POLICY_PATH), &reaper).await
        })
}

/// The options `Any` on stdin, if any.
fn read_options(stdin: impl Read) -> anyhow::Result<Option<Any>> {
    let mut bytes = Vec::new();
    stdin
        .take(MAX_STDIN_BYTES + 1)
        .read_to_end(&mut bytes)
        .context("reading the runtime options from stdin")?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_STDIN_BYTES,
        "runtime options on stdin are larger than {MAX_STDIN_BYTES} bytes"
    );
    if bytes.is_empty() {
        return Ok(None);
    }
    let any =
        Any::parse_from_bytes(&bytes).context("runtime options on stdin are not a protobuf Any")?;
    Ok(Some(any))
}

/// The encoded RuntimeInfo for a Create with `options`.
async fn answer(
    options: Option<Any>,
    node_policy: &Path,
    reaper: &Reaper,
) -> anyhow::Result<Vec<u8>> {
    let opts = options::decode(options.as_ref())?;
    let policy = policy_source::load(opts.config_path.as_deref(), node_policy)?;
    let wanted = &policy.policy.runsc.path;
    let runsc = Identity::of(wanted)
        .with_context(|| format!("runsc {wanted:?} (policy runsc.path) not found"))?
        .path;
    let runsc_features = Runsc::oci_features(&runsc, reaper, FEATURES_TIMEOUT)
        .await
        .map_err(|e| e.to_string());
    let info = build(Facts {
        options: options.filter(options::is_read_by_the_shim),
        policy: &policy,
        runsc: runsc.display().to_string(),
        runsc_features,
    });
    Ok(info.write_to_bytes()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use containerd_shim_protos::types::introspection::RuntimeInfo;
    use gvisor_hardened_core::reaper;
    use serde_json::Value;
    use std::os::unix::fs::PermissionsExt;

    fn runtime_options(config_path: &str) -> Any {
        let mut any = Any::new();
        any.type_url = "runtimeoptions.v1.Options".into();
        any.value = [&[0x12, config_path.len() as u8][..], config_path.as_bytes()].concat();
        any
    }

    /// A policy in `dir` naming a fake runsc that runs `body`.
    fn policy_with_fake_runsc(dir: &Path, body: &str) -> String {
        let runsc = dir.join("runsc");
        std::fs::write(&runsc, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&runsc, std::fs::Permissions::from_mode(0o755)).unwrap();
        let policy = dir.join("tool.toml");
        std::fs::write(&policy, format!("[runsc]\npath = {:?}\n", runsc)).unwrap();
        policy.to_str().unwrap().to_string()
    }

    async fn info_for(options: Option<Any>, node_policy: &Path) -> anyhow::Result<RuntimeInfo> {
        let bytes = answer(options, node_policy, &reaper::shared_for_tests()).await?;
        Ok(RuntimeInfo::parse_from_bytes(&bytes)?)
    }

    #[test]
    fn empty_stdin_means_no_options_and_garbage_is_refused() {
        assert_eq!(read_options(&b""[..]).unwrap(), None);
        let any = runtime_options("/p.toml");
        assert_eq!(
            read_options(&any.write_to_bytes().unwrap()[..]).unwrap(),
            Some(any)
        );
        let err = read_options(&b"\xff\xff\xff"[..]).unwrap_err();
        assert!(format!("{err:#}").contains("not a protobuf Any"), "{err:#}");
    }

    #[tokio::test]
    async fn options_of_a_type_the_shim_does_not_read_fail_the_action() {
        let mut any = Any::new();
        any.type_url = "example.com/Other".into();
        let err = info_for(Some(any), Path::new("/nonexistent"))
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("not understood"), "{err:#}");
    }

    #[tokio::test]
    async fn a_missing_policy_file_fails_the_action() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.toml");
        let options = runtime_options(path.to_str().unwrap());
        let err = info_for(Some(options), Path::new("/nonexistent"))
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("absent.toml"), "{err:#}");
    }

    #[tokio::test]
    async fn the_policys_runsc_features_come_back_hardened_with_the_options_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let policy = policy_with_fake_runsc(
            dir.path(),
            "[ \"$1\" = features ] || exit 2\n\
             echo '{\"ociVersionMax\":\"1.2.1\",\"hooks\":[\"prestart\"],\
             \"linux\":{\"namespaces\":[\"pid\",\"user\"]}}'",
        );
        let options = runtime_options(&policy);
        let info = info_for(Some(options.clone()), Path::new("/nonexistent"))
            .await
            .unwrap();
        assert_eq!(info.name, RUNTIME_NAME);
        assert_eq!(info.options.as_ref(), Some(&options));
        assert_eq!(info.annotations[keys::POLICY], policy);
        assert_eq!(
            info.annotations[keys::RUNSC],
            dir.path()
                .join("runsc")
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        );
        assert_eq!(info.features.type_url, FEATURES_TYPE_URL);
        let f: Value = serde_json::from_slice(&info.features.value).unwrap();
        assert_eq!(
            f,
            serde_json::json!({"ociVersionMax": "1.2.1", "hooks": [], "linux": {"namespaces": ["pid"]}})
        );
    }

    #[tokio::test]
    async fn the_node_policy_applies_without_options_and_runc_options_are_not_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let node = policy_with_fake_runsc(dir.path(), "echo '{}'");
        let mut runc = Any::new();
        runc.type_url = "containerd.runc.v1.Options".into();
        for options in [None, Some(runc)] {
            let info = info_for(options, Path::new(&node)).await.unwrap();
            assert!(info.options.is_none());
            assert_eq!(info.annotations[keys::POLICY], node);
        }
    }

    #[tokio::test]
    async fn a_runsc_without_the_features_subcommand_gives_no_features() {
        let dir = tempfile::tempdir().unwrap();
        let policy = policy_with_fake_runsc(
            dir.path(),
            "echo 'unknown subcommand \"features\"' >&2; exit 128",
        );
        let info = info_for(Some(runtime_options(&policy)), Path::new("/nonexistent"))
            .await
            .unwrap();
        assert!(info.features.is_none());
        assert!(
            info.annotations[keys::RUNSC_FEATURES].starts_with("unavailable: "),
            "{:?}",
            info.annotations
        );
    }

    #[tokio::test]
    async fn a_policy_naming_a_missing_runsc_fails_the_action() {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("p.toml");
        std::fs::write(&policy, "[runsc]\npath = \"/nonexistent/runsc\"\n").unwrap();
        let options = runtime_options(policy.to_str().unwrap());
        let err = info_for(Some(options), Path::new("/nonexistent"))
            .await
            .unwrap_err();
        assert!(format!("{err:#}").contains("/nonexistent/runsc"), "{err:#}");
    }
}
