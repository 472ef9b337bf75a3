//! Cgroup detection against real runsc sandboxes (root): OOM and process-limit classification,
//! metrics of a live sandbox, limit updates, and no cgroup left after delete.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::exit_cause::ExitProbe;
use super::oom::OomWatcher;
use super::paths::{parse_mountinfo, SandboxCgroup};
use super::update::{update, Limits};
use crate::exit::ExitCause;
use crate::reaper::{ExitFuture, ExitStatus};
use crate::runsc::test_support::{Bundle, Harness};

const WAIT: Duration = Duration::from_secs(60);

/// Creates the sandbox, locates its cgroups from its pid, arms the exit probe, starts it.
async fn run(bundle: &Bundle, h: &Harness) -> (SandboxCgroup, ExitProbe, ExitFuture) {
    let (pid, exit) = h.create_watched(bundle).await;
    let cgroup = SandboxCgroup::of_pid(pid).unwrap();
    let probe = ExitProbe::arm(cgroup.clone()).unwrap();
    h.runsc.start(&bundle.id, None).await.unwrap();
    (cgroup, probe, exit)
}

async fn delete_and_check_cgroups_gone(h: &Harness, id: &str, cgroup: &SandboxCgroup) {
    assert!(
        !cgroup.remaining().is_empty(),
        "runsc keeps the cgroups until delete"
    );
    h.runsc.delete(id, true).await.unwrap();
    assert!(cgroup.remaining().is_empty(), "{:?}", cgroup.remaining());
}

#[tokio::test]
async fn memory_hog_is_classified_as_oom() {
    let mut bundle = Bundle::new("oom", "x=a; while true; do x=\"$x$x\"; done");
    bundle.set("/linux/resources", json!({"memory": {"limit": 48 << 20}}));
    let h = Harness::new(&bundle.id).await;
    let (cgroup, probe, exit) = run(&bundle, &h).await;
    let mut watcher = OomWatcher::start(&cgroup).unwrap();
    let oom_event = tokio::spawn(async move { watcher.next().await });
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    assert_eq!(status.containerd_code(), 137, "{status}");
    assert_eq!(probe.classify(status).unwrap(), ExitCause::Oom);
    // The early notification fired too (before `runsc delete`, so it is the OOM, not removal).
    let fired = tokio::time::timeout(WAIT, oom_event)
        .await
        .unwrap()
        .unwrap();
    assert!(fired.unwrap());
    delete_and_check_cgroups_gone(&h, &bundle.id, &cgroup).await;
}

#[tokio::test]
async fn forking_past_the_pids_limit_is_classified_as_process_limit() {
    let mut bundle = Bundle::new(
        "pids",
        "i=0; while [ $i -lt 100 ]; do sleep 1000 & i=$((i+1)); done; wait",
    );
    bundle.set("/linux/resources", json!({"pids": {"limit": 64}}));
    let h = Harness::new(&bundle.id).await;
    let (cgroup, probe, exit) = run(&bundle, &h).await;
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    // The sentry panics at the ceiling (NOTES.md).
    assert_eq!(status, ExitStatus::Exited(2));
    assert_eq!(probe.classify(status).unwrap(), ExitCause::ProcessLimit);
    delete_and_check_cgroups_gone(&h, &bundle.id, &cgroup).await;
}

#[tokio::test]
async fn a_plain_exit_and_a_kill_are_told_by_their_status() {
    let mut bundle = Bundle::new("plain", "exit 3");
    bundle.set(
        "/linux/resources",
        json!({"memory": {"limit": 64 << 20}, "pids": {"limit": 200}}),
    );
    let h = Harness::new(&bundle.id).await;
    let (cgroup, probe, exit) = run(&bundle, &h).await;
    let mut watcher = OomWatcher::start(&cgroup).unwrap();
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    assert_eq!(status, ExitStatus::Exited(3));
    assert_eq!(probe.classify(status).unwrap(), ExitCause::Exited);
    delete_and_check_cgroups_gone(&h, &bundle.id, &cgroup).await;
    // Removing the cgroup ends the OOM watch without an OOM.
    let ended = tokio::time::timeout(WAIT, watcher.next()).await.unwrap();
    assert!(!ended.unwrap());
}

#[tokio::test]
async fn live_sandbox_metrics_limits_and_updates() {
    let mut bundle = Bundle::new("stats", "sleep 1000");
    bundle.set(
        "/linux/resources",
        json!({"memory": {"limit": 96 << 20}, "pids": {"limit": 300}}),
    );
    let h = Harness::new(&bundle.id).await;
    let (cgroup, probe, exit) = run(&bundle, &h).await;

    // What containerd's metrics are read from (the containerd front end packs them; `ctr task
    // metrics` is checked end to end in tests/): the limits as set, the sandbox's usage.
    let file = |c: &'static str, f: &str| {
        std::fs::read_to_string(cgroup.dir(c).unwrap().join(f)).map(|s| s.trim().to_string())
    };
    let num = |c: &'static str, f: &str| file(c, f).unwrap().parse::<u64>().unwrap();
    assert_eq!(num("memory", "memory.limit_in_bytes"), 96 << 20);
    assert!(num("memory", "memory.usage_in_bytes") > 0);
    assert_eq!(num("pids", "pids.max"), 300);
    // Sentry, gofer and stubs: well above the one guest process.
    assert!(num("pids", "pids.current") > 1);
    assert!(num("cpuacct", "cpuacct.usage") > 0);

    // runsc 20221219 has no `update`: the shim writes the files itself.
    assert!(!h.runsc.features().supports_update());
    let limits = Limits::from_linux_resources(
        &json!({"memory": {"limit": 128 << 20}, "pids": {"limit": 400}, "cpu": {"quota": 50000, "period": 100000}}),
    )
    .unwrap();
    update(&cgroup, &limits).unwrap();
    let read = |c: &'static str, f: &str| file(c, f).unwrap();
    assert_eq!(
        read("memory", "memory.limit_in_bytes"),
        (128u64 << 20).to_string()
    );
    assert_eq!(read("pids", "pids.max"), "400");
    assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");

    h.runsc
        .kill(&bundle.id, libc::SIGKILL, false, None)
        .await
        .unwrap();
    let status = tokio::time::timeout(WAIT, exit).await.unwrap();
    // The sandbox process relays the container's fate as its own exit code (128 + 9).
    assert_eq!(status, ExitStatus::Exited(137));
    assert!(!probe.classify(status).unwrap().is_enforced());
    // The numbers stay readable after the exit, until delete.
    assert!(file("pids", "pids.current").is_ok());
    delete_and_check_cgroups_gone(&h, &bundle.id, &cgroup).await;
    assert!(file("pids", "pids.current").is_err());
}

#[tokio::test]
async fn spec_rules_match_where_runsc_put_the_sandbox() {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = parse_mountinfo(&mountinfo);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for relative in [false, true] {
        let mut bundle = Bundle::new("where", "sleep 1000");
        let path = if relative {
            format!("gvh-shim-test-rel/{}", bundle.id)
        } else {
            format!("/gvh-shim-test/{}", bundle.id)
        };
        bundle.set("/linux/cgroupsPath", json!(path));
        let h = Harness::new(&bundle.id).await;
        let (pid, exit) = h.create_watched(&bundle).await;
        let actual = SandboxCgroup::of_pid(pid).unwrap();
        let predicted = SandboxCgroup::from_spec(&mounts, &path, &bundle.id, &own).unwrap();
        assert_eq!(predicted, actual, "cgroupsPath {path}");
        assert_eq!(SandboxCgroup::for_spec(&path, &bundle.id).unwrap(), actual);
        h.runsc.delete(&bundle.id, true).await.unwrap();
        tokio::time::timeout(WAIT, exit).await.unwrap();
        assert!(actual.remaining().is_empty());
        if relative {
            // runsc leaves the parent of a relative path behind (here, under the memory
            // cgroup of this test process too): remove it.
            for dir in actual.dirs() {
                let _ = std::fs::remove_dir(dir.parent().unwrap_or(Path::new("/nonexistent")));
            }
            let _ = std::fs::remove_dir("/sys/fs/cgroup/systemd/gvh-shim-test-rel");
        }
    }
}
