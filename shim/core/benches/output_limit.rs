//! The output interposer alone: 1 GiB through pipes, side by side.
//!
//! - `direct`: the writer (runsc's place) writes into a pipe the reader (the client's place)
//!   reads: what the shim does without a bound (the fifo goes to runsc, no copy).
//! - `interposed_unbounded`: writer -> pipe -> interposer (count + sha256) -> pipe -> reader:
//!   the cost of interposing for the idle detector alone.
//! - `interposed_within_bound`: the same with a bound above 1 GiB, so every byte is delivered.
//! - `interposed_past_bound`: a 1 MiB bound; the rest is read and discarded (the drain path).
//!
//! Writes are 64 KiB, as a process writing big blocks to stdout does. Throughput is in the
//! report (criterion `Throughput::Bytes`).

use std::fs::File;
use std::io::{Read, Write};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use gvisor_hardened_core::output_limit::{interpose, sandbox_pipe, OutputBudget, StreamPair};

const TOTAL: u64 = 1 << 30;
const WRITE: usize = 64 << 10;

fn writer(mut w: File) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let block = vec![b'x'; WRITE];
        for _ in 0..TOTAL / WRITE as u64 {
            w.write_all(&block).expect("write");
        }
    })
}

fn drain(mut r: File) -> u64 {
    let mut buf = vec![0u8; 128 << 10];
    let mut total = 0;
    loop {
        match r.read(&mut buf).expect("read") {
            0 => return total,
            n => total += n as u64,
        }
    }
}

fn direct() {
    let (r, w) = sandbox_pipe().unwrap();
    let wt = writer(w);
    assert_eq!(drain(r), TOTAL);
    wt.join().unwrap();
}

fn interposed(bound: Option<u64>) {
    let (from_sandbox, w) = sandbox_pipe().unwrap();
    let (client, to_client) = sandbox_pipe().unwrap();
    let budget = OutputBudget::new(bound);
    let ip = interpose(
        &budget,
        Some(StreamPair {
            from_sandbox,
            to_client,
        }),
        None,
    )
    .unwrap();
    let wt = writer(w);
    let got = drain(client);
    wt.join().unwrap();
    let report = ip.wait();
    assert_eq!(report.output_bytes + report.discarded_bytes, TOTAL);
    assert!(got >= report.output_bytes);
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("output_1GiB");
    g.throughput(Throughput::Bytes(TOTAL));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("direct", |b| b.iter(direct));
    g.bench_function("interposed_unbounded", |b| b.iter(|| interposed(None)));
    g.bench_function("interposed_within_bound", |b| {
        b.iter(|| interposed(Some(2 << 30)))
    });
    g.bench_function("interposed_past_bound", |b| {
        b.iter(|| interposed(Some(1 << 20)))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
