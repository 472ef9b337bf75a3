//! How much a hostile writable volume delays a sandbox's exit event through the real shim,
//! under the default `[audit.artifacts]` bounds (issue 13's measurement):
//!
//! ```text
//! cargo run --release -p gvisor-hardened-tests --example artifact-exit-delay -- [FILES] [RUNS]
//! ```
//!
//! Two volumes, each bind-mounted writable at /data: an empty one, and a hostile one with
//! FILES (1,000,000) empty files in one directory, a chain of 300 nested directories (past the
//! walk's depth limit), a FIFO and a name that is not UTF-8. For each, RUNS (3) of `ctr run
//! --rm --mount ... IMAGE ID true`, interleaved, timed; from the audit log, the time from the
//! start record to the exit record (the workload itself takes milliseconds: the rest is the
//! exit path, whose walk is what differs between the volumes) and from the create record to
//! the start record (the start manifest). Needs root; nothing is asserted. Builds the
//! hostile tree in `$TMPDIR` and removes it at the end.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;
use serde_json::Value;

type R<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn hostile_tree(dir: &Path, files: usize) -> R<()> {
    let many = dir.join("many");
    std::fs::create_dir_all(&many)?;
    for i in 0..files {
        std::fs::File::create(many.join(format!("f{i:07}")))?;
    }
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

fn main() -> R<()> {
    let mut args = std::env::args().skip(1);
    let files: usize = args.next().map_or(Ok(1_000_000), |s| s.parse())?;
    let runs: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary()?))?;
    let image = TestImage::ensure()?;
    c.import(&image)?;
    let root = tempfile::Builder::new().prefix("gvh-hostile").tempdir()?;
    let (empty, hostile) = (root.path().join("empty"), root.path().join("hostile"));
    std::fs::create_dir(&empty)?;
    let built = Instant::now();
    hostile_tree(&hostile, files)?;
    eprintln!(
        "hostile tree: {files} empty files, 300 nested directories, a FIFO, a non-UTF-8 name; built in {:.1} s",
        secs(built.elapsed())
    );
    let policy = TestPolicy::builder(&c, "hostile")
        .extra(&format!(
            "[mounts]\nwritable_sources = [\"{}/**\"]\n",
            root.path().display()
        ))
        .write()?;
    let mut table: Vec<(&str, Vec<f64>, Vec<f64>, Vec<f64>)> = vec![
        ("empty", vec![], vec![], vec![]),
        ("hostile", vec![], vec![], vec![]),
    ];
    let mut last_exit: Option<Value> = None;
    for _ in 0..runs {
        for (i, vol) in [&empty, &hostile].into_iter().enumerate() {
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
            let row = &mut table[i];
            row.1.push(secs(wall));
            row.2.push(secs(
                record_time(&start).duration_since(record_time(&create))?,
            ));
            row.3.push(secs(
                record_time(&exit).duration_since(record_time(&start))?,
            ));
            if i == 1 {
                last_exit = Some(exit);
            }
        }
    }
    println!("| volume | runs | `ctr run --rm ... true` wall | create→start record | start→exit record |");
    println!("|---|---|---|---|---|");
    for (name, wall, start, exit) in &table {
        println!(
            "| {name} | {runs} | {:.2} s | {:.2} s | {:.2} s |",
            median(wall.clone()),
            median(start.clone()),
            median(exit.clone())
        );
    }
    println!(
        "\nmedians; the exit event is published right before the exit record is written, so the\n\
         start→exit difference between the volumes is the delay the walk adds to the exit event."
    );
    if let Some(exit) = last_exit {
        let a = &exit["artifacts"];
        println!(
            "\nlast hostile exit record: complete={} all_hashed={} diff exact={} added={} removed={}",
            a["complete"], a["all_hashed"], a["diff"]["exact"], a["diff"]["added"], a["diff"]["removed"]
        );
        if let Some(path) = a["manifest"]["path"].as_str() {
            let file: Value = serde_json::from_slice(&std::fs::read(path)?)?;
            let m = &file["manifest"];
            println!(
                "its exit manifest: stopped={} elapsed_ms={} entries={} skipped_dirs={} file size {} bytes",
                m["stopped"],
                m["elapsed_ms"],
                m["mounts"][0]["stats"]["entries"],
                m["mounts"][0]["stats"]["skipped_dirs"],
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
