//! A syscall-heavy workload under each gVisor platform: inside one sandbox, busybox `sh`
//! creates a tree of 30 directories x 100 files in a tmpfs `/tmp` (open, write, close per file:
//! no fork), then `find` walks it 20 times (getdents64 and a stat per entry). Both steps are
//! timed inside by busybox `time -p` (10 ms resolution; the 20 walks put each well above it).
//! Every runtime gets the same tmpfs `/tmp` (ours through the policy's scratch mount, which
//! replaces the one given here), so the sentry's own memory backs the files under gVisor and no
//! gofer or overlay is involved: what differs is how each syscall reaches the sentry.
//!
//! Runtimes, interleaved with the order rotated each round: ours on the stack's platform
//! (systrap on the current runsc, ptrace on 20221219), ours with `[runsc] platform = "ptrace"`
//! (current stack only), the Go shim + runsc through `tests/baseline/runsc-baseline` on the same
//! platform as ours, the same with `--platform=ptrace` appended (current stack only; runsc's
//! last flag wins), and runc.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use gvisor_hardened_tests::run::RUNC_RUNTIME;
use gvisor_hardened_tests::{runsc_baseline_wrapper, unique_id, Run, Runtime};
use serde_json::{json, Value};

use crate::contenders::{Bench, BenchResult};
use crate::procfs::loadavg;
use crate::stats::{ratio, round3, Summary};

const DIRS: usize = 30;
const FILES_PER_DIR: usize = 100;
const WALKS: usize = 20;

/// The in-sandbox script: `create real S` and `find real S` lines.
fn script() -> String {
    format!(
        r#"set -e
t() {{ n=$1; shift; busybox time -p "$@" 2>/tmp/time >/dev/null || {{ cat /tmp/time; exit 1; }}; echo "$n $(grep '^real' /tmp/time)"; }}
t create sh -c 'd=0; while [ $d -lt {DIRS} ]; do mkdir -p /tmp/t/d$d; f=0; while [ $f -lt {FILES_PER_DIR} ]; do echo x > /tmp/t/d$d/f$f; f=$((f+1)); done; d=$((d+1)); done'
t find sh -c 'i=0; while [ $i -lt {WALKS} ]; do find /tmp/t >/dev/null; i=$((i+1)); done'
test "$(find /tmp/t -type f | wc -l)" -eq {files}
"#,
        files = DIRS * FILES_PER_DIR
    )
}

#[derive(Debug, Clone)]
pub struct Variant {
    pub key: &'static str,
    pub label: String,
    runtime: Runtime,
    flags: Vec<String>,
}

pub struct Syscalls {
    pub variants: Vec<Variant>,
    /// Per variant: (create seconds, find seconds per walk) per round.
    pub samples: Vec<Vec<(f64, f64)>>,
    pub failed: Vec<String>,
    pub load_before: [f64; 3],
    pub load_after: [f64; 3],
}

/// The stack's platform for ours and the baseline: what `runsc help platforms` lists first of
/// systrap and ptrace (the shim's choice under `platform = ""`).
fn stack_platform() -> &'static str {
    let listed = gvisor_hardened_tests::stack::bin("runsc")
        .ok()
        .and_then(|r| {
            std::process::Command::new(r)
                .args(["help", "platforms"])
                .output()
                .ok()
        })
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    if listed.lines().any(|l| l.trim() == "systrap") {
        "systrap"
    } else {
        "ptrace"
    }
}

fn variants(b: &Bench) -> BenchResult<Vec<Variant>> {
    let platform = stack_platform();
    let dir = b.c.dir().join("syscalls");
    fs::create_dir_all(&dir)?;
    let tmpfs = vec![
        "--mount".to_string(),
        "type=tmpfs,src=tmpfs,dst=/tmp,options=nosuid:nodev:mode=1777:size=1g".to_string(),
    ];
    let mut v = vec![Variant {
        key: "hardened",
        label: format!("gvisor-hardened (ours), {platform}"),
        runtime: Runtime::hardened_with_policy(&b.policy),
        flags: tmpfs.clone(),
    }];
    if platform == "systrap" {
        let policy = dir.join("ptrace-policy.toml");
        fs::write(
            &policy,
            format!(
                "# The default policy on ptrace; only the audit log moves.\n[audit]\npath = \"{}\"\n[runsc]\nplatform = \"ptrace\"\n",
                b.c.dir().join("audit.jsonl").display()
            ),
        )?;
        v.push(Variant {
            key: "hardened_ptrace",
            label: "gvisor-hardened (ours), ptrace".into(),
            runtime: Runtime::hardened_with_policy(&policy),
            flags: tmpfs.clone(),
        });
    }
    v.push(Variant {
        key: "go_shim_runsc",
        label: format!("Go shim + runsc, {platform}"),
        runtime: Runtime::Baseline,
        flags: tmpfs.clone(),
    });
    if platform == "systrap" {
        let wrapper = ptrace_wrapper(&dir)?;
        let mut flags = vec![
            "--runc-binary".to_string(),
            wrapper.display().to_string(),
            "--runc-root".to_string(),
            b.c.runtimes_dir()
                .join("runsc-baseline-ptrace")
                .display()
                .to_string(),
        ];
        flags.extend(tmpfs.clone());
        v.push(Variant {
            key: "go_shim_runsc_ptrace",
            label: "Go shim + runsc, ptrace".into(),
            runtime: Runtime::Named(RUNC_RUNTIME.to_string()),
            flags,
        });
    }
    v.push(Variant {
        key: "runc",
        label: "Go shim + runc".into(),
        runtime: Runtime::Runc,
        flags: tmpfs,
    });
    Ok(v)
}

/// The baseline wrapper with `--platform=ptrace` after its own flags (Go's flag package keeps
/// the last value).
fn ptrace_wrapper(dir: &Path) -> BenchResult<PathBuf> {
    let path = dir.join("runsc-baseline-ptrace");
    fs::write(
        &path,
        format!(
            "#!/bin/sh\nexec {} --platform=ptrace \"$@\"\n",
            runsc_baseline_wrapper().display()
        ),
    )?;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

fn parse(stdout: &str) -> Option<(f64, f64)> {
    let field = |name: &str| {
        stdout.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f.as_slice() {
                [n, "real", s] if *n == name => s.parse::<f64>().ok(),
                _ => None,
            }
        })
    };
    Some((field("create")?, field("find")? / WALKS as f64))
}

pub fn measure(b: &Bench, rounds: usize, warmup: usize) -> BenchResult<Syscalls> {
    let variants = variants(b)?;
    let script = script();
    let run_one = |v: &Variant| -> BenchResult<Result<(f64, f64), String>> {
        let id = unique_id("bsys");
        let run = Run::new(&b.image, &id)
            .runtime(v.runtime.clone())
            .flags(v.flags.iter().cloned())
            .sh(&script);
        let out = b.c.run_output(&run)?;
        Ok(match (out.success(), parse(&out.stdout)) {
            (true, Some(x)) => Ok(x),
            _ => Err(format!(
                "{}: exit {}: {} {}",
                v.label,
                out.code(),
                out.stdout.trim(),
                out.stderr.trim()
            )),
        })
    };
    for _ in 0..warmup {
        for v in &variants {
            run_one(v)?.map_err(|e| format!("warm-up: {e}"))?;
        }
    }
    let load_before = loadavg();
    let mut samples = vec![Vec::new(); variants.len()];
    let mut failed = Vec::new();
    let n = variants.len();
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            match run_one(&variants[i])? {
                Ok(x) => samples[i].push(x),
                Err(e) => failed.push(e),
            }
        }
        eprint!("\r  syscalls: round {}/{rounds}", round + 1);
    }
    eprintln!();
    Ok(Syscalls {
        variants,
        samples,
        failed,
        load_before,
        load_after: loadavg(),
    })
}

impl Syscalls {
    fn column(&self, i: usize, which: usize) -> Vec<f64> {
        self.samples[i]
            .iter()
            .map(|s| if which == 0 { s.0 } else { s.1 } * 1000.0)
            .collect()
    }

    fn runc(&self) -> Option<usize> {
        self.variants.iter().position(|v| v.key == "runc")
    }

    pub fn markdown(&self) -> String {
        let mut o = format!(
            "**Syscall-heavy workload**, inside one sandbox: create {DIRS} directories x {FILES_PER_DIR} files in a tmpfs `/tmp` (busybox `sh`, no fork), then `find` over them ({} entries), {WALKS} walks; busybox `time -p`, medians of the rounds, runtimes interleaved:\n\n\
             | runtime | rounds | create ms median (min-max) | one `find` walk ms median (min-max) | create vs runc | find vs runc |\n|---|---:|---:|---:|---:|---:|\n",
            DIRS * (FILES_PER_DIR + 1) + 1
        );
        let base = self.runc().map(|r| {
            (
                Summary::of(&self.column(r, 0)).map(|s| s.median),
                Summary::of(&self.column(r, 1)).map(|s| s.median),
            )
        });
        for (i, v) in self.variants.iter().enumerate() {
            let (Some(c), Some(f)) = (
                Summary::of(&self.column(i, 0)),
                Summary::of(&self.column(i, 1)),
            ) else {
                continue;
            };
            let vs = |x: f64, b: Option<f64>| {
                b.and_then(|b| ratio(x, b))
                    .map_or("-".into(), |r| format!("{r:.1}x"))
            };
            o.push_str(&format!(
                "| {} | {} | {:.0} ({:.0}-{:.0}) | {:.1} ({:.1}-{:.1}) | {} | {} |\n",
                v.label,
                c.n,
                c.median,
                c.min,
                c.max,
                f.median,
                f.min,
                f.max,
                vs(c.median, base.and_then(|b| b.0)),
                vs(f.median, base.and_then(|b| b.1)),
            ));
        }
        o.push_str(&format!(
            "\nLoad during: {:.2} {:.2} {:.2} -> {:.2} {:.2} {:.2}. Failed runs: {}.\n",
            self.load_before[0],
            self.load_before[1],
            self.load_before[2],
            self.load_after[0],
            self.load_after[1],
            self.load_after[2],
            if self.failed.is_empty() {
                "none".to_string()
            } else {
                self.failed.join("; ")
            }
        ));
        o
    }

    pub fn to_json(&self) -> Value {
        json!({
            "workload": format!("{DIRS} dirs x {FILES_PER_DIR} files created in a tmpfs /tmp, then {WALKS} find walks"),
            "load_before": self.load_before,
            "load_after": self.load_after,
            "failed": self.failed,
            "variants": self.variants.iter().enumerate().map(|(i, v)| json!({
                "key": v.key,
                "label": v.label,
                "create_ms": Summary::of(&self.column(i, 0)).map(|s| s.to_json()),
                "find_walk_ms": Summary::of(&self.column(i, 1)).map(|s| s.to_json()),
                "samples": self.samples[i].iter().map(|(c, f)| json!({
                    "create_s": round3(*c), "find_walk_s": round3(*f),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })
    }
}
