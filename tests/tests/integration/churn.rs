//! Churn: 200 create/start/delete cycles at concurrency 4, with the host counted before and
//! after. Any growth is a leak.
//!
//! - `churn_through_containerd_leaks_nothing`: through containerd and ctr, one shim per task,
//!   as `ctr run` uses the runtime. Counts processes, mounts, cgroups, runsc state, bundles,
//!   shim sockets and containerd's descriptors.
//! - `churn_in_one_long_lived_shim_leaks_no_descriptors`: 200 containers through one shim
//!   process over ttrpc (a pod's shim lives as long as the pod and serves every container
//!   created in it): its descriptors, threads and memory after the churn against after a
//!   warm-up cycle.
//!
//! Each task sleeps until it is killed: a task that exits on its own can race Start (see
//! `faults_start.rs`), and this test is about leaks, not that race.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use containerd_shim_protos::api::{DeleteRequest, KillRequest, StartRequest, WaitRequest};
use gvisor_hardened_tests::census::{fd_targets, shim_sockets_left, Census, Figures, ProcessUsage};
use gvisor_hardened_tests::direct::{ctx, DirectBundle, DirectShim, StartProtocol};
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::poll::poll_until;
use gvisor_hardened_tests::*;

const CYCLES: usize = 200;
const CONCURRENCY: usize = 4;
/// How long the runtime may take to release the last containers' resources after the last
/// cycle returned (shims exit and containerd removes bundles asynchronously).
const SETTLE: Duration = Duration::from_secs(30);

/// Runs `cycle(i)` for i in 0..CYCLES on CONCURRENCY threads; returns the failures.
fn churn(cycle: impl Fn(usize) -> Result<(), String> + Sync) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..CONCURRENCY {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= CYCLES {
                    break;
                }
                if let Err(e) = cycle(i) {
                    failures.lock().unwrap().push(format!("cycle {i}: {e}"));
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

#[test]
fn churn_through_containerd_leaks_nothing() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let policy = TestPolicy::builder(&c, "churn").write().unwrap();
    let ids: Vec<String> = (0..CYCLES)
        .map(|i| format!("churn-{i}-{}", unique_id("c")))
        .collect();
    let before = Census::take(&c);
    let started = Instant::now();

    let failures = churn(|i| {
        let id = &ids[i];
        let run = Run::new(image.reference(), id)
            .runtime(policy.runtime())
            .detach()
            .cmd(["sleep", "3600"]);
        let steps = [
            c.ctr().args(run.ctr_args_for(&c)),
            // --force: SIGKILL, wait for the exit, delete.
            c.ctr().args(["task", "rm", "--force", id]),
            c.ctr().args(["containers", "rm", id]),
        ];
        for step in steps {
            let what = step.describe();
            step.checked().map_err(|e| format!("{what}: {e}"))?;
        }
        Ok(())
    });
    let elapsed = started.elapsed();

    let mut after = Census::take(&c);
    let _ = poll_until("the churn's resources to be released", SETTLE, || {
        after = Census::take(&c);
        (after.processes == before.processes
            && after.mounts == before.mounts
            && after.cgroups == before.cgroups
            && after.runsc_state == before.runsc_state
            && after.bundles == before.bundles)
            .then_some(())
    });
    let sockets = shim_sockets_left(&c, &ids);
    let mut figures = Figures::default();
    figures.census(&before, &after);
    figures.row("shim sockets", 0, sockets.len());
    println!(
        "churn through containerd: {CYCLES} cycles (ctr run -d, task rm --force, container rm) \
         at concurrency {CONCURRENCY} in {:.1} s, {} failed\n{figures}",
        elapsed.as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} cycles failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        after.processes, before.processes,
        "leaked processes\n{figures}"
    );
    assert_eq!(after.mounts, before.mounts, "leaked mounts\n{figures}");
    assert_eq!(after.cgroups, before.cgroups, "leaked cgroups\n{figures}");
    assert_eq!(
        after.runsc_state, before.runsc_state,
        "leaked runsc state\n{figures}"
    );
    assert_eq!(after.bundles, before.bundles, "leaked bundles\n{figures}");
    assert!(sockets.is_empty(), "leaked shim sockets: {sockets:?}");
    // containerd keeps a few descriptors per live shim connection; with every shim gone it
    // must be back where it started.
    assert_eq!(
        after.containerd_fds, before.containerd_fds,
        "containerd descriptors\n{figures}"
    );
    assert_eq!(
        policy
            .audit_lines()
            .iter()
            .filter(|l| l["event"] == "delete")
            .count(),
        CYCLES
    );
    assert_clean_shutdown(c);
}

/// Create, Start, Kill (SIGKILL), Wait, Delete of `bundle` on `shim`.
fn direct_cycle(
    shim: &DirectShim,
    bundle: &DirectBundle,
    policy: &TestPolicy,
) -> Result<(), String> {
    let task = shim.task();
    let id = bundle.id.as_str();
    let e = |what: &'static str| {
        move |err: containerd_shim_protos::ttrpc::Error| format!("{what} {id}: {err}")
    };
    task.create(ctx(), &bundle.create_request(&policy.path))
        .map_err(e("Create"))?;
    let mut start = StartRequest::new();
    start.id = bundle.id.clone();
    task.start(ctx(), &start).map_err(e("Start"))?;
    let mut kill = KillRequest::new();
    kill.id = bundle.id.clone();
    kill.signal = libc::SIGKILL as u32;
    task.kill(ctx(), &kill).map_err(e("Kill"))?;
    let mut wait = WaitRequest::new();
    wait.id = bundle.id.clone();
    let exit = task.wait(ctx(), &wait).map_err(e("Wait"))?;
    if exit.exit_status != 137 {
        return Err(format!(
            "{}: exit status {} after SIGKILL",
            bundle.id, exit.exit_status
        ));
    }
    let mut delete = DeleteRequest::new();
    delete.id = bundle.id.clone();
    task.delete(ctx(), &delete).map_err(e("Delete"))?;
    Ok(())
}

/// Waits until the shim holds no descriptor of a deleted container. Each container's OOM
/// watcher keeps its `memory.oom_control` and an eventfd open until it notices the cgroup is
/// gone, a little after Delete returned; counts taken before that include them. A watcher
/// that never lets go shows up in the comparison that follows.
fn settle_container_descriptors(pid: i32) {
    let _ = poll_until(
        "the shim to close its containers' OOM watchers",
        SETTLE,
        || {
            (!fd_targets(pid)
                .iter()
                .any(|t| t.ends_with("memory.oom_control")))
            .then_some(())
        },
    );
}

#[test]
fn churn_in_one_long_lived_shim_leaks_no_descriptors() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let policy = TestPolicy::builder(&c, "churn-shim").write().unwrap();
    let rootfs = c.dir().join("direct").join("shared.rootfs");
    let bundle = |id: &str| {
        DirectBundle::sharing_rootfs(&c, id, &["sleep", "3600"], Some(&rootfs))
            .map_err(|e| e.to_string())
    };
    let first = bundle(&unique_id("warmup")).unwrap();
    let shim = DirectShim::start(&c, &first, StartProtocol::Legacy).unwrap();
    // The first cycle loads what a shim keeps for its lifetime (runsc features, the events
    // connection, the logger): the baseline is taken after it.
    direct_cycle(&shim, &first, &policy).unwrap();
    settle_container_descriptors(shim.pid);
    let baseline = ProcessUsage::of(shim.pid).unwrap();
    let baseline_fds = fd_targets(shim.pid);
    let census_before = Census::take(&c);
    let started = Instant::now();

    let ids: Vec<String> = (0..CYCLES)
        .map(|i| format!("shim-churn-{i}-{}", unique_id("c")))
        .collect();
    let failures = churn(|i| {
        let b = bundle(&ids[i])?;
        direct_cycle(&shim, &b, &policy)
    });
    let elapsed = started.elapsed();
    let at_end = ProcessUsage::of(shim.pid).unwrap();
    let at_end_fds = fd_targets(shim.pid);
    settle_container_descriptors(shim.pid);
    let after = ProcessUsage::of(shim.pid).unwrap();
    let after_fds = fd_targets(shim.pid);
    let census_after = Census::take(&c);
    let mut figures = Figures::default();
    figures.row("shim fds (at the last Delete)", baseline.fds, at_end.fds);
    figures.row("shim fds (settled)", baseline.fds, after.fds);
    figures.row("shim threads", baseline.threads, after.threads);
    figures.row("shim RSS KiB", baseline.rss_kib, after.rss_kib);
    figures.census(&census_before, &census_after);
    println!("shim descriptors, baseline: {baseline_fds:?}\nat the last Delete: {at_end_fds:?}");
    println!(
        "churn in one shim (pid {}): {CYCLES} cycles (Create, Start, Kill, Wait, Delete over \
         ttrpc) at concurrency {CONCURRENCY} in {:.1} s, {} failed\n{figures}",
        shim.pid,
        elapsed.as_secs_f64(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} cycles failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        after.fds == baseline.fds,
        "the shim leaked descriptors\n{figures}\nbaseline: {baseline_fds:?}\n\
         at the last Delete: {at_end_fds:?}\nsettled: {after_fds:?}"
    );
    assert_eq!(census_after.processes, census_before.processes, "{figures}");
    assert_eq!(census_after.mounts, census_before.mounts, "{figures}");
    assert_eq!(census_after.cgroups, census_before.cgroups, "{figures}");
    assert_eq!(
        census_after.runsc_state, census_before.runsc_state,
        "{figures}"
    );
    shim.shutdown().unwrap();
    assert_clean_shutdown(c);
}
