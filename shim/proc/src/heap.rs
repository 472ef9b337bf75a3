//! Handing freed heap pages back to the kernel. A shim lives as long as its pod: a peak it
//! reached once (a Create's spec rewrite, a burst of egress connections) would otherwise stay
//! resident for the pod's whole life, since malloc keeps freed chunks for reuse.

/// Returns free heap memory to the kernel; microseconds, so only at the end of a peak.
pub fn release_freed_memory() {
    // SAFETY: malloc_trim only returns free memory to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}
