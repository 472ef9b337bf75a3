//! Fuzz target: the egress proxy's TLS ClientHello reader on arbitrary bytes.
//!
//! The bytes come from the sandbox: untrusted. The reader must never panic, and a verdict it
//! reaches must not change when more bytes follow (the proxy may have read past the hello).
#![no_main]

#[path = "../../shim/egress/src/sni.rs"]
mod sni;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match sni::parse(data) {
        Ok(Some(hello)) => {
            let mut longer = data.to_vec();
            longer.extend_from_slice(b"\x17\x03\x03\x00\x01x");
            assert_eq!(sni::parse(&longer), Ok(Some(hello.clone())));
            if let Some(name) = hello.sni {
                assert!(!name.is_empty() && name == name.to_ascii_lowercase());
            }
        }
        Ok(None) => assert!(data.len() < sni::MAX_HELLO_BYTES),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
});
