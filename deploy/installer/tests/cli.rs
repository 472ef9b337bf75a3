//! The installer binary: `plan` changes nothing, bad inputs fail with one line, and `run`
//! installs, waits for SIGTERM, then uninstalls (the DaemonSet mode) on a private containerd,
//! 1.6 and 2.x each.

mod support;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gvisor_hardened_installer::cri;
use gvisor_hardened_installer::handlers::RUNTIME_TYPE;
use support::containerd::{PrivateContainerd, Release};
use support::on_both_releases;

const BIN: &str = env!("CARGO_BIN_EXE_gvisor-hardened-installer");

on_both_releases!(
    plan_prints_the_diff_and_changes_nothing,
    missing_shim_fails_with_one_line_naming_it,
    audit_mode_policy_is_refused_unless_allowed,
    labelling_without_a_node_name_is_refused_before_anything_happens,
    run_installs_then_uninstalls_on_sigterm,
);

/// Image-side sources and node-side destinations inside `dir`, as CLI flags.
fn flags(ctd: &PrivateContainerd) -> Vec<String> {
    let d = ctd.path();
    fs::create_dir_all(d.join("image/policies")).unwrap();
    fs::write(d.join("image/shim"), b"stand-in").unwrap();
    fs::write(d.join("image/forwarder"), b"stand-in").unwrap();
    fs::write(d.join("image/policies/policy.toml"), "version = 1\n").unwrap();
    fs::write(
        d.join("image/policies/gvisor-hardened-tool.toml"),
        "version = 1\n[resources]\nmemory = \"512Mi\"\n",
    )
    .unwrap();
    let p = |s: &str| d.join(s).display().to_string();
    vec![
        "--host-root=/".into(),
        format!("--containerd-config={}", ctd.config_path().display()),
        format!(
            "--shim-dest={}",
            p("host/bin/containerd-shim-gvisor-hardened-v1")
        ),
        format!(
            "--forwarder-dest={}",
            p("host/lib/gvisor-hardened/gvisor-hardened-forwarder")
        ),
        format!("--policy-dest-dir={}", p("host/etc/gvisor-hardened")),
        format!("--state-dir={}", p("host/var/lib/gvisor-hardened")),
        format!("--cri-socket={}", ctd.socket().display()),
        format!("--shim-source={}", p("image/shim")),
        format!("--forwarder-source={}", p("image/forwarder")),
        format!("--policy-source={}", p("image/policies")),
        "--host-exec=".into(),
        format!("--containerd-bin={}", ctd.binary().display()),
        format!("--restart-command={}", ctd.restart_command().join(" ")),
        "--cri-timeout-secs=30".into(),
        "--no-label".into(),
    ]
}

fn plan_prints_the_diff_and_changes_nothing(release: Release) {
    let ctd = PrivateContainerd::new(release);
    let original = ctd.base_config();
    fs::write(ctd.config_path(), &original).unwrap();
    let out = Command::new(BIN)
        .arg("plan")
        .args(flags(&ctd))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (version, table) = match release {
        Release::V1_6 => (
            "version 2 (containerd 1.x)",
            "+      [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.gvisor-hardened]",
        ),
        Release::V2 => (
            "version 3 (containerd 2.x)",
            "+      [plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.gvisor-hardened]",
        ),
    };
    assert!(stdout.contains(version), "{stdout}");
    assert!(stdout.contains("# config: edit in place"), "{stdout}");
    assert!(stdout.contains(table), "{stdout}");
    assert_eq!(fs::read_to_string(ctd.config_path()).unwrap(), original);
    assert!(!ctd.path().join("host").exists(), "plan wrote files");
}

fn missing_shim_fails_with_one_line_naming_it(release: Release) {
    let ctd = PrivateContainerd::new(release);
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    let mut f = flags(&ctd);
    f.retain(|a| !a.starts_with("--shim-source"));
    f.push("--shim-source=/nonexistent/shim".into());
    let out = Command::new(BIN).arg("install").args(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(
            "gvisor-hardened-installer: error: sources: shim binary /nonexistent/shim"
        ),
        "{stderr}"
    );
    assert!(!ctd.path().join("host").exists());
}

fn audit_mode_policy_is_refused_unless_allowed(release: Release) {
    let ctd = PrivateContainerd::new(release);
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    let f = flags(&ctd);
    let audit_policy = ctd.path().join("image/policies/gvisor-hardened-tool.toml");
    fs::write(&audit_policy, "version = 1\nmode = \"audit\"\n").unwrap();

    let out = Command::new(BIN).arg("install").args(&f).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "gvisor-hardened-installer: error: sources: policy {}: mode = \"audit\" turns all hardening off",
            audit_policy.display()
        )) && last.ends_with("pass --allow-audit-mode to install it anyway"),
        "{stderr}"
    );
    assert!(
        !ctd.path().join("host").exists(),
        "refused install wrote files"
    );

    // With the flag the same sources pass (plan: the checks install runs, nothing written).
    let out = Command::new(BIN)
        .arg("plan")
        .args(&f)
        .arg("--allow-audit-mode")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("gvisor-hardened-tool"));
    assert!(!ctd.path().join("host").exists());
}

fn labelling_without_a_node_name_is_refused_before_anything_happens(release: Release) {
    let ctd = PrivateContainerd::new(release);
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    let mut f = flags(&ctd);
    f.retain(|a| a != "--no-label");
    let out = Command::new(BIN)
        .arg("install")
        .args(&f)
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NODE_NAME"));
    assert!(!ctd.path().join("host").exists());
}

fn run_installs_then_uninstalls_on_sigterm(release: Release) {
    let ctd = PrivateContainerd::new(release);
    let original = ctd.base_config();
    fs::write(ctd.config_path(), &original).unwrap();
    ctd.start();
    let mut child = Command::new(BIN)
        .arg("run")
        .args(flags(&ctd))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Installed once CRI shows the handler and the state file exists.
    let state = ctd
        .path()
        .join("host/var/lib/gvisor-hardened/installer-state.json");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ok = state.exists()
            && cri::status(&ctd.socket(), Duration::from_secs(5))
                .map(|s| {
                    s.runtimes.get("gvisor-hardened").map(String::as_str) == Some(RUNTIME_TYPE)
                })
                .unwrap_or(false);
        if ok {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "run exited early");
        assert!(Instant::now() < deadline, "install did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("uninstall done: config restored"),
        "{stderr}"
    );
    assert_eq!(fs::read_to_string(ctd.config_path()).unwrap(), original);
    assert!(!Path::new(
        &ctd.path()
            .join("host/bin/containerd-shim-gvisor-hardened-v1")
    )
    .exists());
    assert!(!ctd.path().join("host/lib/gvisor-hardened").exists());
    let s = cri::status(&ctd.socket(), Duration::from_secs(5)).unwrap();
    assert_eq!(s.runtimes.keys().collect::<Vec<_>>(), vec!["runc"]);
}

/// The DaemonSet's args stay `run`: a node laid out differently is described through `GVH_*`
/// environment variables, which stand in for the flags.
#[test]
fn environment_variables_stand_in_for_the_path_flags() {
    let ctd = PrivateContainerd::new(Release::V2);
    fs::write(ctd.config_path(), ctd.base_config()).unwrap();
    let mut f = flags(&ctd);
    let mut env = Vec::new();
    for (flag, var) in [
        ("--containerd-config=", "GVH_CONTAINERD_CONFIG"),
        ("--policy-dest-dir=", "GVH_POLICY_DEST_DIR"),
        ("--containerd-bin=", "GVH_CONTAINERD_BIN"),
    ] {
        let at = f.iter().position(|a| a.starts_with(flag)).unwrap();
        env.push((var, f.remove(at)[flag.len()..].to_string()));
    }
    let out = Command::new(BIN)
        .arg("plan")
        .args(&f)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "# containerd config {} (version 3",
            ctd.config_path().display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "# handler gvisor-hardened -> ConfigPath {}/policy.toml",
            ctd.path().join("host/etc/gvisor-hardened").display()
        )),
        "{stdout}"
    );
}
