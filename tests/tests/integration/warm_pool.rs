//! The warm pool (issue 21) through CRI: a private containerd 2.x with the hardened handlers,
//! whose policies turn `[pool]` on; real runsc, real pods. What is checked:
//! - the first pod of a shape boots cold and leaves a filler behind, which boots the pool;
//! - a later pod claims a warm sandbox (the audit names the boot record of the sandbox it got),
//!   runs hardened in the pod's own cgroup, and its containers see nothing of the pool step;
//! - a claimed sandbox serves one pod, is deleted with it and never returns to the pool;
//! - twenty pods at once never share a warm sandbox, and those left without one start cold;
//! - a warm sandbox that died is never claimed and is replaced;
//! - two policies never share a pool; an empty pool is a cold start, and is not refilled
//!   faster than the policy's rate;
//! - the filler stops at the pool's memory bound;
//! - draining the pool (which stops a filler waiting out the refill rate) and stopping
//!   containerd leave nothing behind.

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
            let dir = cri.pool_key_dir(handler)?;
            last = entries(&dir.join("ready"));
            (last.len() == n).then(|| last.clone())
        },
    );
    found.unwrap_or_else(|_| {
        panic!(
            "{handler}: {} ready, not {n}; the pools:\n{}",
            last.len(),
            pool_state(cri)
        )
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

/// What a container of the pod sees of its sandbox: hostname, its root's entries, its
/// environment's names, its processes and its scratch. The processes are counted by the
/// shell's own glob, with no child of it running: `ls /proc | grep -c` counted 3 or 4 as the
/// pipeline's processes raced its listing.
fn view(cri: &CriContainerd, id: &str) -> String {
    let script =
        "hostname; ls -a /; env | cut -d= -f1 | sort; set -- /proc/[0-9]*; echo $#; ls -a /tmp";
    let out = cri
        .client()
        .exec_sync(id, &["sh", "-c", script], 20)
        .unwrap();
    assert_eq!(out.exit_code, 0, "{out:?}");
    out.stdout
}

/// The distinct nice values of the threads of process `pid` (field 19 of each task's stat).
fn nice_of_threads(pid: i64) -> Vec<i64> {
    let mut found: Vec<i64> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            let (_, rest) = stat.rsplit_once(')')?;
            rest.split_whitespace().nth(19 - 3)?.parse().ok()
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

/// The sandbox pid of a warm sandbox of `handler` other than `taken` (waiting for one to be
/// ready again after a claim).
fn refilled_or_ready_pid(cri: &CriContainerd, handler: &str, taken: &str) -> i64 {
    let mut pid = None;
    poll_until(
        "a warm sandbox other than the claimed one",
        FILL_TIMEOUT,
        || {
            let dir = cri.pool_key_dir(handler)?;
            pid = entries(&dir.join("ready"))
                .iter()
                .find(|e| e["id"] != taken)
                .and_then(|e| e["pid"].as_i64());
            pid.map(|_| ())
        },
    )
    .unwrap();
    pid.unwrap()
}

/// A cold pod of `handler` writes its pool's template and starts the filler: the cold pod, the
/// `n` warm sandboxes it then holds, and the pool's key directory.
fn filled(cri: &CriContainerd, handler: &str, n: usize) -> (Pod, Vec<serde_json::Value>, PathBuf) {
    let cold = cri.run_pod("cold", handler).unwrap();
    let ready = wait_ready(cri, handler, n);
    let key = cri.pool_key_dir(handler).unwrap();
    (cold, ready, key)
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
    let out = cri.layout().drain_pools(&shim_binary().unwrap()).unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The audit records of `event`.
fn records(cri: &CriContainerd, event: &str) -> Vec<serde_json::Value> {
    cri.audit_records()
        .into_iter()
        .filter(|r| r["event"] == event)
        .collect()
}

fn ids_of(entries: &[serde_json::Value]) -> Vec<String> {
    entries
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect()
}

/// Field 22 of `/proc/PID/stat` (when it started): with the pid, it names one process.
fn start_time(pid: i64) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Whether the warm sandbox of `entry` still runs (the process it was booted as).
fn entry_alive(entry: &serde_json::Value) -> bool {
    let pid = entry["pid"].as_i64().unwrap();
    inspect::is_alive(pid as i32) && start_time(pid) == entry["start_time"].as_u64()
}

/// PSS in KiB of every process in the memory cgroup of `pid`, as the filler counts a warm
/// sandbox (sentry, gofer, stubs).
fn sandbox_pss_kib(pid: i64) -> u64 {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path = cgroups
        .lines()
        .find_map(|l| l.split_once(":memory:").map(|(_, path)| path))
        .unwrap_or_else(|| panic!("no memory cgroup of {pid}: {cgroups}"));
    let procs = std::fs::read_to_string(format!("/sys/fs/cgroup/memory{path}/cgroup.procs"))
        .unwrap_or_default();
    procs
        .split_whitespace()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/smaps_rollup")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Pss:"))?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Removes `pods` (with the containers each ran), all at once, and checks each left nothing.
fn remove_pods(cri: &CriContainerd, pods: &[(Pod, Vec<String>)]) {
    std::thread::scope(|s| {
        for (pod, _) in pods {
            s.spawn(move || cri.remove_pod(pod).unwrap());
        }
    });
    for (pod, containers) in pods {
        assert_pod_gone(cri, pod, containers);
    }
}

/// Drains the pool; the warm sandboxes `ids` are gone after it.
fn drain_and_check(cri: &CriContainerd, key: &Path, ids: &[String]) {
    let drained = drain(cri);
    assert!(drained.contains("deleted"), "{drained}");
    for id in ids {
        assert_warm_sandbox_gone(cri, key, id);
    }
}

mod claims;
mod egress;
mod fill;
