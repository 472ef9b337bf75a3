//! N sandboxes at once (1, 10, 30): how long each start takes when they all start together,
//! and what the shims, and the whole sandboxes, weigh while they all run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gvisor_hardened_tests::{inspect, unique_id};
use serde_json::{json, Value};

use crate::contenders::{Bench, BenchResult, Contender};
use crate::procfs::{self, loadavg, Mem};
use crate::stats::{round3, Summary};

/// Memory samples taken after all N sandboxes started, one per second: the shims and runsc
/// settle (first GC, lazily faulted pages, our shim's dropped code a second after its start)
/// within the first seconds, and our shim's periodic work (the 10 s timers) has run once by
/// the last one. The last sample is reported; the series is kept in the JSON so any drift
/// shows (a 30-sample run on 2026-12-07 was flat from the 11th sample on).
const MEMORY_SAMPLES: usize = 12;
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// Parallel `ctr` calls when tearing a level down.
const TEARDOWN_PARALLELISM: usize = 8;

pub struct Level {
    pub who: Contender,
    pub n: usize,
    /// Each `ctr run --detach` of the burst, ms.
    pub start_ms: Vec<f64>,
    /// From the first start to the last one returning, ms.
    pub burst_ms: f64,
    /// Sum over the N shim processes.
    pub shims: Mem,
    /// Sum over everything below the shims (runsc-sandbox, its stubs, runsc-gofer; for runc the
    /// container's process).
    pub sandboxes: Mem,
    /// Processes counted in `sandboxes`, per sandbox (the last one's, as a sanity check).
    pub processes_per_sandbox: usize,
    /// Total shim PSS of each memory sample, KiB.
    pub shim_pss_series: Vec<u64>,
    /// runsc processes on the machine that are not ours (other users share runsc's pages,
    /// which lowers our PSS).
    pub foreign_runsc: usize,
    /// Processes of the same shim binary that are not ours (another containerd's Go shims share
    /// /usr/bin/containerd-shim-runc-v2 with ours and lower its PSS; our shim's binary is
    /// this build's own file).
    pub foreign_same_shim: usize,
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

fn runsc_processes() -> Vec<i32> {
    inspect::processes()
        .into_iter()
        .filter(|p| p.cmdline.starts_with("runsc-sandbox") || p.cmdline.starts_with("runsc-gofer"))
        .map(|p| p.pid)
        .collect()
}

fn sample(shims: &[i32]) -> BenchResult<(Mem, Mem, usize)> {
    let mut shim_total = Mem::default();
    let mut below = Mem::default();
    let mut procs = 0;
    for &pid in shims {
        shim_total = shim_total
            + procfs::mem_of(pid).ok_or_else(|| format!("shim {pid} is gone mid-measurement"))?;
        let d = procfs::descendants(pid);
        procs = d.len();
        below = below
            + d.iter()
                .filter_map(|&p| procfs::mem_of(p))
                .fold(Mem::default(), |a, b| a + b);
    }
    Ok((shim_total, below, procs))
}

/// Starts `n` sleepers of `who` at once, measures, and removes them again.
pub fn measure_level(b: &Bench, who: Contender, n: usize) -> BenchResult<Level> {
    let ids: Vec<String> = (0..n)
        .map(|_| unique_id(&format!("s{}", who.short())))
        .collect();
    let load_before = loadavg();
    let t0 = Instant::now();
    let results: Vec<BenchResult<Duration>> = std::thread::scope(|s| {
        let handles: Vec<_> = ids
            .iter()
            .map(|id| s.spawn(move || b.start_sleeper(who, id)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("start thread panicked"))
            .collect()
    });
    let burst_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let mut start_ms = Vec::new();
    let mut first_error = None;
    for r in results {
        match r {
            Ok(d) => start_ms.push(d.as_secs_f64() * 1000.0),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    let measured = match first_error {
        Some(e) => Err(e),
        None => measure_running(b, &ids),
    };
    // Tear down whatever started, also after an error.
    let shim_pids: Vec<Option<i32>> = ids
        .iter()
        .map(|id| procfs::shim_pid(b.c.namespace(), id))
        .collect();
    for chunk in ids
        .iter()
        .zip(&shim_pids)
        .collect::<Vec<_>>()
        .chunks(TEARDOWN_PARALLELISM)
    {
        std::thread::scope(|s| {
            for (id, pid) in chunk {
                s.spawn(move || {
                    if let Err(e) = b.remove(id, **pid) {
                        eprintln!("  removing {id}: {e}");
                    }
                });
            }
        });
    }
    let (
        shims,
        sandboxes,
        processes_per_sandbox,
        shim_pss_series,
        foreign_runsc,
        foreign_same_shim,
    ) = measured?;
    Ok(Level {
        who,
        n,
        start_ms,
        burst_ms,
        shims,
        sandboxes,
        processes_per_sandbox,
        shim_pss_series,
        foreign_runsc,
        foreign_same_shim,
        load_before,
        load_after: loadavg(),
    })
}

type Running = (Mem, Mem, usize, Vec<u64>, usize, usize);

fn exe(pid: i32) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

fn measure_running(b: &Bench, ids: &[String]) -> BenchResult<Running> {
    let shims = ids
        .iter()
        .map(|id| b.shim_pid(id))
        .collect::<BenchResult<Vec<i32>>>()?;
    let mut series = Vec::new();
    let mut last = None;
    for i in 0..MEMORY_SAMPLES {
        if i > 0 {
            // A measurement window, not a wait for a condition.
            std::thread::sleep(SAMPLE_INTERVAL);
        }
        let (s, d, p) = sample(&shims)?;
        series.push(s.pss);
        last = Some((s, d, p));
    }
    let (s, d, p) = last.expect("at least one sample");
    let ours: std::collections::HashSet<i32> = shims
        .iter()
        .flat_map(|&pid| procfs::descendants(pid))
        .collect();
    let foreign = runsc_processes()
        .into_iter()
        .filter(|p| !ours.contains(p))
        .count();
    let shim_exe = exe(shims[0]);
    let foreign_shims = inspect::processes()
        .into_iter()
        .filter(|p| !shims.contains(&p.pid) && shim_exe.is_some() && exe(p.pid) == shim_exe)
        .count();
    Ok((s, d, p, series, foreign, foreign_shims))
}

impl Level {
    pub fn start_summary(&self) -> Option<Summary> {
        Summary::of(&self.start_ms)
    }

    pub fn to_json(&self) -> Value {
        json!({
            "runtime": self.who.key(),
            "sandboxes": self.n,
            "start_ms": self.start_ms.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
            "start_summary_ms": self.start_summary().map(|s| s.to_json()),
            "burst_wall_ms": round3(self.burst_ms),
            "shims_total": self.shims.to_json(),
            "shim_each": self.shims.per(self.n).to_json(),
            "below_shims_total": self.sandboxes.to_json(),
            "sandbox_total_each": (self.shims + self.sandboxes).per(self.n).to_json(),
            "processes_below_each_shim": self.processes_per_sandbox,
            "shim_pss_kib_series": self.shim_pss_series,
            "foreign_runsc_processes": self.foreign_runsc,
            "foreign_same_shim_binary_processes": self.foreign_same_shim,
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
        })
    }
}

/// Every level for every runtime; the order of the runtimes alternates from level to level.
pub fn measure(
    b: &Bench,
    levels: &[usize],
    who: &[Contender],
) -> BenchResult<BTreeMap<(usize, Contender), Level>> {
    let mut out = BTreeMap::new();
    for (i, &n) in levels.iter().enumerate() {
        let mut order = who.to_vec();
        if i % 2 == 1 {
            order.reverse();
        }
        for w in order {
            eprintln!("  scaling: {} x {}", n, w.label());
            out.insert((n, w), measure_level(b, w, n)?);
        }
    }
    Ok(out)
}
