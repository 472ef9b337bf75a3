//! The installer image (`deploy/build-image.sh`): built from this checkout, imported into a
//! private containerd 2.x under the reference the DaemonSet renders, and run from there with
//! `ctr run` (runc): its entrypoint answers, its tools load their libraries, and `plan` finds
//! the shim and the policies at the paths the installer's defaults name. Then the image
//! installs and uninstalls on a second private containerd 2.x the way the DaemonSet runs it:
//! privileged, in the host's PID namespace, the host's / at /host, containerd reached through
//! `nsenter -t PID -m --`.
//!
//! Needs root, runc, and kubectl (for the rendered reference, as tests/manifests.rs does).

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use support::containerd::{PrivateContainerd, Release};
use support::deps;
use support::node::assert_cri_shows_with_runc_handlers;

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

/// The DaemonSets' image as `kubectl kustomize deploy/kustomize/default` renders it: one
/// image for both DaemonSets (the installer and the metrics exporter).
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
    let mut images: Vec<&str> = yaml
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(images.len(), 2, "{images:?}");
    images.dedup();
    assert_eq!(
        images.len(),
        1,
        "the two containers run different images: {images:?}"
    );
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

    // The metrics DaemonSet's command: policy-injector built with its `cli` feature (the
    // `audit metrics` subcommand exists only there), loading its libraries from the image.
    let metrics_help = ok(
        "ctr run policy-injector audit metrics --help",
        ctr_cmd()
            .args(["run", "--rm", &reference, "gvh-image-metrics"])
            .args([
                "/opt/gvisor-hardened/bin/policy-injector",
                "audit",
                "metrics",
                "--help",
            ])
            .output()
            .unwrap(),
    );
    for flag in ["--log", "--listen", "--poll-ms"] {
        assert!(metrics_help.contains(flag), "{metrics_help}");
    }

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

/// Restarts the node's containerd from inside the installer's container, as `systemctl restart`
/// would: first out of the container's cgroups (runc kills every process left in them when a
/// container sharing the host's PID namespace is deleted, and systemd would start containerd
/// in its own), then the instance's restart script.
const ESCAPE_AND_RESTART: &str = r#"#!/bin/sh
for procs in /sys/fs/cgroup/*/cgroup.procs; do
    echo $$ >"$procs" 2>/dev/null || true
done
exec sh "$@"
"#;

#[test]
fn the_image_installs_and_uninstalls_like_the_daemonset() {
    // The containerd that runs the installer's container (the kubelet's, on a node) ...
    let runner = PrivateContainerd::new(Release::V2);
    fs::write(runner.config_path(), runner.base_config()).unwrap();
    runner.start();
    // ... and the node's containerd the installer configures: another instance, so restarting
    // it does not cut `ctr run` off from its container.
    let node = PrivateContainerd::new(Release::V2);
    let original = node.base_config();
    fs::write(node.config_path(), &original).unwrap();
    node.start();
    let ctr = deps::binary("ctr");
    let reference = ok(
        "build-image.sh --import-to",
        script()
            .arg("--import-to")
            .arg(runner.socket())
            .env("CTR", &ctr)
            .output()
            .unwrap(),
    )
    .lines()
    .last()
    .unwrap_or_default()
    .to_string();

    let d = node.path();
    fs::write(d.join("escape-and-restart.sh"), ESCAPE_AND_RESTART).unwrap();
    let host = |p: &str| d.join(p).display().to_string();
    // The host's PID 1 on a node; here the test process stands in for it (these machines' PID 1
    // does not let its namespaces be opened).
    let host_pid = std::process::id();
    let host_pid_ns = format!("pid:/proc/{host_pid}/ns/pid");
    let installer = |id: &str, command: &str| {
        let mut c = Command::new(&ctr);
        c.arg("-a").arg(runner.socket()).args(["-n", "k8s.io"]);
        c.args(["run", "--rm", "--privileged", "--with-ns", &host_pid_ns]);
        c.args(["--mount", "type=bind,src=/,dst=/host,options=rbind:rw"]);
        c.args([reference.as_str(), id]);
        c.args([
            "/opt/gvisor-hardened/bin/gvisor-hardened-installer",
            command,
        ]);
        c.args([
            "--no-label".to_string(),
            format!("--containerd-config={}", node.config_path().display()),
            format!("--cri-socket={}", node.socket().display()),
            format!("--containerd-bin={}", node.binary().display()),
            format!(
                "--shim-dest={}",
                host("usr/local/bin/containerd-shim-gvisor-hardened-v1")
            ),
            format!(
                "--forwarder-dest={}",
                host("usr/local/lib/gvisor-hardened/gvisor-hardened-forwarder")
            ),
            format!("--policy-dest-dir={}", host("etc/gvisor-hardened")),
            format!("--state-dir={}", host("var/lib/gvisor-hardened")),
            format!("--host-exec=nsenter -t {host_pid} -m --"),
            format!(
                "--restart-command=nsenter -t {host_pid} -m -- sh {} {}",
                d.join("escape-and-restart.sh").display(),
                node.restart_command()[1..].join(" ")
            ),
        ]);
        c
    };

    let first_pid = node.pid();
    let out = installer("gvh-image-install", "install").output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}\n{}", node.log());
    assert!(log.contains("install done:"), "{log}");
    assert_ne!(node.pid(), first_pid, "containerd was not restarted");
    let handlers = gvisor_hardened_installer::layout::Layout {
        policy_dir: d.join("etc/gvisor-hardened"),
        shim_path: d.join("usr/local/bin/containerd-shim-gvisor-hardened-v1"),
        ..Default::default()
    }
    .handlers(&[
        "gvisor-hardened-agent".to_string(),
        "gvisor-hardened-tool".to_string(),
    ]);
    // containerd outlived the installer's container and serves our handlers.
    assert_cri_shows_with_runc_handlers(&node, &handlers, &[]);
    // The files are the image's: the shim the release build made, the static forwarder.
    let shim = fs::read(d.join("usr/local/bin/containerd-shim-gvisor-hardened-v1")).unwrap();
    assert_eq!(
        shim,
        fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/release/containerd-shim-gvisor-hardened-v1")
        )
        .unwrap()
    );
    let forwarder = d.join("usr/local/lib/gvisor-hardened/gvisor-hardened-forwarder");
    // Static: it runs inside sandboxes whose rootfs may have no libc.
    let ldd = Command::new("ldd").arg(&forwarder).output().unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout) + String::from_utf8_lossy(&ldd.stderr);
    assert!(
        ldd.contains("not a dynamic executable") || ldd.contains("statically linked"),
        "{ldd}"
    );

    let out = installer("gvh-image-uninstall", "uninstall")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}\n{}", node.log());
    assert!(log.contains("uninstall done: config restored"), "{log}");
    assert_eq!(fs::read(node.config_path()).unwrap(), original.as_bytes());
    assert_cri_shows_with_runc_handlers(&node, &[], &[]);
    for gone in [
        "usr/local/bin/containerd-shim-gvisor-hardened-v1",
        "usr/local/lib/gvisor-hardened",
        "etc/gvisor-hardened",
        "var/lib/gvisor-hardened",
    ] {
        assert!(!d.join(gone).exists(), "{gone} left behind");
    }
}
