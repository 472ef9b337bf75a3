//! Builds the egress forwarder (`forwarder/`, Rust, std only) as a static binary in OUT_DIR,
//! which the runtime carries inside itself (`src/install.rs`) and writes out when a
//! sandbox with egress first needs it: installing the runtime's binaries is then enough for
//! egress, and the forwarder always matches the runtime that speaks to it.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let forwarder = out_dir.join("gvisor-hardened-forwarder");
    build_forwarder(&out_dir, &forwarder);
    println!(
        "cargo:rustc-env=GVH_EMBEDDED_FORWARDER={}",
        forwarder.display()
    );
}

/// The forwarder runs inside busybox images without a libc, so it is linked statically
/// (glibc's static libc: it never resolves names). It is compiled with the `rustc` cargo gave
/// this script, two calls (library, binary), not with cargo: a nested cargo would wait on the
/// build lock the outer one holds. `hack/build-forwarder.sh` does the same for the installer's image.
fn build_forwarder(out_dir: &std::path::Path, binary: &std::path::Path) {
    let src = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"))
        .join("../forwarder/src");
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
