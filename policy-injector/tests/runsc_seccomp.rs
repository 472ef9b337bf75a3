//! The injected seccomp profile under the real runsc, with the flags `harden` returns: clone3
//! answers ENOSYS (so threads still work), namespaces, device nodes, ptrace and keyctl answer
//! EPERM, FIFOs, threads and fork work. The same holds when the spec brings a profile of its own
//! that allows everything: the policy's rules go before it.
//! Needs root, `runsc` and a C compiler with a static libc (the project's machines have them;
//! a missing one fails the test, it is never skipped).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use policy_injector::{harden, Context, Policy};

fn build_probe(dir: &Path) -> std::path::PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/probe/seccomp_probe.c");
    let out = dir.join("probe");
    let status = Command::new("cc")
        .args(["-static", "-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed to build the probe");
    assert!(status.success(), "building the probe failed");
    out
}

fn results(stdout: &str) -> BTreeMap<String, (i64, i64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(": r=")?;
            let (r, errno) = rest.split_once(" errno=")?;
            Some((
                name.to_string(),
                (r.parse().ok()?, errno.trim().parse().ok()?),
            ))
        })
        .collect()
}

/// Runs the probe under runsc with the spec hardened by the default policy; `spec_profile` is
/// the seccomp profile the spec brings (none: the default one is injected).
fn probe_under_runsc(label: &str, spec_profile: Option<serde_json::Value>) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let bundle = tmp.path().join("bundle");
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(rootfs.join("tmp")).unwrap();
    let probe = build_probe(tmp.path());
    std::fs::copy(&probe, rootfs.join("probe")).unwrap();

    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ctr-plain.json");
    let mut spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let id = format!("pi-seccomp-{label}-{}", std::process::id());
    // Relative to the bundle, as containerd writes it.
    spec["root"]["path"] = "rootfs".into();
    if let Some(profile) = spec_profile {
        spec["linux"]["seccomp"] = profile;
    }
    spec["process"]["args"] = serde_json::json!(["/probe"]);
    spec["linux"]["cgroupsPath"] = format!("/{id}").into();
    let hardened = harden(&spec, &Policy::default(), &Context::default()).unwrap();
    assert!(hardened.runsc.oci_seccomp);
    std::fs::write(
        bundle.join("config.json"),
        serde_json::to_vec_pretty(&hardened.spec).unwrap(),
    )
    .unwrap();

    let state = tmp.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let mut cmd = Command::new("runsc");
    cmd.arg(format!("--root={}", state.display()))
        .arg(format!("--network={}", hardened.runsc.network.as_str()))
        .arg(format!("--net-raw={}", hardened.runsc.net_raw))
        .arg(format!("--host-uds={}", hardened.runsc.host_uds));
    if hardened.runsc.oci_seccomp {
        cmd.arg("--oci-seccomp");
    }
    let out = cmd
        .arg("run")
        .arg(format!("--bundle={}", bundle.display()))
        .arg(&id)
        .output()
        .expect("runsc is needed");
    // `run` deletes the container when it exits; make sure of it before the temp dir goes.
    let _ = Command::new("runsc")
        .arg(format!("--root={}", state.display()))
        .args(["delete", "--force", &id])
        .output();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "runsc failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn assert_policy_holds(stdout: &str) {
    let r = results(stdout);
    let expect = [
        ("clone3", (-1, 38)),
        ("clone_newuser", (-1, 1)),
        ("unshare_newuser", (-1, 1)),
        ("unshare_newns", (-1, 1)),
        ("unshare_newcgroup", (-1, 1)),
        ("mknod_block", (-1, 1)),
        ("mknodat_char", (-1, 1)),
        ("mkfifo", (0, 0)),
        ("ptrace", (-1, 1)),
        ("keyctl", (-1, 1)),
        ("pthread_create", (0, 0)),
        ("fork_child_exit", (7, 0)),
    ];
    for (name, want) in expect {
        assert_eq!(r.get(name), Some(&want), "{name}; full output:\n{stdout}");
    }
}

#[test]
fn injected_profile_under_runsc_refuses_namespaces_and_device_nodes_and_keeps_threads_working() {
    assert_policy_holds(&probe_under_runsc("default", None));
}

#[test]
fn a_spec_profile_allowing_everything_does_not_switch_the_policy_off() {
    let allow_all = serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["ptrace", "unshare", "mknod", "mknodat", "keyctl"], "action": "SCMP_ACT_ALLOW"}
    ]});
    assert_policy_holds(&probe_under_runsc("allow-all", Some(allow_all)));
}
