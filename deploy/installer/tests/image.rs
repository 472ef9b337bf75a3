//! The installer image (`deploy/build-image.sh`): built from this checkout, imported into a
//! private containerd 2.x under the reference the DaemonSet renders, and run from there with
//! `ctr run` (runc): its entrypoint answers, its tools load their libraries, and `plan` finds
//! the shim and the policies at the paths the installer's defaults name.
//!
//! Needs root, runc, and kubectl (for the rendered reference, as tests/manifests.rs does).

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use support::containerd::{PrivateContainerd, Release};
use support::deps;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../build-image.sh");

/// The script as a test harness calls it: with the environment `cargo test` gives a test (the
/// script's own cargo build must not depend on it).
fn script() -> Command {
    Command::new(SCRIPT)
}

fn ok(what: &str, out: Output) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The DaemonSet's image as `kubectl kustomize deploy/kustomize/default` renders it.
fn rendered_image() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kustomize/default");
    let yaml = ok(
        "kubectl kustomize",
        Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .output()
            .unwrap(),
    );
    let images: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(images.len(), 1, "{images:?}");
    images[0].to_string()
}

/// containerd's CRI reading of an image name without a registry (what the kubelet asks for).
fn cri_normalized(image: &str) -> String {
    match image.split_once('/') {
        None => format!("docker.io/library/{image}"),
        Some((host, _)) if host.contains(['.', ':']) || host == "localhost" => image.to_string(),
        Some(_) => format!("docker.io/{image}"),
    }
}

#[test]
fn print_ref_is_what_the_daemonset_renders_as_cri_resolves_it() {
    let rendered = rendered_image();
    let printed = ok(
        "build-image.sh --print-ref",
        script().arg("--print-ref").output().unwrap(),
    );
    assert_eq!(printed.trim(), cri_normalized(&rendered));
    // A tag pin, never a moving one: the kubelet's IfNotPresent then finds the import and
    // never pulls.
    assert!(
        !rendered.ends_with(":latest") && rendered.contains(':'),
        "{rendered}"
    );
}

#[test]
fn the_image_imports_under_the_rendered_reference_and_runs_the_installer() {
    let ctd = PrivateContainerd::new(Release::V2);
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    ctd.start();
    let ctr = deps::binary("ctr");

    let out = ok(
        "build-image.sh --import-to",
        script()
            .arg("--import-to")
            .arg(ctd.socket())
            .env("CTR", &ctr)
            .output()
            .unwrap(),
    );
    let reference = out.lines().last().unwrap_or_default().to_string();
    assert_eq!(reference, cri_normalized(&rendered_image()), "{out}");

    let ctr_cmd = || {
        let mut c = Command::new(&ctr);
        c.arg("-a").arg(ctd.socket()).args(["-n", "k8s.io"]);
        c
    };
    let listed = ok(
        "ctr images ls",
        ctr_cmd().args(["images", "ls", "-q"]).output().unwrap(),
    );
    assert!(listed.lines().any(|l| l == reference), "{listed}");

    // The image as it is: entrypoint + default argument `--help`.
    let help = ok(
        "ctr run (entrypoint)",
        ctr_cmd()
            .args(["run", "--rm", &reference, "gvh-image-help"])
            .output()
            .unwrap(),
    );
    assert!(
        help.contains("Installs gvisor-hardened on a Kubernetes node"),
        "{help}"
    );
    assert!(help.contains("Usage: gvisor-hardened-installer"), "{help}");

    // The host-exec prefix's nsenter loads its libraries from the image.
    let nsenter = ok(
        "ctr run nsenter --version",
        ctr_cmd()
            .args(["run", "--rm", &reference, "gvh-image-nsenter"])
            .args(["nsenter", "--version"])
            .output()
            .unwrap(),
    );
    assert!(nsenter.contains("util-linux"), "{nsenter}");

    // `plan` against a node whose / is a directory of ours (mounted read-only at /host, where
    // the DaemonSet mounts the host): the default shim and policy sources are the image's own.
    let host = ctd.path().join("fake-host");
    fs::create_dir_all(host.join("etc/containerd")).unwrap();
    let node_config = ctd.base_config();
    fs::write(host.join("etc/containerd/config.toml"), &node_config).unwrap();
    let plan = ok(
        "ctr run installer plan",
        ctr_cmd()
            .arg("run")
            .arg("--rm")
            .arg("--mount")
            .arg(format!(
                "type=bind,src={},dst=/host,options=rbind:ro",
                host.display()
            ))
            .args([&reference, "gvh-image-plan"])
            .args([
                "/opt/gvisor-hardened/bin/gvisor-hardened-installer",
                "plan",
                "--no-label",
            ])
            .output()
            .unwrap(),
    );
    assert!(
        plan.contains(
            "# containerd config /etc/containerd/config.toml (version 3 (containerd 2.x))"
        ),
        "{plan}"
    );
    for class in ["gvisor-hardened-agent", "gvisor-hardened-tool"] {
        assert!(
            plan.contains(&format!(
                "# handler {class} -> ConfigPath /etc/gvisor-hardened/policies/{class}.toml"
            )),
            "{plan}"
        );
        assert!(
            plan.contains(&format!(
                "+      [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.{class}]"
            )),
            "{plan}"
        );
    }
    assert!(plan.contains("# config: edit in place"), "{plan}");
    // Plan wrote nothing (the mount is read-only besides).
    assert_eq!(
        fs::read_to_string(host.join("etc/containerd/config.toml")).unwrap(),
        node_config
    );
}
