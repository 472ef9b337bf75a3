//! The container stack's binaries, found the way every test of the project finds them: the file
//! `GVH_DEPS` names, which holds `hack/deps.sh --print`'s `name=/path` lines (`hack/test.sh`
//! writes it once per run), or else `hack/deps.sh --print --only NAME`, which builds just that
//! binary if it is missing (deps.sh also builds a Kubernetes release these tests never need).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The path `hack/deps.sh --print` gives for `name` (`containerd`, `containerd-1.6`, ...).
pub fn binary(name: &str) -> PathBuf {
    static CACHE: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    // Held while deps.sh runs: two tests needing the same missing binary build it once.
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = cache.get(name) {
        return p.clone();
    }
    let printed = parse(&print(name));
    match printed.get(name) {
        Some(p) => {
            cache.insert(name.to_string(), p.clone());
            p.clone()
        }
        None => panic!(
            "hack/deps.sh --print names no `{name}`: {:?}",
            printed.keys()
        ),
    }
}

fn print(name: &str) -> String {
    if let Some(file) = std::env::var_os("GVH_DEPS") {
        return std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading GVH_DEPS={}: {e}", Path::new(&file).display()));
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../hack/deps.sh");
    let out = Command::new(&script)
        .args(["--print", "--only", name])
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} --print failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn parse(text: &str) -> BTreeMap<String, PathBuf> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), PathBuf::from(v.trim())))
        .collect()
}
