//! The guard's name in `ps`: a fork of `create` would otherwise show as that `create` for as
//! long as the container lives.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use gvisor_hardened_core::proc_stat::ProcStat;

/// The guard is a fork of `create`: without this, `ps` would show it as that `create` for as
/// long as the container lives. Rewrites the command line in place (the original arguments'
/// memory, as `setproctitle` does; the kernel's way to point it elsewhere takes
/// CAP_SYS_RESOURCE, which engines' runtime calls do not always have): `runsc-hardened guard
/// STATE_DIR`, cut to the original's length. Best effort: the name is for people, `delete`
/// knows its guard by pid and start time.
pub(super) fn show_as_guard(state_dir: &Path) {
    show_as(&[b"guard", state_dir.as_os_str().as_bytes()]);
}

/// Rewrites the command line to `runsc-hardened WORDS...` (see `show_as_guard`).
pub(crate) fn show_as(words: &[&[u8]]) {
    let Some((start, end)) = own_args_range() else {
        return;
    };
    let mut title = b"runsc-hardened".to_vec();
    for w in words {
        title.push(0);
        title.extend_from_slice(w);
    }
    // NUL-padded to the end; the last byte stays NUL, so the kernel reads no further.
    title.resize(end - start, 0);
    if let Some(last) = title.last_mut() {
        *last = 0;
    }
    // SAFETY: [start, end) holds this process's original argument strings on its own stack,
    // writable and never freed; the arguments were parsed into owned strings long before.
    unsafe { std::ptr::copy_nonoverlapping(title.as_ptr(), start as *mut u8, title.len()) };
}

/// Where the kernel reads this process's command line from (fields 48 and 49 of
/// `/proc/self/stat`).
fn own_args_range() -> Option<(usize, usize)> {
    let stat = ProcStat::read("self")?;
    let start: usize = stat.field(48)?.parse().ok()?;
    let end: usize = stat.field(49)?.parse().ok()?;
    (start != 0 && end > start).then_some((start, end))
}
