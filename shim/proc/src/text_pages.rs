//! Unmapping the binary's own machine code and constants once a sandbox is running.
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
//! Every segment the loader mapped without write permission is dropped: the code (`r-xp`)
//! and the read-only data before it (`r--p`: string constants, unwind tables, and the
//! dynamic relocations the loader read once at start-up). A segment without `PF_W` is never
//! written (a PIE has no text relocations), so its pages are exactly the file's. The writable
//! segment is never touched, including the part of it the loader made read-only after
//! relocating it (RELRO, also `r--p` in the maps): its pages are private copies, and dropping
//! them would bring back the file's unrelocated bytes. That is why the ranges come from the
//! program headers, not from the permissions in `/proc/self/maps`.
//!
//! When: not inside Start. The reply, the start event's publication and the engine's
//! follow-up calls run right after Start and would fault a good part of the code straight
//! back (measured: 2.0 of 4.0 MiB of code within 100 ms). [`drop_when_quiet`] waits until a
//! second has passed without another start.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long after the last start the pages are dropped. Long enough for the start's reply,
/// its event and the engine's follow-up calls (a few hundred ms); short against a sandbox's
/// life.
pub const QUIET: Duration = Duration::from_secs(1);

static STARTS: AtomicU64 = AtomicU64::new(0);

/// Drops the read-only segments' pages (see the module comment) once [`QUIET`] has passed
/// without another call. Needs a Tokio runtime.
pub fn drop_when_quiet() {
    let mine = STARTS.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::spawn(async move {
        tokio::time::sleep(QUIET).await;
        if STARTS.load(Ordering::SeqCst) == mine {
            drop_mapped_code();
        }
    });
}

/// Drops this process's mappings of its executable's read-only segments now. Best effort: a
/// failure leaves the pages mapped, which costs memory, never correctness.
pub fn drop_mapped_code() {
    for range in read_only_ranges(&own_segments()) {
        // SAFETY: `range` is page-aligned and lies within a segment of our own executable that
        // was mapped without write permission and shares no page with a writable one (see
        // `read_only_ranges`). Its pages are never written, so MADV_DONTNEED only unmaps them;
        // any later access faults the same bytes back in from the file, including the code
        // running this call.
        unsafe {
            libc::madvise(
                range.start as *mut libc::c_void,
                range.end - range.start,
                libc::MADV_DONTNEED,
            );
        }
    }
}

/// A loaded segment of the executable: its address range and whether it is writable.
#[derive(Debug, Clone, PartialEq)]
struct Segment {
    range: Range<usize>,
    writable: bool,
}

/// The executable's `PT_LOAD` segments, from the program headers the loader used.
fn own_segments() -> Vec<Segment> {
    unsafe extern "C" fn first_object(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: the loader hands a valid `dl_phdr_info` for the duration of the call, with
        // `dlpi_phnum` headers at `dlpi_phdr`; `data` is the Vec passed below.
        unsafe {
            let info = &*info;
            let out = &mut *(data as *mut Vec<Segment>);
            let headers = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            for h in headers.iter().filter(|h| h.p_type == libc::PT_LOAD) {
                let start = info.dlpi_addr as usize + h.p_vaddr as usize;
                out.push(Segment {
                    range: start..start + h.p_memsz as usize,
                    writable: h.p_flags & libc::PF_W != 0,
                });
            }
        }
        // The first object is the executable itself: stop there.
        1
    }
    let mut segments: Vec<Segment> = Vec::new();
    // SAFETY: the callback only reads what the loader passes and writes to `segments`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(first_object),
            &mut segments as *mut Vec<Segment> as *mut libc::c_void,
        );
    }
    segments
}

/// The whole pages of the non-writable segments that no writable segment touches.
fn read_only_ranges(segments: &[Segment]) -> Vec<Range<usize>> {
    const PAGE: usize = 4096;
    let pages = |r: &Range<usize>| (r.start & !(PAGE - 1))..((r.end + PAGE - 1) & !(PAGE - 1));
    let writable: Vec<Range<usize>> = segments
        .iter()
        .filter(|s| s.writable)
        .map(|s| pages(&s.range))
        .collect();
    let mut out = Vec::new();
    for s in segments.iter().filter(|s| !s.writable) {
        let mut pieces = vec![pages(&s.range)];
        for w in &writable {
            pieces = pieces
                .into_iter()
                .flat_map(|p| [p.start..p.end.min(w.start), p.start.max(w.end)..p.end])
                .filter(|p| p.start < p.end)
                .collect();
        }
        out.extend(pieces);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(range: Range<usize>, writable: bool) -> Segment {
        Segment { range, writable }
    }

    #[test]
    fn only_whole_pages_of_read_only_segments_are_chosen() {
        // Rodata, code sharing its first page with the rodata's end, and a writable segment
        // whose first page holds the code's last bytes.
        let segments = [
            seg(0x0..0x2ce31c, false),
            seg(0x2ce340..0x7ab800, false),
            seg(0x7ab900..0x7cc000, true),
        ];
        assert_eq!(
            read_only_ranges(&segments),
            [0x0..0x2cf000, 0x2ce000..0x7ab000]
        );
        // A writable segment in the middle of a read-only one splits it.
        assert_eq!(
            read_only_ranges(&[seg(0x0..0x10000, false), seg(0x4000..0x5000, true)]),
            [0x0..0x4000, 0x5000..0x10000]
        );
        assert!(read_only_ranges(&[seg(0x1000..0x2000, true)]).is_empty());
    }

    #[test]
    fn the_executables_segments_are_found_with_code_read_only_and_data_writable() {
        let segments = own_segments();
        let here = Segment::contains_fn as *const () as usize;
        let code = segments.iter().find(|s| s.range.contains(&here)).unwrap();
        assert!(!code.writable);
        let data = &WRITTEN as *const AtomicU64 as usize;
        assert!(segments
            .iter()
            .any(|s| s.writable && s.range.contains(&data)));
    }

    impl Segment {
        fn contains_fn() {}
    }

    static WRITTEN: AtomicU64 = AtomicU64::new(7);

    const TABLE_LEN: usize = 256 * 1024;

    /// A byte of the read-only table at `i`: no page of it is zero, so it is stored in the
    /// file (not as zero-fill).
    const fn table_byte(i: usize) -> u8 {
        (i % 251) as u8 + 1
    }

    /// 256 KiB of read-only data nothing but the test below reads.
    static TABLE: [u8; TABLE_LEN] = {
        let mut t = [0; TABLE_LEN];
        let mut i = 0;
        while i < TABLE_LEN {
            t[i] = table_byte(i);
            i += 1;
        }
        t
    };

    #[test]
    fn constants_are_unmapped_and_read_the_same_after_their_pages_are_dropped() {
        let table = TABLE.as_ptr() as usize;
        assert!(read_only_ranges(&own_segments())
            .iter()
            .any(|r| r.contains(&table) && r.contains(&(table + TABLE_LEN - 1))));
        let sum = |t: &[u8; TABLE_LEN]| t.iter().map(|&b| b as u64).sum::<u64>();
        let expected: u64 = (0..TABLE_LEN).map(|i| table_byte(i) as u64).sum();
        assert_eq!(sum(std::hint::black_box(&TABLE)), expected);
        // The table's middle: other code faulting pages next to the table maps up to 64 KiB
        // around each fault (fault-around), so its edges may come back by themselves.
        let middle = (table + 64 * 1024 + 4095) & !4095..(table + TABLE_LEN - 64 * 1024) & !4095;
        assert!(mapped_pages(&middle).iter().all(|&m| m), "read, so mapped");
        WRITTEN.store(42, Ordering::SeqCst);
        drop_mapped_code();
        assert!(mapped_pages(&middle).iter().all(|&m| !m), "dropped");
        // Code, constants and relocated data (vtables, function pointers) all read as before;
        // written data is untouched.
        assert_eq!(sum(std::hint::black_box(&TABLE)), expected);
        assert_eq!(format!("{:?}", (1..4).collect::<Vec<_>>()), "[1, 2, 3]");
        assert_eq!(WRITTEN.load(Ordering::SeqCst), 42);
        let fmt: fn(&str) -> String = str::to_uppercase;
        assert_eq!(fmt("relro"), "RELRO");
        let shown: &dyn std::fmt::Display = &7;
        assert_eq!(shown.to_string(), "7");
    }

    /// For each page of `range`, whether it is mapped in this process (bit 63 of its
    /// `/proc/self/pagemap` entry, readable without privileges).
    fn mapped_pages(range: &Range<usize>) -> Vec<bool> {
        use std::os::unix::fs::FileExt;
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let pages = (range.end - range.start) / 4096;
        let mut entries = vec![0u8; pages * 8];
        pagemap
            .read_exact_at(&mut entries, (range.start / 4096 * 8) as u64)
            .unwrap();
        entries
            .chunks(8)
            .map(|e| u64::from_ne_bytes(e.try_into().unwrap()) >> 63 == 1)
            .collect()
    }
}
