//! A budget file: a container's output counters in a small file that every process copying
//! the container's streams maps shared, so their atomic operations act on the same memory.
//! runsc-hardened needs it because each of its calls is a process of its own: the init's guard
//! and each exec's guard copy different streams of one container against one budget.
//!
//! The file lives in the container's private state directory (root's, 0700), is created
//! exclusively by the init's guard before any exec can run, and is opened without following
//! links. A file of the wrong size is refused rather than mapped.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::ptr::NonNull;

use super::Counters;

const SIZE: usize = std::mem::size_of::<Counters>();

/// The counters of a budget file, mapped into this process until dropped.
#[derive(Debug)]
pub(super) struct Mapped {
    counters: NonNull<Counters>,
}

// SAFETY: the mapping is only ever accessed through atomics, from any thread.
unsafe impl Send for Mapped {}
// SAFETY: as above.
unsafe impl Sync for Mapped {}

impl Mapped {
    pub(super) fn open(path: &Path, create: bool) -> io::Result<Mapped> {
        let mut options = OpenOptions::new();
        options
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
        if create {
            options.create_new(true);
        }
        let file = options.open(path)?;
        if create {
            file.set_len(SIZE as u64)?;
        } else if file.metadata()?.len() != SIZE as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a budget file ({SIZE} bytes)", path.display()),
            ));
        }
        // SAFETY: a fresh shared mapping of SIZE bytes of a file at least that long; the
        // kernel picks the (page-aligned, so suitably aligned) address.
        let at = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if at == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let counters = NonNull::new(at.cast::<Counters>()).ok_or_else(io::Error::last_os_error)?;
        Ok(Mapped { counters })
    }

    pub(super) fn counters(&self) -> &Counters {
        // SAFETY: mapped for as long as self lives; zero bytes are valid atomics.
        unsafe { self.counters.as_ref() }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.counters.as_ptr().cast(), SIZE) };
    }
}
