//! Unique names for namespaces and container ids, so parallel tests (and other users of the
//! machine) never collide on the host-global paths: cgroups, shim sockets, runsc roots.

/// `n` random bytes from the kernel, as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    let mut filled = 0;
    while filled < n {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let rc = unsafe {
            libc::getrandom(
                buf[filled..].as_mut_ptr().cast(),
                n - filled,
                0, // blocking pool: always initialised this late in boot
            )
        };
        if rc < 0 {
            let err = std::io::Error::last_os_error();
            assert_eq!(
                err.kind(),
                std::io::ErrorKind::Interrupted,
                "getrandom: {err}"
            );
            continue;
        }
        filled += rc as usize;
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A container id unique on this machine: `<prefix>-<12 hex digits>`.
pub fn unique_id(prefix: &str) -> String {
    format!("{prefix}-{}", random_hex(6))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_keep_the_prefix_and_differ() {
        let a = unique_id("t");
        let b = unique_id("t");
        assert!(a.starts_with("t-") && a.len() == 14, "{a}");
        assert_ne!(a, b);
    }
}
