//! Churn: sandboxes created and destroyed per second, `concurrency` workers each running
//! `ctr run --rm IMAGE ID true` back to back.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use serde_json::{json, Value};

use crate::contenders::{Bench, BenchResult, Contender};
use crate::procfs::loadavg;
use crate::stats::{round3, Summary};

pub struct Batch {
    pub who: Contender,
    pub concurrency: usize,
    pub runs: usize,
    pub wall_s: f64,
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

impl Batch {
    pub fn per_second(&self) -> f64 {
        self.runs as f64 / self.wall_s
    }
}

/// `runs` sandboxes through `concurrency` workers sharing one counter; the wall time runs from
/// the first start to the last exit.
fn batch(b: &Bench, who: Contender, concurrency: usize, runs: usize) -> BenchResult<Batch> {
    let next = AtomicUsize::new(0);
    let load_before = loadavg();
    let t = Instant::now();
    let results: Vec<BenchResult<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..concurrency)
            .map(|_| {
                s.spawn(|| -> BenchResult<()> {
                    while next.fetch_add(1, Ordering::SeqCst) < runs {
                        b.run_true(who)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("churn worker panicked"))
            .collect()
    });
    let wall_s = t.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    Ok(Batch {
        who,
        concurrency,
        runs,
        wall_s,
        load_before,
        load_after: loadavg(),
    })
}

/// `rounds` batches per (runtime, concurrency), alternating runtimes batch by batch.
pub fn measure(
    b: &Bench,
    concurrencies: &[usize],
    runs: usize,
    rounds: usize,
) -> BenchResult<Vec<Batch>> {
    let mut out = Vec::new();
    for &k in concurrencies {
        for round in 0..rounds {
            let mut order = Contender::GVISOR.to_vec();
            if round % 2 == 1 {
                order.reverse();
            }
            for who in order {
                eprintln!(
                    "  churn: concurrency {k}, {}, round {}/{rounds}",
                    who.label(),
                    round + 1
                );
                out.push(batch(b, who, k, runs)?);
            }
        }
    }
    Ok(out)
}

/// Per (concurrency, runtime): the median rate over the rounds, and each round's rate.
pub fn rates(batches: &[Batch], who: Contender, concurrency: usize) -> Vec<f64> {
    batches
        .iter()
        .filter(|x| x.who == who && x.concurrency == concurrency)
        .map(Batch::per_second)
        .collect()
}

pub fn to_json(batches: &[Batch], concurrencies: &[usize]) -> Value {
    let mut rows = Vec::new();
    for &k in concurrencies {
        let mut row = serde_json::Map::new();
        row.insert("concurrency".into(), json!(k));
        for who in Contender::GVISOR {
            let r = rates(batches, who, k);
            row.insert(
                who.key().into(),
                json!({
                    "per_second_each_round": r.iter().map(|x| round3(*x)).collect::<Vec<_>>(),
                    "per_second_median": Summary::of(&r).map(|s| round3(s.median)),
                }),
            );
        }
        rows.push(Value::Object(row));
    }
    json!({
        "command": "ctr run --rm --runtime RUNTIME IMAGE ID true, CONCURRENCY workers back to back",
        "by_concurrency": rows,
        "batches": batches.iter().map(|x| json!({
            "runtime": x.who.key(),
            "concurrency": x.concurrency,
            "runs": x.runs,
            "wall_s": round3(x.wall_s),
            "per_second": round3(x.per_second()),
            "loadavg_before": x.load_before,
            "loadavg_after": x.load_after,
        })).collect::<Vec<_>>(),
    })
}
