//! The installer against a real, private containerd 1.6 with the CRI plugin.
//!
//! Needs root and Debian's `containerd` 1.6 (the machine's). The shim binary is a stand-in
//! file: CRI `Status` lists registered runtimes without executing their shims, and pods through
//! the shim are the CRI end-to-end tests' job.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gvisor_hardened_installer::command::Containerd;
use gvisor_hardened_installer::config::merged::check_merged;
use gvisor_hardened_installer::cri;
use gvisor_hardened_installer::error::InstallError;
use gvisor_hardened_installer::handlers::{Handler, RUNTIME_TYPE, TOOL_HANDLER};
use gvisor_hardened_installer::install::{Labeller, Node};
use gvisor_hardened_installer::kube::KubeClient;
use gvisor_hardened_installer::layout::Layout;
use gvisor_hardened_installer::sources::Sources;
use support::containerd::PrivateContainerd;
use support::fake_api::FakeApi;

const TOOL_POLICY: &str = "# stricter class for tool calls\nversion = 1\n[resources]\nmemory = \"512Mi\"\ncpu = \"1\"\nprocesses = 64\n[lifetime]\nmax_runtime = \"10m\"\n";

/// Installer sources (image side) and a node layout, all inside the instance's temp dir.
fn node(ctd: &PrivateContainerd, labeller: Option<Labeller>) -> Node {
    let d = ctd.path();
    let src = d.join("image");
    fs::create_dir_all(src.join("policies")).unwrap();
    fs::write(
        src.join("shim"),
        b"#!/bin/sh\necho stand-in shim >&2\nexit 1\n",
    )
    .unwrap();
    fs::write(src.join("policies/policy.toml"), "version = 1\n").unwrap();
    fs::write(src.join("policies/gvisor-hardened-tool.toml"), TOOL_POLICY).unwrap();
    Node {
        layout: Layout {
            host_root: PathBuf::from("/"),
            containerd_config: ctd.config_path(),
            shim_path: d.join("host/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
            policy_dir: d.join("host/etc/gvisor-hardened"),
            state_dir: d.join("host/var/lib/gvisor-hardened"),
            cri_socket: ctd.socket(),
        },
        sources: Sources {
            shim: src.join("shim"),
            policy_dir: src.join("policies"),
            allow_audit_mode: false,
        },
        containerd: Containerd {
            host_exec: vec![],
            binary: "containerd".into(),
        },
        restart: ctd.restart_command(),
        cri_timeout: Duration::from_secs(30),
        labeller,
        log: Box::new(|l| eprintln!("installer: {l}")),
    }
}

fn status(ctd: &PrivateContainerd) -> cri::CriStatus {
    cri::status(&ctd.socket(), Duration::from_secs(5)).unwrap()
}

#[test]
fn install_is_verified_over_cri_is_idempotent_and_uninstall_restores_the_bytes() {
    let ctd = PrivateContainerd::new();
    let original = ctd.base_config();
    fs::write(ctd.config_path(), &original).unwrap();
    ctd.start();
    let api = FakeApi::start();
    let client = KubeClient::new(
        Some(api.url.clone()),
        Path::new("/nonexistent/token"),
        Path::new("/nonexistent/ca.crt"),
    )
    .unwrap();
    let node = node(
        &ctd,
        Some(Labeller {
            client,
            node: "node-a".into(),
        }),
    );

    // Before: only runc.
    assert!(!status(&ctd).runtimes.contains_key("gvisor-hardened"));

    let first_pid = ctd.pid();
    let report = node
        .install()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert!(report.config_changed && report.restarted && report.labelled);
    assert_eq!(report.files_written, 3);
    assert_ne!(ctd.pid(), first_pid, "containerd was not restarted");

    // What the kubelet will see.
    let s = status(&ctd);
    assert!(s.runtime_ready);
    assert_eq!(s.runtimes["runc"], "io.containerd.runc.v2");
    assert_eq!(s.runtimes["gvisor-hardened"], RUNTIME_TYPE);
    assert_eq!(s.runtimes[TOOL_HANDLER], RUNTIME_TYPE);
    assert_eq!(
        Path::new(&s.config_paths[TOOL_HANDLER]),
        node.layout.class_policy_path(TOOL_HANDLER)
    );
    // Files landed with their bytes and modes.
    assert_eq!(
        fs::read_to_string(node.layout.class_policy_path(TOOL_HANDLER)).unwrap(),
        TOOL_POLICY
    );
    assert_eq!(
        gvisor_hardened_installer::files::mode_of(&node.layout.shim_path),
        Some(0o755)
    );
    // The original bytes are kept beside the config.
    assert_eq!(
        fs::read_to_string(node.layout.backup_path()).unwrap(),
        original
    );
    let installed = fs::read_to_string(ctd.config_path()).unwrap();
    // Layout kept: every original line is still there, in order.
    let mut lines = installed.lines();
    for l in original.lines() {
        assert!(lines.any(|x| x == l), "line {l:?} lost");
    }

    // Second run: nothing changes, no restart.
    let pid = ctd.pid();
    let again = node.install().unwrap();
    assert!(!again.config_changed && !again.restarted);
    assert_eq!(again.files_written, 0);
    assert_eq!(ctd.pid(), pid);
    assert_eq!(fs::read_to_string(ctd.config_path()).unwrap(), installed);

    // Uninstall: label removed, bytes restored, files gone, CRI back to runc only.
    let un = node
        .uninstall()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert_eq!(un.config, "restored");
    assert!(un.restarted && un.unlabelled);
    assert_eq!(un.files_removed, 3);
    assert_eq!(fs::read(ctd.config_path()).unwrap(), original.as_bytes());
    assert!(!node.layout.shim_path.exists());
    assert!(!node.layout.policy_dir.exists());
    assert!(!node.layout.backup_path().exists());
    assert!(!node.layout.state_dir.exists());
    let s = status(&ctd);
    assert!(s.runtime_ready);
    assert_eq!(s.runtimes.keys().collect::<Vec<_>>(), vec!["runc"]);

    let labels: Vec<String> = api.recorded().iter().map(|r| r.body.clone()).collect();
    // install, install again (the label is re-asserted, harmless), uninstall.
    assert_eq!(labels.len(), 3, "{labels:?}");
    assert!(labels[0].contains(r#""gvisor-hardened.dev/installed":"true""#));
    assert!(labels[1].contains(r#""gvisor-hardened.dev/installed":"true""#));
    assert!(labels[2].contains(r#""gvisor-hardened.dev/installed":null"#));

    // Uninstalling again is harmless.
    let twice = node.uninstall().unwrap();
    assert_eq!(twice.config, "unchanged");
    assert!(!twice.restarted);
    assert_eq!(fs::read(ctd.config_path()).unwrap(), original.as_bytes());
}

#[test]
fn a_config_edited_after_install_keeps_the_edit_on_uninstall() {
    let ctd = PrivateContainerd::new();
    let original = ctd.base_config();
    fs::write(ctd.config_path(), &original).unwrap();
    ctd.start();
    let node = node(&ctd, None);
    node.install()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    // An operator changes a setting after the install.
    let edited = fs::read_to_string(ctd.config_path()).unwrap().replace(
        "stream_server_port = \"0\"",
        "stream_server_port = \"0\" # operator was here",
    );
    fs::write(ctd.config_path(), &edited).unwrap();
    let un = node
        .uninstall()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert_eq!(un.config, "surgical");
    let after = fs::read_to_string(ctd.config_path()).unwrap();
    assert_eq!(
        after,
        original.replace(
            "stream_server_port = \"0\"",
            "stream_server_port = \"0\" # operator was here"
        )
    );
    assert_eq!(
        status(&ctd).runtimes.keys().collect::<Vec<_>>(),
        vec!["runc"]
    );
}

/// The trap itself, on the real containerd 1.6: a drop-in that only adds a runtime replaces the
/// whole CRI section. The guard (`config dump` + check) sees it before any restart, and the
/// restart the guard prevents really does break CRI.
#[test]
fn drop_in_trap_is_detected_by_the_merged_check_and_really_breaks_cri() {
    let ctd = PrivateContainerd::new();
    let conf_d = ctd.path().join("conf.d");
    fs::create_dir_all(&conf_d).unwrap();
    let config = format!(
        "imports = [\"{}/*.toml\"]\n{}",
        conf_d.display(),
        ctd.base_config()
    );
    fs::write(ctd.config_path(), &config).unwrap();
    ctd.start();
    let node = node(&ctd, None);
    let handlers: Vec<Handler> = node.layout.handlers(&[TOOL_HANDLER.to_string()]);

    // What a naive installer would write on 1.x.
    let dropin = gvisor_hardened_installer::plan::render_dropin(
        gvisor_hardened_installer::config::ConfigVersion::V2,
        &handlers,
    )
    .unwrap();
    fs::write(conf_d.join("gvisor-hardened.toml"), &dropin).unwrap();

    let dump = node.containerd.config_dump(&ctd.config_path()).unwrap();
    let err = check_merged(&dump, &handlers).unwrap_err().to_string();
    assert!(
        err.contains("default runtime `runc` has no runtime table"),
        "{err}\n{dump}"
    );

    // Confirm the consequence the check prevents: restarted into it, CRI is gone.
    ctd.start_without_waiting();
    // Poll until containerd answers at all; what it answers is the point.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let msg = loop {
        match cri::status(&ctd.socket(), Duration::from_secs(5)) {
            Ok(s) => panic!("CRI answered {s:?} with the trap drop-in in place"),
            Err(e @ cri::CriError::Rpc { .. }) => break e.to_string(),
            Err(e) => assert!(std::time::Instant::now() < deadline, "no answer: {e}"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        msg.contains("unknown service runtime.v1.RuntimeService"),
        "{msg}"
    );
    assert!(
        ctd.log().contains("no corresponding runtime configured"),
        "{}",
        ctd.log()
    );
}

/// A foreign drop-in that carries a complete CRI section shadows the main config on 1.x: our
/// in-place edit would silently not apply. The installer refuses before restarting.
#[test]
fn install_refuses_when_an_import_shadows_the_cri_section() {
    let ctd = PrivateContainerd::new();
    let conf_d = ctd.path().join("conf.d");
    fs::create_dir_all(&conf_d).unwrap();
    let config = format!(
        "imports = [\"{}/*.toml\"]\n{}",
        conf_d.display(),
        ctd.base_config()
    );
    fs::write(ctd.config_path(), &config).unwrap();
    // A vendor drop-in with its own full CRI section (runc included): the node works today.
    let cri_section = &ctd.base_config()[ctd
        .base_config()
        .find("  [plugins.\"io.containerd.grpc.v1.cri\"]")
        .unwrap()..];
    fs::write(
        conf_d.join("10-vendor.toml"),
        format!("version = 2\n[plugins]\n{cri_section}"),
    )
    .unwrap();
    ctd.start();
    let node = node(&ctd, None);
    let pid = ctd.pid();

    let err = node.install().unwrap_err();
    assert!(matches!(err, InstallError::Refused(_)), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("handler `gvisor-hardened` is missing"),
        "{msg}"
    );
    // Nothing restarted, config untouched, no candidate or backup left behind.
    assert_eq!(ctd.pid(), pid);
    assert_eq!(fs::read_to_string(ctd.config_path()).unwrap(), config);
    assert!(!node.layout.candidate_path().exists());
    assert!(!node.layout.backup_path().exists());
    assert!(status(&ctd).runtime_ready);
}

#[test]
fn missing_config_is_generated_from_containerd_defaults_and_passes_the_merged_check() {
    let ctd = PrivateContainerd::new();
    // The instance runs from its own config; the node's config path is a separate file that
    // does not exist yet, as on a node running on containerd's built-in defaults.
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    ctd.start();
    let mut node = node(&ctd, None);
    let missing = ctd.path().join("etc-containerd/config.toml");
    node.layout.containerd_config = missing.clone();
    let (plan, _) = node.plan().unwrap();
    assert!(plan.generated);
    assert_eq!(plan.original, None);
    let (_, _, text) = plan.file_change().unwrap();
    assert!(text
        .contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gvisor-hardened]"));
    // The generated config passes the merged check with containerd's own defaults (runc).
    let dump = {
        fs::create_dir_all(missing.parent().unwrap()).unwrap();
        fs::write(&missing, &text).unwrap();
        let d = node.containerd.config_dump(&missing).unwrap();
        fs::remove_file(&missing).unwrap();
        d
    };
    check_merged(&dump, &node.layout.handlers(&[TOOL_HANDLER.to_string()])).unwrap();
}

/// containerd comes back without our handlers (here: the restart runs it from another config
/// file, as when the node's unit points elsewhere): install fails and rolls the config back.
#[test]
fn cri_verify_failure_rolls_the_config_back() {
    let ctd = PrivateContainerd::new();
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    ctd.start();
    let mut node = node(&ctd, None);
    let other = ctd.path().join("node-config.toml");
    let original = ctd
        .base_config()
        .replace("# Private test", "# Node's own copy of the private test");
    fs::write(&other, &original).unwrap();
    node.layout.containerd_config = other.clone();
    node.cri_timeout = Duration::from_secs(3);

    let err = node.install().unwrap_err();
    assert!(matches!(err, InstallError::CriVerify { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("handler `gvisor-hardened` not registered"),
        "{msg}"
    );
    assert!(
        msg.contains("config rolled back and containerd restarted"),
        "{msg}"
    );
    assert_eq!(fs::read_to_string(&other).unwrap(), original);
    assert!(!node.layout.backup_path().exists());
    assert!(!node.layout.state_file().exists());
    assert!(status(&ctd).runtime_ready);
}
