//! How much a hostile writable volume delays a sandbox's exit event through the real shim,
//! under the default `[audit.artifacts]` bounds (issue 13's measurement):
//!
//! ```text
//! GVH_SHIM_BINARY=target/release/containerd-shim-gvisor-hardened-v1 \
//!   cargo run -p gvisor-hardened-tests --example artifact-exit-delay -- [FILES] [RUNS]
//! ```
//!
//! Three volumes, each bind-mounted writable at /data: an empty one; `many`, FILES (1,000,000)
//! empty files in one directory; `deep`, a chain of 300 nested directories (past the walk's
//! depth limit of 128), a FIFO and names that are not UTF-8. For each, RUNS (3) of `ctr run
//! --rm --mount ... IMAGE ID true`, interleaved, timed; from the audit log, the time from the
//! start record to the exit record (the workload itself takes milliseconds: the rest is the
//! exit path, whose walk is what differs between the volumes) and from the create record to
//! the start record (the start manifest). Needs root; nothing is asserted. Builds the trees in
//! `$TMPDIR` and removes them at the end.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;
use serde_json::Value;

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const VOLUMES: [&str; 3] = ["empty", "many", "deep"];

fn many_files(dir: &Path, files: usize) -> R<()> {
    std::fs::create_dir_all(dir)?;
    for i in 0..files {
        std::fs::File::create(dir.join(format!("f{i:07}")))?;
    }
    Ok(())
}

fn deep_and_odd(dir: &Path) -> R<()> {
    let mut deep = dir.join("deep");
    for _ in 0..300 {
        deep.push("d");
    }
    std::fs::create_dir_all(&deep)?;
    let fifo = std::ffi::CString::new(dir.join("fifo").as_os_str().as_bytes())?;
    // SAFETY: mkfifo with a NUL-terminated path.
    if unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    std::fs::write(dir.join(OsStr::from_bytes(b"not-utf8-\xff\xfe")), b"x")?;
    std::fs::create_dir(dir.join(OsStr::from_bytes(b"dir-\xc3")))?;
    Ok(())
}

fn record_time(r: &Value) -> SystemTime {
    humantime::parse_rfc3339(r["time"].as_str().unwrap()).unwrap()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    (v[(v.len() - 1) / 2] + v[v.len() / 2]) / 2.0
}

/// Times per volume: `ctr run` wall, create→start record, start→exit record.
#[derive(Default)]
struct Times {
    wall: Vec<f64>,
    start: Vec<f64>,
    exit: Vec<f64>,
    last_exit: Option<Value>,
}

fn main() -> R<()> {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    let runs: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary()?))?;
    let image = TestImage::ensure()?;
    c.import(&image)?;
    let root = tempfile::Builder::new().prefix("gvh-hostile").tempdir()?;
    let vols = VOLUMES.map(|n| root.path().join(n));
    std::fs::create_dir(&vols[0])?;
    let built = Instant::now();
    many_files(&vols[1], files)?;
    deep_and_odd(&vols[2])?;
    eprintln!(
        "trees: {files} empty files; 300 nested directories, a FIFO, non-UTF-8 names; built in {:.1} s",
        secs(built.elapsed())
    );
    let policy = TestPolicy::builder(&c, "hostile")
        .extra(&format!(
            "[mounts]\nwritable_sources = [\"{}/**\"]\n",
            root.path().display()
        ))
        .write()?;
    let mut times: Vec<Times> = VOLUMES.iter().map(|_| Times::default()).collect();
    for _ in 0..runs {
        for (vol, t) in vols.iter().zip(times.iter_mut()) {
            let id = unique_id("walk");
            let started = Instant::now();
            let out = c.run_output(
                &Run::new(image.reference(), &id)
                    .runtime(policy.runtime())
                    .flags([
                        "--mount".to_string(),
                        format!("type=bind,src={},dst=/data,options=rbind:rw", vol.display()),
                    ])
                    .cmd(["true"]),
            )?;
            let wall = started.elapsed();
            if !out.success() {
                return Err(format!("{id}: {out}").into());
            }
            let lines = policy.audit_lines();
            let rec = |event: &str| {
                lines
                    .iter()
                    .find(|r| r["container_id"] == id.as_str() && r["event"] == event)
                    .cloned()
                    .ok_or_else(|| format!("{id}: no {event} record"))
            };
            let (create, start, exit) = (rec("create")?, rec("start")?, rec("exit")?);
            t.wall.push(secs(wall));
            t.start.push(secs(
                record_time(&start).duration_since(record_time(&create))?,
            ));
            t.exit.push(secs(
                record_time(&exit).duration_since(record_time(&start))?,
            ));
            t.last_exit = Some(exit);
        }
    }
    println!(
        "| volume | runs | `ctr run --rm ... true` wall | create→start record | start→exit record |"
    );
    println!("|---|---|---|---|---|");
    for (name, t) in VOLUMES.iter().zip(&times) {
        println!(
            "| {name} | {runs} | {:.2} s | {:.2} s | {:.2} s |",
            median(t.wall.clone()),
            median(t.start.clone()),
            median(t.exit.clone())
        );
    }
    println!(
        "\nmedians; the exit event is published right before the exit record is written, so the\n\
         start→exit difference to the empty volume is the delay the walk adds to the exit event."
    );
    for (name, t) in VOLUMES.iter().zip(&times) {
        let Some(exit) = &t.last_exit else { continue };
        let a = &exit["artifacts"];
        println!(
            "\n{name}: last exit record: complete={} all_hashed={} diff exact={} added={} removed={}",
            a["complete"], a["all_hashed"], a["diff"]["exact"], a["diff"]["added"], a["diff"]["removed"]
        );
        if let Some(path) = a["manifest"]["path"].as_str() {
            let file: Value = serde_json::from_slice(&std::fs::read(path)?)?;
            let m = &file["manifest"];
            let stats = &m["mounts"][0]["stats"];
            println!(
                "  exit manifest: stopped={} walk {} ms, entries={} dirs={} special={} skipped_dirs={}, file {} bytes",
                m["stopped"],
                m["elapsed_ms"],
                stats["entries"],
                stats["dirs"],
                stats["special"],
                stats["skipped_dirs"],
                std::fs::metadata(path)?.len()
            );
        }
    }
    let removing = Instant::now();
    drop(root);
    eprintln!("removed the trees in {:.1} s", secs(removing.elapsed()));
    c.shutdown();
    Ok(())
}
