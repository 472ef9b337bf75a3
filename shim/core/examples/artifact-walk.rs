//! Measures one artifact walk: `artifact-walk DIR [MAX_FILES] [MAX_HASHED_BYTES] [MAX_MS]`
//! (defaults: the default policy's bounds). Prints the manifest's counts, whether it stopped and
//! why, the wall time and the size of its JSON.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use gvisor_hardened_core::artifacts::{build_manifest, Bounds, WritableMount};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(
        args.next()
            .expect("usage: artifact-walk DIR [MAX_FILES] [MAX_HASHED_BYTES] [MAX_MS]"),
    );
    let defaults = policy_injector::Policy::default().audit.artifacts;
    let num = |a: Option<String>, d: u64| a.map_or(d, |s| s.parse().expect("a number"));
    let max_files = num(args.next(), defaults.max_files);
    let max_hashed = num(args.next(), defaults.max_hashed_bytes.0);
    let max_ms = num(args.next(), defaults.max_walk_time.0.as_millis() as u64);
    let mount = WritableMount {
        source: dir,
        destination: "/data".into(),
    };
    let started = Instant::now();
    let m = build_manifest(
        &[mount],
        &Bounds::new(max_files, max_hashed, Duration::from_millis(max_ms)),
    );
    let walked = started.elapsed();
    let json = serde_json::to_vec(&m).expect("serialises");
    let r = &m.mounts[0];
    println!(
        "bounds: max_files={max_files} max_hashed_bytes={max_hashed} max_walk_time={max_ms}ms\n\
         walk: {:.3}s, stopped={:?}, complete={}, all_hashed={}\n\
         entries={} files={} dirs={} bytes={} hashed_bytes={} not_hashed={} skipped_dirs={}\n\
         manifest JSON: {} bytes (serialised in {:.3}s)",
        walked.as_secs_f64(),
        m.stopped,
        m.complete,
        m.all_hashed,
        r.stats.entries,
        r.stats.files,
        r.stats.dirs,
        r.stats.bytes,
        r.stats.hashed_bytes,
        r.stats.not_hashed,
        r.stats.skipped_dirs,
        json.len(),
        (started.elapsed() - walked).as_secs_f64(),
    );
}
