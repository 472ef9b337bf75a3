//! Compiles the sandbox probe (`probe/*.c`) and the pod pause process (`pause/pause.c`) into
//! static binaries in OUT_DIR, and the egress forwarder (`shim/forwarder`, Rust, std only).
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

    let forwarder = out_dir.join("gvisor-hardened-forwarder");
    build_forwarder(&out_dir, &forwarder);
    println!("cargo:rustc-env=GVH_FORWARDER_PATH={}", forwarder.display());

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

/// The forwarder runs inside busybox images without a libc, so it is linked statically
/// (glibc's static libc: it never resolves names). It is compiled with the `rustc` cargo gave
/// this script, two calls (library, binary), not with cargo: a nested cargo would wait on the
/// build lock the outer one holds. `hack/build-forwarder.sh` does the same for installs.
fn build_forwarder(out_dir: &std::path::Path, binary: &std::path::Path) {
    let src = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("../shim/forwarder/src");
    for f in ["lib.rs", "main.rs", "await_listener.rs"] {
        println!("cargo:rerun-if-changed={}", src.join(f).display());
    }
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let flags = [
        "--edition",
        "2021",
        "-C",
        "opt-level=3",
        "-C",
        "panic=abort",
        "-C",
        "strip=symbols",
        "-C",
        "target-feature=+crt-static",
        "-C",
        "codegen-units=1",
    ];
    let rlib = out_dir.join("libgvisor_hardened_forwarder.rlib");
    let steps: [Vec<std::ffi::OsString>; 2] = [
        [
            "--crate-type",
            "rlib",
            "--crate-name",
            "gvisor_hardened_forwarder",
            "-o",
        ]
        .iter()
        .map(Into::into)
        .chain([
            rlib.clone().into_os_string(),
            src.join("lib.rs").into_os_string(),
        ])
        .collect(),
        [
            "--crate-type",
            "bin",
            "--crate-name",
            "gvisor_hardened_forwarder_bin",
            "--extern",
        ]
        .iter()
        .map(Into::into)
        .chain([
            format!("gvisor_hardened_forwarder={}", rlib.display()).into(),
            "-o".into(),
            binary.as_os_str().to_owned(),
            src.join("main.rs").into_os_string(),
        ])
        .collect(),
    ];
    for args in steps {
        let output = Command::new(&rustc)
            .args(flags)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{rustc}` to build the forwarder: {e}"));
        if !output.status.success() {
            panic!(
                "building the forwarder failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
