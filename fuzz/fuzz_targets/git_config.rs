//! Fuzz target: the git config parser, `sanitize` and `carry` on arbitrary bytes.
//!
//! The shim parses configs a sandbox wrote (its private copy at exit, the config of a
//! repository it created), so every input must end in a result or an error, never a panic, and
//! what comes out must hold what the allowlists promise: a sanitized config parses again and
//! keeps only allowed entries (sanitizing it again changes nothing), and a carried config adds
//! to the host's nothing the carry allowlist refuses. The input is up to three configs
//! separated by NUL bytes (which no config git reads may contain): seed, sandbox, host.
#![no_main]

use libfuzzer_sys::fuzz_target;
use policy_injector::git_config::{self, KeyClass};

fn entries(bytes: &[u8]) -> Vec<(git_config::KeyRef, Option<Vec<u8>>)> {
    git_config::parse(bytes)
        .expect("parsed before")
        .entries
        .into_iter()
        .map(|e| (e.key, e.value))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(3, |b| *b == 0);
    let seed = parts.next().unwrap_or_default();
    let sandbox = parts.next().unwrap_or_default();
    let host = parts.next().unwrap_or_default();
    for input in [seed, sandbox, host] {
        let Ok(_) = git_config::parse(input) else {
            continue;
        };
        for class in [KeyClass::Carry, KeyClass::NewRepo] {
            let clean = git_config::sanitize(input, class).expect("a parsed config sanitizes");
            let parsed = git_config::parse(&clean.bytes).expect("sanitized output parses");
            for e in &parsed.entries {
                assert!(git_config::allowed(class, e).is_ok(), "kept {} under {class}", e.key);
            }
            let again = git_config::sanitize(&clean.bytes, class).expect("sanitizes again");
            assert!(again.removed.is_empty(), "sanitize is not idempotent");
            assert_eq!(again.bytes, clean.bytes, "sanitize is not a fixed point");
        }
    }
    if let Ok(carried) = git_config::carry(seed, sandbox, host) {
        let before = entries(host);
        for (key, value) in entries(&carried.bytes) {
            if before.iter().any(|(k, v)| *k == key && *v == value) {
                continue;
            }
            assert!(
                git_config::allowed_value(KeyClass::Carry, &key, value.as_deref()).is_ok(),
                "carry added {key}, which the carry allowlist refuses"
            );
        }
    }
});
