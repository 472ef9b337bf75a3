//! Host processes and files as the shim, runsc-hardened and the egress supervisor handle them:
//! the one reaper of a subreaper's children ([`reaper`]), a recorded process held by pidfd
//! ([`host_process`]) and its `/proc` stat ([`proc_stat`]), a file replaced whole
//! ([`atomic_file`]), freed heap handed back ([`heap`]), the binary's own read-only pages
//! dropped once it is idle ([`text_pages`]). Leaves: nothing here knows of sandboxes, policies
//! or containerd.

pub mod atomic_file;
pub mod heap;
pub mod host_process;
pub mod proc_stat;
pub mod reaper;
pub mod text_pages;
