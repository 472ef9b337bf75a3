//! Resource attacks: a fork bomb, a memory bomb, a CPU hog, and a workload that outlives the
//! maximum runtime. Each tightens its own ceiling through a `gvisor-hardened.dev/*` annotation
//! (or a test policy), so the attack ends in seconds instead of at the default ceilings.

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use super::lab::{Job, Lab};
use super::{ensure, wait_for, Attack, Category, Failed, Outcome};
use crate::inspect;

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Resources,
        expected,
        run,
    };
    vec![
        a(
            "fork bomb (pids budget 16)",
            "sandbox dies at its pids ceiling; audit \"process limit exceeded\"; a sandbox running beside it is unaffected",
            fork_bomb,
        ),
        a(
            "memory bomb (memory 64Mi)",
            "OOM kill: exit 137, TaskOOM event, audit oom: true",
            memory_bomb,
        ),
        a(
            "CPU hog, 2 spinning processes (cpu 500m)",
            "cgroup quota 50ms/100ms; usage within it (cpuacct)",
            cpu_hog,
        ),
        a(
            "outlive max_runtime 3s, ignoring SIGTERM",
            "SIGTERM, then SIGKILL after the 2s grace: exit 137; audit timeout + timed_out: true",
            max_runtime,
        ),
    ]
}

fn fork_bomb(lab: &Lab) -> Outcome {
    let bystander = lab.start_detached(Job::probe("res-bystander", &["sleep", "300"]))?;
    let result = (|| {
        let ran = lab.run(
            Job::sh(
                "res-forkbomb",
                "b() { b | b & }; b; exec /bin/sandbox-probe sleep 120",
            )
            .flags(["--annotation", "gvisor-hardened.dev/pids=16"]),
        )?;
        ensure(ran.started && ran.code() != 0, || {
            format!("the bomb's sandbox did not die: {}", ran.summary())
        })?;
        let exit = lab.audit_event(&ran.id, "exit")?;
        ensure(
            exit["process_limit_exceeded"] == true
                && exit["error"].as_str() == Some("process limit exceeded"),
            || format!("audit exit line: {exit}"),
        )?;
        ensure(
            lab.task_status(&bystander).as_deref() == Some("RUNNING"),
            || format!("bystander {bystander} is {:?}", lab.task_status(&bystander)),
        )?;
        let forked = lab.exec(&bystander, &[], &["/bin/sandbox-probe", "fork", "8"])?;
        ensure(forked.stdout.starts_with("ok forked=8"), || {
            format!("bystander cannot fork: {forked}")
        })?;
        Ok(format!(
            "exit {}; audit: process_limit_exceeded, \"process limit exceeded\"; bystander running and forking",
            ran.code()
        ))
    })();
    lab.remove(&bystander)?;
    result
}

fn memory_bomb(lab: &Lab) -> Outcome {
    let ran = lab.run(
        Job::probe("res-membomb", &["mem", "1024"])
            .flags(["--annotation", "gvisor-hardened.dev/memory=64Mi"]),
    )?;
    ensure(ran.code() == 137, || {
        format!("expected exit 137: {}", ran.summary())
    })?;
    let oom = lab
        .events()
        .wait_for("/tasks/oom", &ran.id, Duration::from_secs(15))
        .map_err(|e| Failed(format!("no TaskOOM: {e}")))?;
    let exit = lab.audit_event(&ran.id, "exit")?;
    ensure(exit["oom"] == true && exit["exit_status"] == 137, || {
        format!("audit exit line: {exit}")
    })?;
    let _ = oom;
    Ok("exit 137; TaskOOM event; audit oom: true".into())
}

/// The directory of `id`'s cgroup in the hierarchy that has `file`.
fn cgroup_with(lab: &Lab, id: &str, file: &str) -> Option<PathBuf> {
    inspect::cgroup_dirs(&format!("{}/{id}", lab.c.namespace()))
        .into_iter()
        .find(|d| d.join(file).is_file())
}

fn read_u64(path: &Path) -> Result<u64, Failed> {
    fs::read_to_string(path)
        .map_err(|e| Failed(format!("{}: {e}", path.display())))?
        .trim()
        .parse()
        .map_err(|e| Failed(format!("{}: {e}", path.display())))
}

fn cpu_hog(lab: &Lab) -> Outcome {
    let id = lab.start_detached(
        Job::probe("res-cpuhog", &["spin", "120", "2"])
            .flags(["--annotation", "gvisor-hardened.dev/cpu=500m"]),
    )?;
    let result = (|| {
        let cpu = wait_for("the cpu cgroup", Duration::from_secs(10), || {
            cgroup_with(lab, &id, "cpu.cfs_quota_us")
        })?;
        let acct = wait_for("the cpuacct cgroup", Duration::from_secs(10), || {
            cgroup_with(lab, &id, "cpuacct.usage")
        })?;
        let quota = read_u64(&cpu.join("cpu.cfs_quota_us"))?;
        let period = read_u64(&cpu.join("cpu.cfs_period_us"))?;
        ensure(quota == 50_000 && period == 100_000, || {
            format!("cgroup quota {quota}us per {period}us, expected 50000/100000")
        })?;
        // Measure over a window once the hog runs. The window is a measurement, not a wait
        // for something to happen: CFS enforces the quota per period, so usage over any window
        // is at most quota per period plus one period's quota at each edge.
        wait_for("the hog to use CPU", Duration::from_secs(10), || {
            read_u64(&acct.join("cpuacct.usage"))
                .ok()
                .filter(|&u| u > 0)
        })?;
        let (t0, u0) = (Instant::now(), read_u64(&acct.join("cpuacct.usage"))?);
        thread::sleep(Duration::from_secs(3));
        let (t1, u1) = (Instant::now(), read_u64(&acct.join("cpuacct.usage"))?);
        let wall = (t1 - t0).as_nanos() as f64;
        let used = (u1 - u0) as f64;
        let bound = quota as f64 * (wall / (period as f64 * 1000.0) + 2.0) * 1000.0;
        ensure(used > 0.0 && used <= bound, || {
            format!(
                "used {:.2} CPU-s in {:.2} s, bound {:.2}",
                used / 1e9,
                wall / 1e9,
                bound / 1e9
            )
        })?;
        Ok(format!(
            "quota 50000/100000us; {:.2} CPUs used over {:.1} s (ceiling 0.50)",
            used / wall,
            wall / 1e9
        ))
    })();
    lab.remove(&id)?;
    result
}

fn max_runtime(lab: &Lab) -> Outcome {
    let policy = lab.write_policy(
        "lifetime-3s",
        "[lifetime]\nmax_runtime = \"3s\"\ngrace_period = \"2s\"\n",
    )?;
    let ran = lab.run(
        Job::sh(
            "res-runtime",
            "trap '' TERM; exec /bin/sandbox-probe sleep 600",
        )
        .policy(policy),
    )?;
    ensure(ran.code() == 137, || {
        format!(
            "expected exit 137 (SIGKILL after the grace period): {}",
            ran.summary()
        )
    })?;
    lab.audit_event(&ran.id, "timeout")?;
    let exit = lab.audit_event(&ran.id, "exit")?;
    ensure(exit["timed_out"] == true, || {
        format!("audit exit line: {exit}")
    })?;
    Ok("exit 137; audit: timeout, then exit with timed_out: true".into())
}
