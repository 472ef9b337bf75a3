//! Fuzz target: `Policy::from_toml_str` on arbitrary text.
//!
//! A policy file is operator input read by the shim on every Create, so the parser must
//! answer every input with a policy or an error, never a panic. What it accepts must survive
//! the documented round trip: `to_toml_string` loads back to an equal policy (the operator CLI
//! rewrites policies through it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use policy_injector::Policy;

fuzz_target!(|data: &[u8]| {
    // The shim refuses non-UTF-8 policy files before parsing; the parser only ever sees text.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Policy::from_toml_str(text) {
        Ok(policy) => {
            let again = policy.to_toml_string();
            match Policy::from_toml_str(&again) {
                Ok(reloaded) => assert_eq!(
                    reloaded, policy,
                    "policy changed across to_toml_string:\n{again}"
                ),
                Err(e) => panic!("to_toml_string output does not load back: {e}\n{again}"),
            }
        }
        Err(e) => {
            // The error is shown to operators: formatting it must not panic and must say something.
            assert!(!e.to_string().is_empty());
        }
    }
});
