//! Measures what the harness costs per test: starting a private containerd, importing the
//! test image, one container run per runtime, and the shutdown.
//!
//! `cargo run -p gvisor-hardened-tests --example harness-cost -- [ITERATIONS=10]`

use std::time::{Duration, Instant};

use gvisor_hardened_tests::*;

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

fn summary(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{name:<28} median {:>7.1} ms   min {:>7.1} ms   max {:>7.1} ms   (n={})",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(10);
    let (image, build) = timed(TestImage::ensure);
    let image = image?;
    println!(
        "image {} ({}), first ensure() {:?}",
        image.reference(),
        image.manifest_digest(),
        build
    );

    let mut start = Vec::new();
    let mut import = Vec::new();
    let mut baseline = Vec::new();
    let mut runc = Vec::new();
    let mut shutdown = Vec::new();
    let mut total = Vec::new();
    for _ in 0..n {
        let t0 = Instant::now();
        let (c, d) = timed(|| Containerd::start(ContainerdOptions::default()));
        let c = c?;
        start.push(d);
        let (r, d) = timed(|| c.import(&image));
        r?;
        import.push(d);
        let fixed = t0.elapsed();
        for (runtime, samples) in [
            (Runtime::Baseline, &mut baseline),
            (Runtime::Runc, &mut runc),
        ] {
            let id = unique_id("cost");
            let (out, d) = timed(|| {
                c.run_output(
                    &Run::new(image.reference(), &id)
                        .runtime(runtime)
                        .cmd(["true"]),
                )
            });
            out?.checked()?;
            samples.push(d);
        }
        let (report, d) = timed(|| c.shutdown());
        if !report.is_clean() {
            return Err(format!("{report}").into());
        }
        shutdown.push(d);
        total.push(fixed + d);
    }
    summary("Containerd::start", start);
    summary("import", import);
    summary("shutdown", shutdown);
    summary("start + import + shutdown", total);
    summary("ctr run --rm baseline true", baseline);
    summary("ctr run --rm runc true", runc);
    Ok(())
}
