//! Compiles the sandbox probe (`probe/*.c`) and the pod pause process (`pause/pause.c`) into
//! static binaries in OUT_DIR. (The egress forwarder is built by the shim's
//! build script, which embeds it; the tests use that build.)
//!
//! The probe runs inside busybox images without a libc, so it must be fully static. Rust's glibc
//! `crt-static` is fragile and no musl target is installed, so the probe is C built with
//! `gcc -static`. A missing compiler or static libc fails the build: the tests depend on it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let probe_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("probe");
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&probe_dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", probe_dir.display()))
        .map(|e| e.expect("readable probe dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    let binary = out_dir.join("sandbox-probe");
    let cc = env::var("GVH_PROBE_CC").unwrap_or_else(|_| "gcc".to_string());

    // The directory: a new or removed file changes its mtime; each file for edits.
    println!("cargo:rerun-if-changed={}", probe_dir.display());
    for path in std::fs::read_dir(&probe_dir)
        .into_iter()
        .flatten()
        .flatten()
    {
        println!("cargo:rerun-if-changed={}", path.path().display());
    }
    println!("cargo:rerun-if-env-changed=GVH_PROBE_CC");

    compile(&cc, &sources, &binary, "the sandbox probe");

    let pause_source = probe_dir
        .parent()
        .expect("probe/ has a parent")
        .join("pause/pause.c");
    println!("cargo:rerun-if-changed={}", pause_source.display());
    let pause = out_dir.join("pause");
    compile(&cc, &[pause_source], &pause, "the pod pause process");
    println!("cargo:rustc-env=GVH_PAUSE_PATH={}", pause.display());

    println!("cargo:rustc-env=GVH_PROBE_PATH={}", binary.display());
    println!("cargo:rustc-env=GVH_OUT_DIR={}", out_dir.display());
}

fn compile(cc: &str, sources: &[PathBuf], binary: &std::path::Path, what: &str) {
    let output = Command::new(cc)
        .args(["-static", "-O2", "-s", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(binary)
        .args(sources)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{cc}` to build {what}: {e}"));
    if !output.status.success() {
        panic!(
            "building {what} with `{cc} -static` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
}
