//! The installer against a real, private containerd with the CRI plugin, on both releases the
//! project supports: Debian's 1.6 (config version 2, imports replace whole plugin sections) and
//! the 2.x `hack/deps.sh` builds (config version 3, imports merged deeply, drop-ins the usual
//! way to configure it).
//!
//! Needs root. The shim binary is a stand-in file: CRI `Status` lists registered runtimes
//! without executing their shims, and pods through the shim are the CRI end-to-end tests' job.

mod support;

use std::fs;
use std::path::Path;
use std::time::Duration;

use gvisor_hardened_installer::config::merged::check_merged;
use gvisor_hardened_installer::config::ConfigVersion;
use gvisor_hardened_installer::cri;
use gvisor_hardened_installer::error::InstallError;
use gvisor_hardened_installer::handlers::{Handler, TOOL_HANDLER};
use gvisor_hardened_installer::install::Labeller;
use gvisor_hardened_installer::kube::KubeClient;
use gvisor_hardened_installer::plan::render_dropin;
use support::containerd::{PrivateContainerd, Release};
use support::fake_api::FakeApi;
use support::node::{
    assert_cri_shows, assert_cri_shows_with_runc_handlers, handlers, node, status, TOOL_POLICY,
};
use support::on_both_releases;

on_both_releases!(
    install_is_verified_over_cri_is_idempotent_and_uninstall_restores_the_bytes,
    install_through_a_config_importing_conf_d,
    a_config_edited_after_install_keeps_the_edit_on_uninstall,
    a_partial_cri_drop_in,
    install_refuses_when_an_import_shadows_our_handlers,
    missing_config_is_generated_from_containerd_defaults_and_passes_the_merged_check,
    cri_verify_failure_rolls_the_config_back,
    a_refused_unlabel_still_restores_the_node,
);

/// A private containerd of `release` started on its base config (returned), a fake API server,
/// and the installer's view of the node labelling `node-a` through it.
fn started_labelled_node(
    release: Release,
) -> (
    PrivateContainerd,
    FakeApi,
    gvisor_hardened_installer::install::Node,
    String,
) {
    let ctd = PrivateContainerd::new(release);
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
    (ctd, api, node, original)
}

/// `kubectl delete -k` removes the installer's RBAC with its DaemonSet: the API server answers
/// 403 to the unlabel while the pod uninstalls. The config, containerd and the files are
/// restored anyway, and the refusal is the error.
fn a_refused_unlabel_still_restores_the_node(release: Release) {
    let (ctd, api, node, original) = started_labelled_node(release);
    node.install()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    api.answer_with(403);
    let err = node.uninstall().unwrap_err();
    assert!(
        matches!(
            err,
            gvisor_hardened_installer::error::UninstallError::Label(_)
        ),
        "{err}"
    );
    assert_eq!(fs::read(ctd.config_path()).unwrap(), original.as_bytes());
    assert!(!node.layout.shim_path.exists());
    assert!(!node.layout.state_dir.exists());
    assert_cri_shows(&ctd, &[]);
}

/// The version the release's base config is written in.
fn config_version(release: Release) -> ConfigVersion {
    match release {
        Release::V1_6 => ConfigVersion::V2,
        Release::V2 => ConfigVersion::V3,
    }
}

/// The release's CRI runtimes table header for `handler`, as the installer writes it.
fn runtime_table(release: Release, handler: &str) -> String {
    let plugin = config_version(release).cri_runtime_plugin();
    format!("[plugins.\"{plugin}\".containerd.runtimes.{handler}]")
}

fn install_is_verified_over_cri_is_idempotent_and_uninstall_restores_the_bytes(release: Release) {
    let (ctd, api, node, original) = started_labelled_node(release);

    // Before: only runc.
    assert_cri_shows(&ctd, &[]);

    let first_pid = ctd.pid();
    let report = node
        .install()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert!(report.config_changed && report.restarted && report.labelled);
    // The shim, the forwarder and three policies (default, agent, tool).
    assert_eq!(report.files_written, 5);
    assert_ne!(ctd.pid(), first_pid, "containerd was not restarted");

    // What the kubelet will see: runc and our three handlers with their policy paths.
    assert_cri_shows(&ctd, &handlers(&node));
    // Files landed with their bytes and modes.
    assert_eq!(
        fs::read_to_string(node.layout.class_policy_path(TOOL_HANDLER)).unwrap(),
        TOOL_POLICY
    );
    for exe in [&node.layout.shim_path, &node.layout.forwarder_path] {
        assert_eq!(gvisor_hardened_installer::files::mode_of(exe), Some(0o755));
    }
    assert_eq!(
        fs::read(&node.layout.forwarder_path).unwrap(),
        fs::read(&node.sources.forwarder).unwrap()
    );
    // The original bytes are kept beside the config.
    assert_eq!(
        fs::read_to_string(node.layout.backup_path()).unwrap(),
        original
    );
    let installed = fs::read_to_string(ctd.config_path()).unwrap();
    assert!(
        installed.contains(&runtime_table(release, TOOL_HANDLER)),
        "{installed}"
    );
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
    assert_eq!(un.files_removed, 5);
    // The tool policy has a warm pool: its sandboxes were drained with the installed shim,
    // before the shim went.
    let calls = fs::read_to_string(format!("{}.calls", node.layout.shim_path.display()))
        .unwrap_or_default();
    // (containerd 2.x also runs it with `-info`.)
    let drains: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("pool-drain"))
        .collect();
    assert_eq!(
        drains,
        [format!(
            "pool-drain {}",
            policy_injector::Policy::default().runsc.root
        )],
        "{calls}"
    );
    assert_eq!(fs::read(ctd.config_path()).unwrap(), original.as_bytes());
    assert!(!node.layout.shim_path.exists());
    assert!(!node.layout.forwarder_path.parent().unwrap().exists());
    assert!(!node.layout.policy_dir.exists());
    assert!(!node.layout.backup_path().exists());
    assert!(!node.layout.state_dir.exists());
    assert_cri_shows(&ctd, &[]);

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

/// A config that imports `conf.d/*.toml`, as containerd 2.x's own default does. On 2.x the
/// installer writes its own drop-in there and leaves the main config alone; on 1.6 (where a CRI
/// drop-in would replace the whole CRI section) it edits the main config in place.
fn install_through_a_config_importing_conf_d(release: Release) {
    let ctd = PrivateContainerd::new(release);
    fs::create_dir_all(ctd.conf_d()).unwrap();
    let original = ctd.config_importing_conf_d();
    fs::write(ctd.config_path(), &original).unwrap();
    // An operator's drop-in that is already there: it must keep working.
    fs::write(
        ctd.conf_d().join("10-operator.toml"),
        operator_drop_in(release),
    )
    .unwrap();
    ctd.start();
    let node = node(&ctd, None);
    let dropin = ctd.conf_d().join("gvisor-hardened.toml");

    let (plan, _) = node.plan().unwrap();
    let report = node
        .install()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert!(report.config_changed && report.restarted);
    assert_cri_shows_with_runc_handlers(&ctd, &handlers(&node), operator_handlers(release));
    match release {
        Release::V1_6 => {
            assert_eq!(plan.file_change().unwrap().0, ctd.config_path());
            assert!(!dropin.exists());
            assert_ne!(fs::read_to_string(ctd.config_path()).unwrap(), original);
        }
        Release::V2 => {
            assert_eq!(plan.file_change().unwrap().0, dropin);
            assert_eq!(fs::read_to_string(ctd.config_path()).unwrap(), original);
            let text = fs::read_to_string(&dropin).unwrap();
            assert!(
                text.contains(&runtime_table(release, TOOL_HANDLER)),
                "{text}"
            );
            assert!(
                !node.layout.backup_path().exists(),
                "no backup of an untouched config"
            );
        }
    }

    // Idempotent either way.
    let again = node.install().unwrap();
    assert!(!again.config_changed && !again.restarted);

    let un = node
        .uninstall()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert!(un.restarted);
    assert_eq!(fs::read(ctd.config_path()).unwrap(), original.as_bytes());
    assert!(!dropin.exists());
    assert_eq!(
        fs::read_to_string(ctd.conf_d().join("10-operator.toml")).unwrap(),
        operator_drop_in(release)
    );
    assert_cri_shows_with_runc_handlers(&ctd, &[], operator_handlers(release));
}

/// A drop-in an operator keeps beside ours: on 2.x one more runtime; on 1.6 a file that touches
/// no plugin (a CRI setting there would replace the whole CRI section).
fn operator_drop_in(release: Release) -> String {
    match release {
        Release::V1_6 => "version = 2\n[debug]\n  level = \"info\"\n".to_string(),
        Release::V2 => format!(
            "version = 3\n{}\n  runtime_type = \"io.containerd.runc.v2\"\n",
            runtime_table(release, "operator-runc")
        ),
    }
}

/// The runc handlers [`operator_drop_in`] adds.
fn operator_handlers(release: Release) -> &'static [&'static str] {
    match release {
        Release::V1_6 => &[],
        Release::V2 => &["operator-runc"],
    }
}

fn a_config_edited_after_install_keeps_the_edit_on_uninstall(release: Release) {
    let ctd = PrivateContainerd::new(release);
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
    assert_cri_shows(&ctd, &[]);
}

/// A drop-in holding only our runtime tables. On 1.6 it is the trap: it replaces the whole CRI
/// section. The guard (`config dump` + check) sees it before any restart, and the restart the
/// guard prevents really does break CRI. On 2.x the same drop-in is merged deeply: the check
/// passes and CRI comes up with runc and our handlers, which is why the installer may write one.
fn a_partial_cri_drop_in(release: Release) {
    let ctd = PrivateContainerd::new(release);
    fs::create_dir_all(ctd.conf_d()).unwrap();
    fs::write(ctd.config_path(), ctd.config_importing_conf_d()).unwrap();
    ctd.start();
    let node = node(&ctd, None);
    let handlers: Vec<Handler> = node.layout.handlers(&[TOOL_HANDLER.to_string()]);

    let dropin = render_dropin(config_version(release), &handlers).unwrap();
    fs::write(ctd.conf_d().join("gvisor-hardened.toml"), &dropin).unwrap();
    let dump = node.containerd.config_dump(&ctd.config_path()).unwrap();

    if release == Release::V2 {
        check_merged(&dump, &handlers).unwrap_or_else(|e| panic!("{e}\n{dump}"));
        ctd.start();
        assert_cri_shows(&ctd, &handlers);
        return;
    }

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

/// A foreign drop-in that would make our registration not apply. On 1.6 a drop-in with a
/// complete CRI section shadows the main config, where the installer edits. On 2.x a drop-in
/// sorted after ours that sets our handler's runtime_type to another shim wins the deep merge.
/// Either way the installer's edit would silently not take effect: it refuses before
/// restarting and leaves nothing behind.
fn install_refuses_when_an_import_shadows_our_handlers(release: Release) {
    let ctd = PrivateContainerd::new(release);
    fs::create_dir_all(ctd.conf_d()).unwrap();
    let config = ctd.config_importing_conf_d();
    fs::write(ctd.config_path(), &config).unwrap();
    let (vendor, expect) = match release {
        // A vendor drop-in with its own full CRI section (runc included): the node works today.
        Release::V1_6 => {
            let base = ctd.base_config();
            let cri_section = &base[base
                .find("  [plugins.\"io.containerd.grpc.v1.cri\"]")
                .unwrap()..];
            (
                format!("version = 2\n[plugins]\n{cri_section}"),
                "handler `gvisor-hardened` is missing".to_string(),
            )
        }
        // A leftover registration of plain runsc under our handler's name.
        Release::V2 => (
            format!(
                "version = 3\n{}\n  runtime_type = \"io.containerd.runsc.v1\"\n",
                runtime_table(release, "gvisor-hardened")
            ),
            // containerd dumps TOML strings in single quotes.
            "handler `gvisor-hardened` has runtime_type = 'io.containerd.runsc.v1', \
             expected \"io.containerd.gvisor-hardened.v1\""
                .to_string(),
        ),
    };
    fs::write(ctd.conf_d().join("zz-vendor.toml"), &vendor).unwrap();
    ctd.start();
    let node = node(&ctd, None);
    let pid = ctd.pid();

    let err = node.install().unwrap_err();
    assert!(matches!(err, InstallError::Refused(_)), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&expect), "{msg}");
    // Nothing restarted, config untouched, no candidate, backup or drop-in left behind.
    assert_eq!(ctd.pid(), pid);
    assert_eq!(fs::read_to_string(ctd.config_path()).unwrap(), config);
    assert!(!node.layout.candidate_path().exists());
    assert!(!node.layout.backup_path().exists());
    assert!(!ctd.conf_d().join("gvisor-hardened.toml").exists());
    assert!(status(&ctd).runtime_ready);
}

fn missing_config_is_generated_from_containerd_defaults_and_passes_the_merged_check(
    release: Release,
) {
    let ctd = PrivateContainerd::new(release);
    // The instance runs from its own config; the node's config path is a separate file that
    // does not exist yet, as on a node running on containerd's built-in defaults.
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    ctd.start();
    let mut node = node(&ctd, None);
    let missing = ctd.path().join("etc-containerd/config.toml");
    node.layout.containerd_config = missing.clone();
    let (plan, handlers) = node.plan().unwrap();
    assert!(plan.generated);
    assert_eq!(plan.original, None);
    // Written whole, in place, even where the default imports a conf.d (2.x's does).
    let (path, _, text) = plan.file_change().unwrap();
    assert_eq!(path, missing);
    let plugin = config_version(release).cri_runtime_plugin();
    assert!(
        text.contains(&format!("{plugin}\".containerd.runtimes.gvisor-hardened]"))
            || text.contains(&format!("{plugin}'.containerd.runtimes.gvisor-hardened]")),
        "{text}"
    );
    // The generated config passes the merged check with containerd's own defaults (runc).
    let dump = {
        fs::create_dir_all(missing.parent().unwrap()).unwrap();
        fs::write(&missing, &text).unwrap();
        let d = node.containerd.config_dump(&missing).unwrap();
        fs::remove_file(&missing).unwrap();
        d
    };
    check_merged(&dump, &handlers).unwrap_or_else(|e| panic!("{e}\n{dump}"));
}

/// containerd comes back without our handlers (here: the restart runs it from another config
/// file, as when the node's unit points elsewhere): install fails and rolls the config back.
fn cri_verify_failure_rolls_the_config_back(release: Release) {
    let ctd = PrivateContainerd::new(release);
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
    assert_cri_shows(&ctd, &[]);
}

/// containerd 2.2+ spells its config `version = 4` (the server sockets become plugin settings);
/// its own `config default` writes that. Install, verify and uninstall on such a config.
#[test]
fn install_and_uninstall_on_a_version_4_config() {
    let ctd = PrivateContainerd::new(Release::V2);
    let original = ctd.base_config_v4();
    fs::write(ctd.config_path(), &original).unwrap();
    ctd.start();
    let node = node(&ctd, None);
    let (plan, _) = node.plan().unwrap();
    assert_eq!(plan.version, ConfigVersion::V4);
    let report = node
        .install()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert!(report.config_changed && report.restarted);
    assert_cri_shows(&ctd, &handlers(&node));
    let installed = fs::read_to_string(ctd.config_path()).unwrap();
    assert!(
        installed.contains(&runtime_table(Release::V2, TOOL_HANDLER)),
        "{installed}"
    );
    let un = node
        .uninstall()
        .unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert_eq!(un.config, "restored");
    assert_eq!(fs::read(ctd.config_path()).unwrap(), original.as_bytes());
    assert_cri_shows(&ctd, &[]);
}
