//! The warm pool (issue 21) through CRI: a private containerd 2.x with the hardened handlers,
//! whose policies turn `[pool]` on; real runsc, real pods. What is checked:
//! - the first pod of a shape boots cold and leaves a filler behind, which boots the pool;
//! - a later pod claims a warm sandbox (the audit names the boot record of the sandbox it got),
//!   runs hardened in the pod's own cgroup, and its containers see nothing of the pool step;
//! - a claimed sandbox serves one pod, is deleted with it and never returns to the pool;
//! - a warm sandbox that died is never claimed and is replaced;
//! - two policies never share a pool; an empty pool is a cold start;
//! - draining the pool and stopping containerd leave nothing behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::inspect;
use gvisor_hardened_tests::{poll_until, shim_binary, TEST_IMAGE_REF};

/// How long a filler may take to boot a few sandboxes (one boot is ~170 ms here; the refill
/// rate of the test policies allows one a second... see `pooled`).
const FILL_TIMEOUT: Duration = Duration::from_secs(60);

/// `policy` with `[pool]` as given appended.
fn pooled(policy: &str, pool: &str) -> String {
    format!("{policy}\n[pool]\n{pool}\n")
}

fn start(default_pool: &str, tool_pool: &str) -> CriContainerd {
    let mut opts = CriOptions::with_shim(shim_binary().unwrap());
    opts.policies = vec![
        (
            HARDENED_HANDLER.to_string(),
            pooled(SHIPPED_DEFAULT_POLICY, default_pool),
        ),
        (
            HARDENED_TOOL_HANDLER.to_string(),
            pooled(SHIPPED_TOOL_POLICY, tool_pool),
        ),
    ];
    CriContainerd::start(opts).unwrap()
}

/// The pool's key directories of this instance, by the policy each template names.
fn key_dir(cri: &CriContainerd, handler: &str) -> Option<PathBuf> {
    let policy = cri.policy_path(handler)?.display().to_string();
    let ns = cri
        .layout()
        .runsc_root_base()
        .join(".pool")
        .join(CRI_NAMESPACE);
    std::fs::read_dir(ns)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|d| {
            std::fs::read_to_string(d.join("template.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|t| t["config_path"] == policy.as_str())
        })
}

fn entries(dir: &Path) -> Vec<serde_json::Value> {
    let mut found: Vec<(String, serde_json::Value)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| {
            let v = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), v))
        })
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found.into_iter().map(|(_, v)| v).collect()
}

/// Waits until the pool of `handler` holds `n` ready sandboxes; their entries.
#[track_caller]
fn wait_ready(cri: &CriContainerd, handler: &str, n: usize) -> Vec<serde_json::Value> {
    let mut last = Vec::new();
    let found = poll_until(
        &format!("{n} warm sandboxes of {handler}"),
        FILL_TIMEOUT,
        || {
            let dir = key_dir(cri, handler)?;
            last = entries(&dir.join("ready"));
            (last.len() == n).then(|| last.clone())
        },
    );
    found.unwrap_or_else(|_| {
        let log = key_dir(cri, handler)
            .and_then(|d| std::fs::read_to_string(d.join("fill.log")).ok())
            .unwrap_or_default();
        panic!("{handler}: {} ready, not {n}; fill.log:\n{log}", last.len())
    })
}

/// Every key directory of this instance and what is in it, for a failure's message.
fn pool_state(cri: &CriContainerd) -> String {
    let ns = cri
        .layout()
        .runsc_root_base()
        .join(".pool")
        .join(CRI_NAMESPACE);
    let mut out = String::new();
    for d in std::fs::read_dir(ns).into_iter().flatten().flatten() {
        let d = d.path();
        out.push_str(&format!("{}\n", d.display()));
        for sub in ["ready", "claimed", "dead"] {
            let ids: Vec<String> = entries(&d.join(sub))
                .iter()
                .map(|e| e["id"].to_string())
                .collect();
            out.push_str(&format!("  {sub}: {ids:?}\n"));
        }
        out.push_str(&std::fs::read_to_string(d.join("fill.log")).unwrap_or_default());
    }
    out
}

fn audit(cri: &CriContainerd) -> Vec<serde_json::Value> {
    cri.audit_log()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The `pool-sandbox-claimed` record of the pod sandbox `pod_id`, if it claimed one.
fn claim_of(cri: &CriContainerd, pod_id: &str) -> Option<serde_json::Value> {
    audit(cri)
        .into_iter()
        .find(|r| r["event"] == "pool-sandbox-claimed" && r["container_id"] == pod_id)
}

/// What a container of the pod sees of its sandbox: hostname, its root's entries, its
/// environment's names, its processes and its scratch.
fn view(cri: &CriContainerd, id: &str) -> String {
    let script =
        "hostname; ls -a /; env | cut -d= -f1 | sort; ls /proc | grep -c '^[0-9]'; ls -a /tmp";
    let out = cri
        .client()
        .exec_sync(id, &["sh", "-c", script], 20)
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    out.stdout
}

fn sleeper(name: &str) -> k8s_cri::v1::ContainerConfig {
    container_config(name, TEST_IMAGE_REF, &["sleep", "600"])
}

/// Nothing of warm sandbox `id` is left: no process, mount, cgroup, runsc state, bundle.
#[track_caller]
fn assert_warm_sandbox_gone(cri: &CriContainerd, key: &Path, id: &str) {
    let left = || {
        let mut left: Vec<String> = inspect::processes_mentioning(id)
            .into_iter()
            .map(|p| format!("process {} {}", p.pid, p.cmdline))
            .collect();
        left.extend(
            inspect::mounts_mentioning(id)
                .into_iter()
                .map(|m| format!("mount {}", m.mount_point.display())),
        );
        left.extend(
            inspect::cgroups_named(id)
                .into_iter()
                .map(|c| format!("cgroup {}", c.display())),
        );
        left.extend(
            inspect::runsc_state_files(&cri.runsc_root(), Some(id))
                .into_iter()
                .map(|f| format!("runsc state {}", f.display())),
        );
        for f in [
            key.join("bundles").join(id),
            key.join("ready").join(format!("{id}.json")),
            key.join("claimed").join(format!("{id}.json")),
            key.join("dead").join(format!("{id}.json")),
        ] {
            if f.exists() {
                left.push(format!("file {}", f.display()));
            }
        }
        left
    };
    let mut last = Vec::new();
    if poll_until(
        "the warm sandbox to be gone",
        Duration::from_secs(15),
        || {
            last = left();
            last.is_empty().then_some(())
        },
    )
    .is_err()
    {
        panic!("warm sandbox {id} left: {last:#?}");
    }
}

/// `pool-drain` as an operator runs it: every unclaimed warm sandbox deleted.
fn drain(cri: &CriContainerd) -> String {
    let out = std::process::Command::new(shim_binary().unwrap())
        .arg("pool-drain")
        .arg(cri.layout().runsc_root_base())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_pod_claims_a_warm_sandbox_runs_hardened_in_its_own_cgroup_and_takes_it_away_for_good() {
    let cri = start(
        "size = 2\nrefill_per_minute = 600",
        "size = 1\nrefill_per_minute = 600",
    );
    let handler = HARDENED_HANDLER;

    // The pool is empty: the first pod boots cold, and its shim starts the filler.
    let cold = cri.run_pod("cold", handler).unwrap();
    assert!(
        claim_of(&cri, &cold.id).is_none(),
        "an empty pool was claimed from"
    );
    let cold_app = cri.run_container(&cold, &sleeper("app")).unwrap();
    let ready = wait_ready(&cri, handler, 2);
    let key = key_dir(&cri, handler).unwrap();

    // The next pod takes the oldest warm sandbox; the audit names the record of its boot.
    let warm = cri.run_pod("warm", handler).unwrap();
    let claim = claim_of(&cri, &warm.id).unwrap_or_else(|| {
        let events: Vec<String> = audit(&cri)
            .iter()
            .map(|r| format!("{} {}", r["event"], r["container_id"]))
            .collect();
        panic!(
            "the second pod ({}) claimed no warm sandbox:\n{}\n{events:#?}",
            warm.id,
            pool_state(&cri)
        )
    });
    let taken = claim["pool"]["sandbox"].as_str().unwrap().to_string();
    assert_eq!(taken, ready[0]["id"], "{claim}");
    let booted = audit(&cri)
        .into_iter()
        .find(|r| r["event"] == "pool-sandbox-booted" && r["container_id"] == taken.as_str())
        .expect("no boot record of the claimed sandbox");
    assert_eq!(claim["pool"]["boot_record"], ready[0]["boot_record"]);
    assert_eq!(claim["pool"]["key"], booted["pool"]["key"]);
    assert_eq!(warm.pid, ready[0]["pid"].as_i64().map(|p| p as i32));
    gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema(
        &cri.layout().audit_log(),
    );

    // Its containers run hardened, in the pod's cgroup, and see what a cold pod's see.
    let warm_app = cri.run_container(&warm, &sleeper("app")).unwrap();
    let id = cri
        .client()
        .exec_sync(&warm_app, &["id", "-u"], 10)
        .unwrap();
    assert_eq!(id.stdout.trim(), "65534", "{id:?}");
    let parent = warm.cgroup_parent().unwrap();
    let sandbox_cgroup =
        std::fs::read_to_string(format!("/proc/{}/cgroup", ready[0]["pid"])).unwrap();
    let memory_line = sandbox_cgroup
        .lines()
        .find(|l| l.split(':').nth(1) == Some("memory"))
        .unwrap();
    assert!(
        memory_line.contains(parent) && !memory_line.contains("gvisor-hardened-pool"),
        "the claimed sandbox is not in its pod's cgroup: {memory_line}"
    );
    let (cold_view, warm_view) = (view(&cri, &cold_app), view(&cri, &warm_app));
    assert_eq!(
        cold_view.replacen("cold", "warm", 1),
        warm_view,
        "a claimed pod's container sees something a cold pod's does not"
    );
    assert!(!warm_view.contains("gvisor-hardened-hold"), "{warm_view}");

    // The pool is refilled behind it, and the claimed sandbox is not among the warm ones.
    let refilled = wait_ready(&cri, handler, 2);
    assert!(refilled.iter().all(|e| e["id"] != taken.as_str()));

    // Removing the pod removes the claimed sandbox for good.
    cri.remove_pod(&warm).unwrap();
    assert_pod_gone(&cri, &warm, &[warm_app]);
    assert_warm_sandbox_gone(&cri, &key, &taken);
    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[cold_app]);

    // Draining deletes the warm sandboxes; containerd then stops with nothing left.
    let ids: Vec<String> = wait_ready(&cri, handler, 2)
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    let drained = drain(&cri);
    assert!(drained.contains("deleted"), "{drained}");
    for id in &ids {
        assert_warm_sandbox_gone(&cri, &key, id);
    }
    assert_clean_cri_shutdown(cri);
}
