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
    let out = std::process::Command::new(shim_binary().unwrap())
        .arg("pool-drain")
        .arg(cri.layout().runsc_root_base())
        .output()
        .unwrap();
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
        cri.pool_claim_of(&cold.id).is_none(),
        "an empty pool was claimed from"
    );
    let cold_app = cri.run_container(&cold, &sleeper("app")).unwrap();
    let ready = wait_ready(&cri, handler, 2);
    let key = cri.pool_key_dir(handler).unwrap();

    // The next pod takes the oldest warm sandbox; the audit names the record of its boot.
    let warm = cri.run_pod("warm", handler).unwrap();
    let claim = cri.pool_claim_of(&warm.id).unwrap_or_else(|| {
        let events: Vec<String> = cri
            .audit_records()
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
    let booted = cri
        .audit_records()
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
    // Warm sandboxes wait and boot at the lowest CPU priority; a claimed one runs at the
    // normal priority, every thread of it.
    let claimed_pid = ready[0]["pid"].as_i64().unwrap();
    let waiting_pid = refilled_or_ready_pid(&cri, handler, &taken);
    assert_eq!(
        nice_of_threads(waiting_pid),
        vec![19],
        "a warm sandbox not at nice 19"
    );
    assert_eq!(
        nice_of_threads(claimed_pid),
        vec![0],
        "a claimed sandbox not at nice 0"
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
    let ids = ids_of(&wait_ready(&cri, handler, 2));
    drain_and_check(&cri, &key, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn twenty_pods_at_once_never_share_a_warm_sandbox_and_the_rest_start_cold() {
    let cri = start(
        "size = 4\nrefill_per_minute = 600\nmemory_limit = \"1Gi\"",
        "size = 1",
    );
    let handler = HARDENED_HANDLER;
    let (cold, _, key) = filled(&cri, handler, 4);

    // 20 RunPodSandbox at once, each pod then running hardened: 4 warm sandboxes (and what the
    // filler boots during the burst) for 20 claimants.
    let pods: Vec<(Pod, Vec<String>)> = std::thread::scope(|s| {
        let cri = &cri;
        let started: Vec<_> = (0..20)
            .map(|i| {
                s.spawn(move || {
                    let pod = cri.run_pod(&format!("p{i}"), handler).unwrap();
                    let app = cri.run_container(&pod, &sleeper("app")).unwrap();
                    let id = cri.client().exec_sync(&app, &["id", "-u"], 30).unwrap();
                    assert_eq!(id.stdout.trim(), "65534", "pod {}: {id:?}", pod.id);
                    (pod, vec![app])
                })
            })
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });

    // No warm sandbox served two pods: each claim names another one, each one a booted warm
    // sandbox; a pod that claimed runs in the sandbox that was booted, a pod that did not runs
    // in one of its own, and no two pods share a sandbox process.
    let booted = records(&cri, "pool-sandbox-booted");
    let mut claimed = Vec::new();
    for (pod, _) in &pods {
        let pid = pod.pid.expect("no sandbox pid of a pod");
        let booted_as = booted.iter().find(|b| b["pid"] == pid);
        match cri.pool_claim_of(&pod.id) {
            Some(c) => {
                let sandbox = c["pool"]["sandbox"].as_str().unwrap().to_string();
                assert!(!claimed.contains(&sandbox), "{sandbox} claimed twice");
                let boot = booted
                    .iter()
                    .find(|b| b["container_id"] == sandbox.as_str())
                    .unwrap_or_else(|| panic!("claimed {sandbox} was never booted"));
                assert_eq!(c["pool"]["key"], boot["pool"]["key"]);
                assert_eq!(
                    booted_as,
                    Some(boot),
                    "pod {} does not run in {sandbox}",
                    pod.id
                );
                claimed.push(sandbox);
            }
            None => assert!(
                booted_as.is_none(),
                "pod {} runs in a warm sandbox it did not claim: {booted_as:?}",
                pod.id
            ),
        }
    }
    gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema(
        &cri.layout().audit_log(),
    );
    let pids: std::collections::BTreeSet<i32> = pods.iter().filter_map(|(p, _)| p.pid).collect();
    assert_eq!(pids.len(), pods.len(), "two pods share a sandbox process");
    assert!(!claimed.is_empty(), "no pod claimed:\n{}", pool_state(&cri));
    println!(
        "{} of {} pods claimed a warm sandbox; {} warm sandboxes booted",
        claimed.len(),
        pods.len(),
        booted.len()
    );

    // Each claimed sandbox goes with its pod.
    remove_pods(&cri, &pods);
    for sandbox in &claimed {
        assert_warm_sandbox_gone(&cri, &key, sandbox);
    }
    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[]);

    // The pool is full again (so no filler is at work) before it is drained.
    let ids = ids_of(&wait_ready(&cri, handler, 4));
    drain_and_check(&cri, &key, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_warm_sandbox_that_died_is_never_claimed_and_is_replaced() {
    let cri = start("size = 2\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 2);

    // The oldest warm sandbox, the next to be claimed, dies.
    let dead = ready[0]["id"].as_str().unwrap().to_string();
    let pid = ready[0]["pid"].as_i64().unwrap();
    assert!(
        entry_alive(&ready[0]),
        "{dead} died before the test killed it"
    );
    // SAFETY: kill(2) of the warm sandbox's process, checked by its start time just above.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    poll_until(
        "the killed sandbox to exit",
        Duration::from_secs(10),
        || (!inspect::is_alive(pid as i32)).then_some(()),
    )
    .unwrap();

    // The next pod passes over it and takes the other one.
    let warm = cri.run_pod("warm", handler).unwrap();
    let claim = cri
        .pool_claim_of(&warm.id)
        .unwrap_or_else(|| panic!("pod {} claimed nothing:\n{}", warm.id, pool_state(&cri)));
    assert_ne!(
        claim["pool"]["sandbox"],
        dead.as_str(),
        "a dead sandbox was claimed"
    );
    assert_eq!(claim["pool"]["sandbox"], ready[1]["id"], "{claim}");

    // The filler deletes the dead one (runsc state, cgroups, processes, bundle) and refills.
    let mut last = Vec::new();
    poll_until("two live warm sandboxes again", FILL_TIMEOUT, || {
        last = entries(&key.join("ready"));
        (last.len() == 2
            && last
                .iter()
                .all(|e| e["id"] != dead.as_str() && entry_alive(e)))
        .then_some(())
    })
    .unwrap_or_else(|_| panic!("{last:#?}\n{}", pool_state(&cri)));
    assert_warm_sandbox_gone(&cri, &key, &dead);
    let log = std::fs::read_to_string(key.join("fill.log")).unwrap();
    assert!(log.contains("removed 1 dead"), "{log}");

    remove_pods(&cri, &[(warm, Vec::new()), (cold, Vec::new())]);
    let ids = ids_of(&wait_ready(&cri, handler, 2));
    drain_and_check(&cri, &key, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn policies_with_other_flags_never_share_a_pool() {
    let pool = "size = 1\nrefill_per_minute = 600";
    let cri = start(pool, pool);
    let handlers = [HARDENED_HANDLER, HARDENED_TOOL_HANDLER];
    let cold: Vec<Pod> = handlers
        .iter()
        .map(|h| cri.run_pod(&format!("cold-{h}"), h).unwrap())
        .collect();
    let ready: Vec<Vec<serde_json::Value>> =
        handlers.iter().map(|h| wait_ready(&cri, h, 1)).collect();
    let keys: Vec<PathBuf> = handlers
        .iter()
        .map(|h| cri.pool_key_dir(h).unwrap())
        .collect();
    assert_ne!(keys[0], keys[1], "two policies share a pool");
    let templates: Vec<serde_json::Value> = keys
        .iter()
        .map(|k| serde_json::from_slice(&std::fs::read(k.join("template.json")).unwrap()).unwrap())
        .collect();
    // The tool policy boots runsc with the default's flags but is another policy with another
    // resource shape (memory, CPUs, processes), which the sentry sizes itself by at boot.
    assert_ne!(templates[0]["policy_sha256"], templates[1]["policy_sha256"]);
    assert_ne!(
        templates[0]["spec"]["linux"]["resources"],
        templates[1]["spec"]["linux"]["resources"]
    );

    // Each handler's pod claims from its own key's pool and nothing the other pool ever held.
    let mut pods = Vec::new();
    for (i, h) in handlers.iter().enumerate() {
        let other = 1 - i;
        let pod = cri.run_pod(&format!("warm-{h}"), h).unwrap();
        let claim = cri
            .pool_claim_of(&pod.id)
            .unwrap_or_else(|| panic!("{h}: claimed nothing:\n{}", pool_state(&cri)));
        let sandbox = claim["pool"]["sandbox"].as_str().unwrap();
        let key_name = keys[i].file_name().unwrap().to_str().unwrap();
        assert_eq!(sandbox, ready[i][0]["id"], "{h}: {claim}");
        assert_eq!(claim["pool"]["key"], key_name, "{h}: {claim}");
        let boots: Vec<serde_json::Value> = records(&cri, "pool-sandbox-booted")
            .into_iter()
            .filter(|b| b["container_id"] == sandbox)
            .collect();
        assert_eq!(boots.len(), 1, "{boots:#?}");
        assert_eq!(boots[0]["pool"]["key"], key_name);
        let other_held: Vec<String> = ["ready", "claimed", "dead"]
            .iter()
            .flat_map(|d| ids_of(&entries(&keys[other].join(d))))
            .chain(ids_of(&ready[other]))
            .collect();
        assert!(!other_held.contains(&sandbox.to_string()), "{other_held:?}");
        pods.push((pod, Vec::new()));
    }

    pods.extend(cold.into_iter().map(|p| (p, Vec::new())));
    remove_pods(&cri, &pods);
    // One drain empties both pools.
    let ids: Vec<Vec<String>> = handlers
        .iter()
        .map(|h| ids_of(&wait_ready(&cri, h, 1)))
        .collect();
    drain_and_check(&cri, &keys[0], &ids[0]);
    for id in &ids[1] {
        assert_warm_sandbox_gone(&cri, &keys[1], id);
    }
    assert_clean_cri_shutdown(cri);
}

#[test]
fn the_filler_stops_at_the_memory_bound() {
    let cri = start(
        "size = 8\nmemory_limit = \"64Mi\"\nrefill_per_minute = 600",
        "size = 1",
    );
    let handler = HARDENED_HANDLER;
    let cold = cri.run_pod("cold", handler).unwrap();
    let mut log = String::new();
    let key = poll_until(
        "the filler to stop at the memory bound",
        FILL_TIMEOUT,
        || {
            let key = cri.pool_key_dir(handler)?;
            log = std::fs::read_to_string(key.join("fill.log")).unwrap_or_default();
            log.contains("memory bound").then_some(key)
        },
    )
    .unwrap_or_else(|_| panic!("fill.log:\n{log}"));

    let ready = entries(&key.join("ready"));
    assert!(
        !ready.is_empty() && ready.len() < 8,
        "{} ready\n{log}",
        ready.len()
    );
    let pss: Vec<u64> = ready
        .iter()
        .map(|e| sandbox_pss_kib(e["pid"].as_i64().unwrap()))
        .collect();
    // The filler boots the next sandbox while the ready ones plus their average fit under the
    // bound, so the last one booted may take the total past it by what it costs itself beyond
    // that average: at most the dearest sandbox's PSS.
    let total: u64 = pss.iter().sum();
    let dearest = pss.iter().copied().max().unwrap();
    println!(
        "{} warm sandboxes, PSS {pss:?} KiB, {total} KiB in all",
        ready.len()
    );
    assert!(
        total <= 64 * 1024 + dearest,
        "{total} KiB of PSS in {} warm sandboxes ({pss:?})\n{log}",
        ready.len()
    );

    remove_pods(&cri, &[(cold, Vec::new())]);
    drain_and_check(&cri, &key, &ids_of(&ready));
    assert_clean_cri_shutdown(cri);
}

#[test]
fn an_empty_pool_is_a_cold_start() {
    let cri = start("size = 1\nrefill_per_minute = 1", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 1);

    // Pod A takes the one warm sandbox; at one boot a minute, none is ready for pod B.
    let a = cri.run_pod("a", handler).unwrap();
    let claim = cri
        .pool_claim_of(&a.id)
        .unwrap_or_else(|| panic!("pod a claimed nothing:\n{}", pool_state(&cri)));
    assert_eq!(claim["pool"]["sandbox"], ready[0]["id"]);
    let b = cri.run_pod("b", handler).unwrap();
    assert!(
        cri.pool_claim_of(&b.id).is_none(),
        "pod b claimed from an empty pool:\n{}",
        pool_state(&cri)
    );
    assert!(
        records(&cri, "pool-sandbox-booted")
            .iter()
            .all(|r| Some(r["pid"].as_i64().unwrap() as i32) != b.pid),
        "pod b runs in a warm sandbox"
    );
    let app = cri.run_container(&b, &sleeper("app")).unwrap();
    let id = cri.client().exec_sync(&app, &["id", "-u"], 10).unwrap();
    assert_eq!(id.stdout.trim(), "65534", "{id:?}");

    // Nor was one booted behind pod A: the filler its claim started waits out the minute.
    assert_eq!(
        records(&cri, "pool-sandbox-booted").len(),
        1,
        "{}",
        pool_state(&cri)
    );
    remove_pods(&cri, &[(a, Vec::new()), (b, vec![app]), (cold, Vec::new())]);
    assert_warm_sandbox_gone(&cri, &key, ready[0]["id"].as_str().unwrap());
    // The drain stops that waiting filler; nothing of the pool is left.
    drain(&cri);
    assert!(!key.exists(), "{}", pool_state(&cri));
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_claimed_pod_whose_shim_died_is_cleaned_up_by_the_delete_action() {
    let cri = start("size = 1\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 1);
    let taken = ready[0]["id"].as_str().unwrap().to_string();
    let pod = cri.run_pod("orphan", handler).unwrap();
    assert_eq!(
        cri.pool_claim_of(&pod.id)
            .map(|c| c["pool"]["sandbox"].clone()),
        Some(serde_json::json!(taken))
    );
    let app = cri.run_container(&pod, &sleeper("app")).unwrap();

    // The pod's shim dies: only the claim record in the pod sandbox's bundle still names the
    // warm sandbox runsc knows by the pool's id. containerd's delete action must find it.
    let shims = shim_processes(&cri, &pod.id);
    assert_eq!(shims.len(), 1, "{shims:#?}");
    // SAFETY: kill(2) with integer arguments, at the shim this test's containerd started.
    assert_eq!(unsafe { libc::kill(shims[0].pid, libc::SIGKILL) }, 0);
    poll_until(
        "the killed shim to be gone",
        Duration::from_secs(10),
        || shim_processes(&cri, &pod.id).is_empty().then_some(()),
    )
    .unwrap();
    poll_until(
        "the app container of the killed shim to read as exited",
        Duration::from_secs(30),
        || {
            let (status, _) = cri.client().container_status(&app, false).unwrap();
            (status.state == k8s_cri::v1::ContainerState::ContainerExited as i32).then_some(())
        },
    )
    .unwrap();
    // What the kubelet does with a pod whose sandbox died: stop and remove it.
    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[app]);
    assert_warm_sandbox_gone(&cri, &key, &taken);

    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[]);
    let left = ids_of(&wait_ready(&cri, handler, 1));
    drain_and_check(&cri, &key, &left);
    assert_clean_cri_shutdown(cri);
}
