//! The current runsc's platform, directfs and rootfs overlay under the hardened policy, side by
//! side: what the policy README's `[runsc]` defaults rest on. A measurement, not a test: nothing
//! here asserts a time.
//!
//! ```text
//! cargo build -p containerd-shim-gvisor-hardened -p runsc-hardened
//! [GVH_VARIANTS='NAME;NAME'] cargo run -p gvisor-hardened-tests --example runsc-modes -- [ROUNDS=7]
//! ```
//!
//! One private containerd with the hardened shim; every variant is a policy file that differs
//! from the default policy only in `[runsc]` (the current runsc from `hack/deps.sh --print`,
//! its platform, `directfs`, `overlay`) and in a writable workspace source. Each round runs every
//! variant once, in an order rotated per round (interleaved, so load drifts hit all variants
//! alike), and for each:
//! - start-to-exit: `ctr run --rm IMAGE ID /bin/true`, timed around `ctr`;
//! - in one sandbox, each step timed inside by busybox `time -p` (10 ms resolution):
//!   writing 1000 small files into a bind-mounted writable workspace, `ls -la` of it, reading
//!   them back, `cp -r` of them within the workspace, writing 1000 files into the `/tmp` scratch
//!   tmpfs, removing the workspace files.
//!
//! Prints the medians (and min/max) per variant and step, and the host owner of a file each
//! variant created in the workspace. Needs root.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use gvisor_hardened_tests::stack::Stack;
use gvisor_hardened_tests::*;

struct Variant {
    name: &'static str,
    platform: &'static str,
    /// `None`: runsc's own default (on for current releases; 20221219 has no directfs).
    directfs: Option<bool>,
    overlay: &'static str,
    /// Debian's runsc 20221219 instead of the current one.
    old_runsc: bool,
    /// Plain runc through containerd's runc shim (no policy, no gVisor): the floor.
    runc: bool,
    /// `[root] readonly = false`: the root filesystem takes writes (into the overlay).
    writable_root: bool,
    /// `file-access-mounts = "exclusive"`: the sentry caches what it learnt of bind mounts
    /// instead of revalidating every lookup with the host (runsc's default is `shared`).
    mounts_exclusive: bool,
}

const fn hardened(
    name: &'static str,
    platform: &'static str,
    directfs: Option<bool>,
    overlay: &'static str,
) -> Variant {
    Variant {
        name,
        platform,
        directfs,
        overlay,
        old_runsc: false,
        runc: false,
        writable_root: false,
        mounts_exclusive: false,
    }
}

const fn mounts_exclusive(name: &'static str, directfs: bool) -> Variant {
    Variant {
        mounts_exclusive: true,
        ..hardened(name, "systrap", Some(directfs), "auto")
    }
}

const fn writable_root(name: &'static str, overlay: &'static str) -> Variant {
    Variant {
        writable_root: true,
        ..hardened(name, "systrap", Some(true), overlay)
    }
}

const VARIANTS: &[Variant] = &[
    hardened(
        "systrap, directfs on, overlay auto",
        "systrap",
        Some(true),
        "auto",
    ),
    hardened(
        "systrap, directfs off, overlay auto",
        "systrap",
        Some(false),
        "auto",
    ),
    hardened(
        "systrap, directfs on, overlay none",
        "systrap",
        Some(true),
        "none",
    ),
    hardened(
        "systrap, directfs on, overlay root:self",
        "systrap",
        Some(true),
        "root:self",
    ),
    hardened(
        "ptrace, directfs on, overlay auto",
        "ptrace",
        Some(true),
        "auto",
    ),
    hardened(
        "ptrace, directfs off, overlay auto",
        "ptrace",
        Some(false),
        "auto",
    ),
    Variant {
        name: "runsc 20221219 (ptrace, gofer)",
        platform: "ptrace",
        directfs: None,
        overlay: "auto",
        old_runsc: true,
        runc: false,
        writable_root: false,
        mounts_exclusive: false,
    },
    Variant {
        name: "runc (no sandbox)",
        platform: "",
        directfs: None,
        overlay: "auto",
        old_runsc: false,
        runc: true,
        writable_root: false,
        mounts_exclusive: false,
    },
    writable_root("systrap, directfs on, writable root, overlay auto", "auto"),
    writable_root(
        "systrap, directfs on, writable root, overlay root:self",
        "root:self",
    ),
    mounts_exclusive("systrap, directfs off, file-access-mounts exclusive", false),
    mounts_exclusive("systrap, directfs on, file-access-mounts exclusive", true),
];

const STEPS: &[&str] = &[
    "start-to-exit (true)",
    "write 1000 files (workspace bind)",
    "ls -la (1000 entries, workspace bind)",
    "read 1000 files (workspace bind)",
    "cp -r 1000 files (workspace bind)",
    "write 1000 files (/tmp tmpfs)",
    "rm -r 2000 files (workspace bind)",
    "write 1000 files (root filesystem; writable-root variants)",
];

/// The in-sandbox script: one `step N real SECONDS` line per timed step.
const SCRIPT: &str = r#"set -e
t() { n=$1; shift; busybox time -p "$@" 2>/tmp/t >/dev/null || { cat /tmp/t; exit 1; }; echo "step $n $(grep '^real' /tmp/t)"; }
W='i=0; while [ $i -lt 1000 ]; do echo x > "$0/f$i"; i=$((i+1)); done'
mkdir /work/a /tmp/s
t 1 sh -c "$W" /work/a
t 2 ls -la /work/a
t 3 sh -c 'cat /work/a/* >/dev/null'
t 4 cp -r /work/a /work/b
t 5 sh -c "$W" /tmp/s
cp /work/a/f0 /work/owner-probe
t 6 rm -r /work/a /work/b
if mkdir /srv/w 2>/dev/null; then t 7 sh -c "$W" /srv/w; fi
"#;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn write_policy(dir: &Path, i: usize, v: &Variant, runsc: &Path, ws: &Path) -> Result<PathBuf> {
    let mut flags = String::new();
    if let Some(on) = v.directfs {
        flags += &format!("directfs = \"{on}\"\n");
    }
    if v.mounts_exclusive {
        flags += "file-access-mounts = \"exclusive\"\n";
    }
    let directfs = if flags.is_empty() {
        flags
    } else {
        format!("[runsc.extra_flags]\n{flags}")
    };
    let root = if v.writable_root {
        "[root]\nreadonly = false\n\n"
    } else {
        ""
    };
    let text = format!(
        "version = 1\n\n{root}[audit]\npath = \"{audit}\"\n\n[mounts]\nwritable_sources = [\"{ws}/**\"]\n\n\
         [runsc]\npath = \"{runsc}\"\nplatform = \"{platform}\"\noverlay = \"{overlay}\"\n{directfs}",
        audit = dir.join("audit.jsonl").display(),
        ws = ws.display(),
        runsc = runsc.display(),
        platform = v.platform,
        overlay = v.overlay,
    );
    let path = dir.join(format!("variant-{i}.toml"));
    fs::write(&path, text)?;
    Ok(path)
}

fn main() -> Result<()> {
    let rounds: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()
        .context("ROUNDS must be a number")?
        .unwrap_or(7);
    // GVH_VARIANTS='a;b': only the variants whose names contain one of these (runc always;
    // names have commas).
    let wanted = std::env::var("GVH_VARIANTS").unwrap_or_default();
    let variants: Vec<&Variant> = VARIANTS
        .iter()
        .filter(|v| {
            wanted.is_empty() || v.runc || wanted.split(';').any(|w| v.name.contains(w.trim()))
        })
        .collect();
    let runsc = Stack::Current.binary("runsc")?;
    let old_runsc = Stack::Compat.binary("runsc")?;
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary()?))?;
    let image = TestImage::ensure()?;
    c.import(&image)?;
    let dir = c.dir().join("runsc-modes");
    let ws_root = dir.join("ws");
    fs::create_dir_all(&ws_root)?;
    let mut policies = Vec::new();
    for (i, v) in variants.iter().enumerate() {
        let binary = if v.old_runsc { &old_runsc } else { &runsc };
        policies.push(write_policy(&dir, i, v, binary, &ws_root)?);
    }
    println!("runsc: {} and {}", runsc.display(), old_runsc.display());
    println!(
        "load before: {}",
        fs::read_to_string("/proc/loadavg")?.trim()
    );

    // samples[variant][step]
    let mut samples: Vec<BTreeMap<usize, Vec<f64>>> = vec![BTreeMap::new(); variants.len()];
    let mut owners: BTreeMap<usize, String> = BTreeMap::new();
    let mut failures = Vec::new();
    for round in 0..rounds {
        for k in 0..variants.len() {
            let i = (k + round) % variants.len();
            let runtime = if variants[i].runc {
                Runtime::Runc
            } else {
                Runtime::hardened_with_policy(&policies[i])
            };
            // Start to exit.
            let id = unique_id("modes-true");
            let run = Run::new(image.reference(), &id)
                .runtime(runtime.clone())
                .cmd(["/bin/true"]);
            let t0 = Instant::now();
            let out = c.run_output(&run)?;
            let secs = t0.elapsed().as_secs_f64();
            if out.success() {
                samples[i].entry(0).or_default().push(secs);
            } else {
                failures.push(format!("{}: true: {}", variants[i].name, out.stderr.trim()));
            }
            // The file steps, in a fresh workspace directory.
            let ws = ws_root.join(format!("r{round}-v{i}"));
            fs::create_dir_all(&ws)?;
            fs::set_permissions(&ws, fs::Permissions::from_mode(0o777))?;
            let id = unique_id("modes-fs");
            let mount = format!("type=bind,src={},dst=/work,options=rbind:rw", ws.display());
            let run = Run::new(image.reference(), &id)
                .runtime(runtime)
                .flags(["--mount", &mount])
                .sh(SCRIPT);
            let out = c.run_output(&run)?;
            let mut seen = 0;
            for line in out.stdout.lines() {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let ["step", n, "real", s] = f.as_slice() {
                    samples[i].entry(n.parse()?).or_default().push(s.parse()?);
                    seen += 1;
                }
            }
            let writes_root = variants[i].writable_root || variants[i].runc;
            let expected = STEPS.len() - if writes_root { 1 } else { 2 };
            if !out.success() || seen != expected {
                failures.push(format!(
                    "{}: fs steps: exit {}, stdout {:?}, stderr {:?}",
                    variants[i].name,
                    out.code(),
                    out.stdout.trim(),
                    out.stderr.trim()
                ));
            }
            if let Ok(m) = fs::metadata(ws.join("owner-probe")) {
                owners
                    .entry(i)
                    .or_insert_with(|| format!("{}:{}", m.uid(), m.gid()));
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    println!(
        "load after: {}",
        fs::read_to_string("/proc/loadavg")?.trim()
    );
    println!();
    print!("| step |");
    for v in &variants {
        print!(" {} |", v.name);
    }
    println!();
    println!("|---|{}", "---|".repeat(variants.len()));
    for (s, step) in STEPS.iter().enumerate() {
        print!("| {step} |");
        for per in samples.iter_mut() {
            match per.get_mut(&s) {
                Some(v) if !v.is_empty() => {
                    let (lo, hi) = (
                        v.iter().cloned().fold(f64::MAX, f64::min),
                        v.iter().cloned().fold(f64::MIN, f64::max),
                    );
                    let n = v.len();
                    print!(" {:.2} s ({lo:.2}-{hi:.2}, n={n}) |", median(v));
                }
                _ => print!(" - |"),
            }
        }
        println!();
    }
    println!();
    for (i, owner) in &owners {
        println!(
            "host owner of a workspace file, {}: {owner}",
            variants[*i].name
        );
    }
    let report = c.shutdown();
    if !failures.is_empty() {
        bail!("{} runs failed:\n{}", failures.len(), failures.join("\n"));
    }
    if !report.is_clean() {
        bail!("unclean shutdown: {report}");
    }
    Ok(())
}
