//! Artifact manifests (shim/core/src/artifacts) of a real sandbox's writable volume: the writable
//! bind is found in the hardened spec the shim wrote, and the diff between the start and the
//! exit manifest names what the sandbox created, changed and removed, a symlink to the host's
//! root among them (recorded, never followed).

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use gvisor_hardened_core::artifacts::{record_exit, record_start, Change};
use gvisor_hardened_tests::fault::{kill_and_remove, TestPolicy};
use gvisor_hardened_tests::*;
use policy_injector::policy::ArtifactsPolicy;
use serde_json::Value;

fn paths(changes: &[Change]) -> Vec<&str> {
    changes.iter().map(|c| c.path.as_str()).collect()
}

#[test]
fn manifests_record_what_a_sandbox_wrote_to_its_volume() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let vol = c.dir().join("volume");
    std::fs::create_dir(&vol).unwrap();
    // The sandbox runs as 65534.
    std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(vol.join("kept"), b"as it was").unwrap();
    std::fs::write(vol.join("edited"), b"before").unwrap();
    std::fs::write(vol.join("removed"), b"soon gone").unwrap();
    std::fs::set_permissions(vol.join("edited"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let policy = TestPolicy::builder(&c, &unique_id("artifacts"))
        .extra(&format!(
            "[mounts]\nwritable_sources = [\"{}/**\"]\n",
            vol.display()
        ))
        .write()
        .unwrap();
    let id = unique_id("artifacts");
    let run = Run::new(image.reference(), &id)
        .runtime(policy.runtime())
        .detach()
        .flags([
            "--mount".to_string(),
            format!("type=bind,src={},dst=/data,options=rbind:rw", vol.display()),
        ])
        .probe(["sleep", "120"]);
    c.run_output(&run).unwrap().checked().unwrap();

    let config = std::fs::read(c.bundle_dir(&id).join("config.json")).unwrap();
    let spec: Value = serde_json::from_slice(&config).unwrap();
    let limits = ArtifactsPolicy::default();
    let start = record_start(&spec, &limits, &policy.audit_path, &id)
        .unwrap()
        .expect("the hardened spec keeps the volume writable");
    assert_eq!(start.mounts.len(), 1, "{:?}", start.mounts);
    assert_eq!(start.mounts[0].destination, "/data");

    let script = "echo new > /data/created && echo after > /data/edited && rm /data/removed \
                  && mkfifo /data/fifo && ln -s / /data/host-root && mkdir -p /data/d/e";
    let out = c
        .exec(&id, &[], ["/bin/sh", "-c", script])
        .output()
        .unwrap();
    assert!(out.success(), "{out}");
    kill_and_remove(&c, &id, Duration::from_secs(30)).unwrap();

    let exit = record_exit(&start, &limits, &policy.audit_path, &id).unwrap();
    assert!(exit.complete && exit.diff.exact, "{exit:?}");
    assert_eq!(
        paths(&exit.diff.added_paths),
        ["created", "d", "d/e", "host-root"]
    );
    // mkfifo succeeded inside, but gVisor keeps the FIFO in the sentry (runsc runs without
    // --host-fifo): it never reaches the host volume. The walk's handling of host FIFOs is
    // unit-tested in shim/core/src/artifacts/walk_tests.rs.
    assert!(std::fs::symlink_metadata(vol.join("fifo")).is_err());
    assert_eq!(paths(&exit.diff.modified_paths), ["edited"]);
    assert_eq!(paths(&exit.diff.removed_paths), ["removed"]);
    let file: Value = serde_json::from_slice(&std::fs::read(&exit.manifest.path).unwrap()).unwrap();
    let entries = file["manifest"]["mounts"][0]["entries"].as_array().unwrap();
    let entry = |p: &str| entries.iter().find(|e| e["path"] == p).unwrap();
    assert_eq!(entry("host-root")["type"], "symlink");
    assert_eq!(entry("host-root")["target"], "/");
    assert_eq!(entries.len(), 6, "nothing behind the symlink: {entries:?}");
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}

/// The same through the shim's lifecycle: `ctr run --rm --mount` of a writable directory; the
/// start record names the start manifest, the exit record carries the diff and the exit
/// manifest's digest (its file's sha256), and the chain that covers it verifies.
#[test]
fn the_shim_records_a_volumes_changes_in_the_exit_record_under_the_chain() {
    use gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema;
    use sha2::{Digest, Sha256};

    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let vol = c.dir().join("volume");
    std::fs::create_dir(&vol).unwrap();
    std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(vol.join("kept"), b"as it was").unwrap();
    std::fs::write(vol.join("edited"), b"before").unwrap();
    std::fs::write(vol.join("removed"), b"soon gone").unwrap();
    std::fs::set_permissions(vol.join("edited"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let policy = TestPolicy::builder(&c, &unique_id("artifacts"))
        .extra(&format!(
            "[mounts]\nwritable_sources = [\"{}/**\"]\n",
            vol.display()
        ))
        .write()
        .unwrap();
    let id = unique_id("artifacts");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .flags([
                    "--mount".to_string(),
                    format!("type=bind,src={},dst=/data,options=rbind:rw", vol.display()),
                ])
                .sh("echo new > /data/created && echo after > /data/edited && rm /data/removed"),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let lines = policy.audit_lines();
    let record = |event: &str| {
        lines
            .iter()
            .find(|r| r["container_id"] == id.as_str() && r["event"] == event)
            .unwrap_or_else(|| panic!("no {event} record: {lines:?}"))
    };
    let sha = |path: &Value| -> String {
        let bytes = std::fs::read(path.as_str().unwrap()).unwrap();
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let start = &record("start")["artifacts"];
    assert_eq!(sha(&start["manifest"]["path"]), start["manifest"]["sha256"]);
    let a = &record("exit")["artifacts"];
    assert_eq!(a["start_sha256"], start["manifest"]["sha256"]);
    assert_eq!(sha(&a["manifest"]["path"]), a["manifest"]["sha256"], "{a}");
    let listed = |k: &str| -> Vec<String> {
        a["diff"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c["mount"].as_str().unwrap(),
                    c["path"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(listed("added_paths"), ["/data/created"], "{a}");
    assert_eq!(listed("modified_paths"), ["/data/edited"], "{a}");
    assert_eq!(listed("removed_paths"), ["/data/removed"], "{a}");
    assert_eq!(
        (a["diff"]["exact"].as_bool(), a["complete"].as_bool()),
        (Some(true), Some(true))
    );
    // The exit manifest file has the full diff too, against the start manifest it names.
    let file: Value =
        serde_json::from_slice(&std::fs::read(a["manifest"]["path"].as_str().unwrap()).unwrap())
            .unwrap();
    assert_eq!(file["start_sha256"], start["manifest"]["sha256"]);
    assert_eq!(file["diff"]["added"][0]["path"], "created");

    assert_chain_intact_and_records_fit_the_schema(&policy.audit_path);
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}
