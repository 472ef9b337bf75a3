//! Captures the OCI specs containerd 1.6's CRI plugin writes for a pod, as policy-injector
//! fixtures: the sandbox (pause) container's config.json and an app container's.
//!
//! Starts a runc-only CRI containerd (tests/src/cri), runs a pod with one container the way a
//! kubelet would (resources, env, a read-only hostPath), copies `config.json` out of both task
//! bundles while the pod runs, removes the pod and stops containerd. The JSON is re-indented
//! (4 spaces, key order kept, as the ctr fixtures are); the values are containerd's.
//!
//! ```text
//! cargo run -p gvisor-hardened-tests --example capture-cri-fixtures [-- OUT_DIR]
//! ```
//! OUT_DIR defaults to policy-injector/tests/fixtures. Needs root.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context as _, Result};
use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::TEST_IMAGE_REF;
use k8s_cri::v1::LinuxContainerResources;
use serde::Serialize;

fn pretty(value: &serde_json::Value) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    value.serialize(&mut ser)?;
    out.push(b'\n');
    Ok(out)
}

fn copy_spec(bundle: &Path, to: &Path) -> Result<()> {
    let from = bundle.join("config.json");
    let bytes = std::fs::read(&from).with_context(|| format!("reading {}", from.display()))?;
    let value: serde_json::Value = serde_json::from_slice(&bytes)?;
    let text = pretty(&value)?;
    // Re-indenting must not change a single value, nor the order of keys.
    let again: serde_json::Value = serde_json::from_slice(&text)?;
    ensure!(
        again == value,
        "re-indented spec differs from {}",
        from.display()
    );
    ensure!(
        serde_json::to_vec(&again)? == serde_json::to_vec(&value)?,
        "key order changed"
    );
    std::fs::write(to, text).with_context(|| format!("writing {}", to.display()))?;
    println!("captured {} from {}", to.display(), from.display());
    Ok(())
}

fn main() -> Result<()> {
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../policy-injector/tests/fixtures")
        });
    let cri = CriContainerd::start(CriOptions::runc_only())?;
    let pod = cri.run_pod("fixture", RUNC_HANDLER)?;

    // A hostPath the kubelet would bind (read-only), inside the instance directory.
    let data = cri.dir().join("volumes/data");
    std::fs::create_dir_all(&data)?;
    let mut app = container_config("app", TEST_IMAGE_REF, &["sleep", "600"])
        .env("APP_MODE", "fixture")
        .host_path(&data.display().to_string(), "/data", true);
    app.linux
        .as_mut()
        .expect("set by container_config")
        .resources = Some(LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 256 << 20,
        oom_score_adj: 1000,
        ..Default::default()
    });
    let app_id = cri.run_container(&pod, &app)?;

    let c = cri.containerd();
    copy_spec(&c.bundle_dir(&pod.id), &out.join("cri-sandbox.json"))?;
    copy_spec(&c.bundle_dir(&app_id), &out.join("cri-container.json"))?;

    cri.remove_pod(&pod)?;
    assert_pod_gone(&cri, &pod, &[app_id]);
    let report = cri.shutdown();
    ensure!(report.is_clean(), "{report}");
    Ok(())
}
