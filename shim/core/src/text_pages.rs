//! Unmapping the shim's own machine code once a sandbox is running.
//!
//! A shim serves its pod for the pod's whole life but runs almost none of its code while the
//! pod runs: Create and Start execute most of the binary (policy, spec rewrite, runsc
//! client, audit, egress set-up), then the server waits. Every page of code executed once
//! stays mapped, and the kernel maps the cached pages around each fault as well (fault-around,
//! 64 KiB), so a shim serving one `sleep` kept nearly all of its 3 MB text resident
//! (`hack/bench/README.md`, "Where the shim's memory goes"). Those pages are the executable
//! file's page cache: dropping this process's mappings of them loses nothing, the next call
//! that needs code faults it back in from the cache (minor faults, microseconds), and an
//! idle shim's resident set is then what it actually runs while idle.
//!
//! This adds no new way to fail: the kernel already drops mapped code pages of its own accord
//! under memory pressure and faults them back from the file, which is why a running binary
//! is replaced by a rename (a new file) and never rewritten in place.
//!
//! Only the executable's `r-xp` mapping is dropped. Machine code is never written (a PIE has
//! no text relocations), so its pages are exactly the file's. The read-only data after it is
//! not touched: part of it (RELRO) was written by the loader before it was made read-only, and
//! dropping those private copies would bring back the file's unrelocated bytes.

/// Drops this process's mappings of its executable's code (see the module comment). Best
/// effort: a failure leaves the pages mapped, which costs memory, never correctness.
pub fn drop_mapped_code() {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return;
    };
    let exe = exe.to_string_lossy();
    for (start, end) in code_ranges(&maps, &exe) {
        // SAFETY: [start, end) is a private, read-only, executable mapping of our own binary
        // (the kernel's list of this process's mappings says so). Its pages are never written,
        // so MADV_DONTNEED only unmaps them; any later access faults the same bytes back in
        // from the file, including the code running this call.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
}

/// The `r-xp` ranges of `exe` in a `/proc/<pid>/maps` text.
fn code_ranges(maps: &str, exe: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            // start-end perms offset dev inode path
            let mut fields = line.splitn(6, ' ');
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?.trim_start();
            if perms != "r-xp" || path != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0b00000 r--p 00000000 fd:01 1234 /usr/local/bin/containerd-shim-gvisor-hardened-v1
55d0c0b00000-55d0c0e00000 r-xp 00100000 fd:01 1234 /usr/local/bin/containerd-shim-gvisor-hardened-v1
55d0c0e00000-55d0c0f00000 r--p 00400000 fd:01 1234 /usr/local/bin/containerd-shim-gvisor-hardened-v1
55d0c0f00000-55d0c0f01000 rw-p 00500000 fd:01 1234 /usr/local/bin/containerd-shim-gvisor-hardened-v1
7f1e2a000000-7f1e2a100000 r-xp 00028000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffc1b000000-7ffc1b021000 rw-p 00000000 00:00 0                          [stack]
";

    #[test]
    fn only_the_executables_code_mapping_is_chosen() {
        assert_eq!(
            code_ranges(MAPS, "/usr/local/bin/containerd-shim-gvisor-hardened-v1"),
            [(0x55d0c0b00000, 0x55d0c0e00000)]
        );
        // A path that merely starts the same, or none at all, is never taken.
        assert!(code_ranges(MAPS, "/usr/local/bin/containerd-shim").is_empty());
        assert!(code_ranges("55d0c0b00000-55d0c0e00000 r-xp 0 fd:01 1\n", "").is_empty());
    }

    #[test]
    fn code_runs_on_after_its_pages_are_dropped() {
        // In the test binary itself: all of its code made resident first (read as data, a
        // page at a time), then dropped; what comes back is only what runs from here on.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut size_kib = 0;
        for (start, end) in code_ranges(&maps, &exe.to_string_lossy()) {
            size_kib += (end - start) as u64 / 1024;
            for page in (start..end).step_by(4096) {
                // SAFETY: a readable mapping of this process (its code), read one byte a page.
                unsafe { std::ptr::read_volatile(page as *const u8) };
            }
        }
        let before = resident_code_kib();
        drop_mapped_code();
        let after = resident_code_kib();
        assert!(
            before * 10 >= size_kib * 9,
            "{before} of {size_kib} KiB resident"
        );
        assert!(after * 4 < before, "{before} -> {after} KiB");
        assert_eq!(format!("{:?}", (1..4).collect::<Vec<_>>()), "[1, 2, 3]");
    }

    /// The resident KiB of this process's code mappings, from `/proc/self/smaps`.
    fn resident_code_kib() -> u64 {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_string_lossy();
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_code = false;
        let mut total = 0;
        for line in smaps.lines() {
            if let Some(rss) = line.strip_prefix("Rss:") {
                if in_code {
                    total += rss.trim().trim_end_matches(" kB").parse::<u64>().unwrap();
                }
            } else if line.split(' ').next().is_some_and(|r| {
                r.contains('-') && r.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
            }) {
                // A mapping's header line: is it the code?
                in_code = !code_ranges(line, &exe).is_empty();
            }
        }
        total
    }
}
