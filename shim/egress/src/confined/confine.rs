//! What the proxy process gives up before it reads a byte from the sandbox, in this order
//! (each step needs what the next one takes away): the pod's network namespace (setns needs
//! CAP_SYS_ADMIN), no dumping (its memory holds the CA key), every capability out of the
//! bounding set (needs CAP_SETPCAP), no supplementary groups, the sandbox's own uid and gid
//! (which empties the permitted and effective sets), `no_new_privs`, then the seccomp allowlist.
//! All of it while the process has one thread: the runtime's threads inherit the result.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use nix::unistd::{Gid, Uid};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The uids a proxy process may run as: one per sandbox, from a block far above the ranges
/// distributions and user namespaces hand out, so no account on the node shares it and two
/// sandboxes' proxies cannot signal each other (they would need the same uid).
pub const UID_BASE: u32 = 0x7f10_0000;
pub const UID_SPAN: u32 = 0x0001_0000;

/// The uid of `sandbox_id`'s proxy process (a hash into the block; a collision between two
/// sandboxes on one node leaves both confined, only not apart from each other).
pub fn uid_for(sandbox_id: &str) -> u32 {
    // FNV-1a: stable across builds, which `DefaultHasher` does not promise.
    let mut h: u32 = 0x811c_9dc5;
    for b in sandbox_id.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    UID_BASE + h % UID_SPAN
}

/// Enters the network namespace at `path`: the pod's, so the proxy dials with the pod's
/// address and under its NetworkPolicies.
pub fn enter_netns(path: &Path) -> io::Result<()> {
    let ns = std::fs::File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("netns {}: {e}", path.display())))?;
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWNET)
        .map_err(|e| io::Error::other(format!("setns {}: {e}", path.display())))
}

/// Everything but the seccomp filter: not dumpable, no capabilities, the given uid and gid,
/// no_new_privs.
pub fn drop_privileges(uid: u32) -> io::Result<()> {
    let err = |what: &str, e: nix::Error| io::Error::other(format!("{what}: {e}"));
    nix::sys::prctl::set_dumpable(false).map_err(|e| err("PR_SET_DUMPABLE", e))?;
    let last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .unwrap_or(40);
    for cap in 0..=last {
        // SAFETY: prctl with integer arguments only.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc != 0 {
            return Err(io::Error::other(format!(
                "PR_CAPBSET_DROP {cap}: {}",
                io::Error::last_os_error()
            )));
        }
    }
    nix::unistd::setgroups(&[]).map_err(|e| err("setgroups", e))?;
    let (gid, uid) = (Gid::from_raw(uid), Uid::from_raw(uid));
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| err("setresgid", e))?;
    // From root to another uid without SECBIT_KEEP_CAPS: the permitted, effective and ambient
    // sets are emptied by the kernel.
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| err("setresuid", e))?;
    // Inheritable is left as root had it (empty where the shim runs); emptied anyway.
    clear_inheritable()?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| err("PR_SET_NO_NEW_PRIVS", e))?;
    Ok(())
}

fn clear_inheritable() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Default, Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data::default(); 2];
    // SAFETY: capset with a valid header and the two data words version 3 takes.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::other(format!(
            "capset: {}",
            io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// The system calls the proxy makes once it serves: tokio's runtime and timers, memory, TCP
/// sockets of its own (IPv4 and IPv6 only), its socket to the shim, random numbers. Nothing
/// that opens a file, executes, traces, mounts, changes ids or namespaces.
fn allowed() -> Vec<i64> {
    use libc::*;
    vec![
        SYS_read,
        SYS_write,
        SYS_readv,
        SYS_writev,
        SYS_close,
        SYS_fstat,
        SYS_newfstatat,
        SYS_statx,
        SYS_lseek,
        SYS_mmap,
        SYS_munmap,
        SYS_mprotect,
        SYS_mremap,
        SYS_madvise,
        SYS_brk,
        SYS_rt_sigaction,
        SYS_rt_sigprocmask,
        SYS_rt_sigreturn,
        SYS_sigaltstack,
        SYS_futex,
        SYS_sched_yield,
        SYS_sched_getaffinity,
        SYS_set_robust_list,
        SYS_rseq,
        // clone only for threads (a rule below); clone3, whose flags a filter cannot read, is
        // answered ENOSYS by the first filter, and glibc then uses clone.
        SYS_clone3,
        SYS_exit,
        SYS_exit_group,
        SYS_getpid,
        SYS_gettid,
        SYS_tgkill,
        SYS_epoll_create1,
        SYS_epoll_ctl,
        SYS_epoll_wait,
        SYS_epoll_pwait,
        SYS_eventfd2,
        SYS_connect,
        SYS_getsockopt,
        SYS_setsockopt,
        SYS_getsockname,
        SYS_getpeername,
        SYS_shutdown,
        SYS_recvfrom,
        SYS_sendto,
        SYS_recvmsg,
        SYS_sendmsg,
        SYS_fcntl,
        SYS_ioctl,
        SYS_poll,
        SYS_ppoll,
        SYS_clock_gettime,
        SYS_clock_nanosleep,
        SYS_nanosleep,
        SYS_getrandom,
        SYS_restart_syscall,
        // tokio's runtime makes one pair for its signal handling at build time (an anonymous
        // pair reaches nothing).
        SYS_socketpair,
        // Answered EACCES by the first filter (`no_files`): glibc and std may try (a thread's
        // name, /proc/self/maps on a panic) and must fail, not kill the process.
        SYS_open,
        SYS_openat,
    ]
}

fn seccomp_error(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("seccomp: {e}"))
}

/// A filter: `matched` for `calls` (with their rules; none: any arguments), `otherwise` for the
/// rest, compiled for this machine.
fn filter(
    calls: BTreeMap<i64, Vec<SeccompRule>>,
    otherwise: SeccompAction,
    matched: SeccompAction,
) -> io::Result<BpfProgram> {
    let arch: TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| io::Error::other(format!("seccomp on {}: {e:?}", std::env::consts::ARCH)))?;
    SeccompFilter::new(calls, otherwise, matched, arch)
        .map_err(seccomp_error)?
        .try_into()
        .map_err(|e: seccompiler::BackendError| seccomp_error(e))
}

/// A rule on a call's first argument.
fn first_argument(len: SeccompCmpArgLen, op: SeccompCmpOp, value: u64) -> io::Result<SeccompRule> {
    SeccompCondition::new(0, len, op, value)
        .and_then(|c| SeccompRule::new(vec![c]))
        .map_err(seccomp_error)
}

/// Three filters, the kernel applying the strictest answer: one that answers every attempt to
/// open a file with EACCES, one that answers clone3 with ENOSYS, and the allowlist (anything
/// else kills the process).
pub fn install_seccomp() -> io::Result<()> {
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> =
        allowed().into_iter().map(|n| (n, Vec::new())).collect();
    let equal = |value: u64| first_argument(SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value);
    // TCP sockets only, of the two address families.
    rules.insert(
        libc::SYS_socket,
        vec![equal(libc::AF_INET as u64)?, equal(libc::AF_INET6 as u64)?],
    );
    // Threads name themselves; nothing else of prctl.
    rules.insert(libc::SYS_prctl, vec![equal(libc::PR_SET_NAME as u64)?]);
    // New threads only: no new process, and with CLONE_THREAD no new user namespace either
    // (the kernel refuses the two together).
    let thread = libc::CLONE_THREAD as u64;
    rules.insert(
        libc::SYS_clone,
        vec![first_argument(
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(thread),
            thread,
        )?],
    );
    let allowlist = filter(rules, SeccompAction::KillProcess, SeccompAction::Allow)?;
    let answered = |calls: &[i64], errno: i32| {
        filter(
            calls.iter().map(|&n| (n, Vec::new())).collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
        )
    };
    let no_files = answered(&[libc::SYS_open, libc::SYS_openat], libc::EACCES)?;
    let no_clone3 = answered(&[libc::SYS_clone3], libc::ENOSYS)?;
    // The answering filters first: once the allowlist is in, installing another filter is a
    // call outside it.
    for program in [&no_files, &no_clone3, &allowlist] {
        seccompiler::apply_filter(program).map_err(seccomp_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_sandbox_has_a_stable_uid_in_the_block() {
        let a = uid_for("sandbox-a");
        assert_eq!(a, uid_for("sandbox-a"));
        assert_ne!(a, uid_for("sandbox-b"));
        for id in ["", "x", "a-very-long-sandbox-id-0123456789abcdef"] {
            let u = uid_for(id);
            assert!((UID_BASE..UID_BASE + UID_SPAN).contains(&u), "{u}");
        }
    }

    /// Set in the copy of this test binary that installs the filter (a filter cannot be taken
    /// off, so it is never installed in the test process itself).
    const UNDER_FILTER: &str = "GVH_TEST_UNDER_SECCOMP";

    #[test]
    fn under_the_filter_threads_start_files_are_refused_and_a_fork_kills_the_process() {
        if std::env::var_os(UNDER_FILTER).is_some() {
            nix::sys::prctl::set_no_new_privs().unwrap();
            install_seccomp().unwrap();
            // A thread, as the runtime makes them (clone3 refused, glibc falls back to clone).
            let t = std::thread::spawn(|| 7).join().unwrap();
            println!("thread {t}");
            let opened = std::fs::File::open("/etc/hostname")
                .map(|_| ())
                .unwrap_err();
            println!("open {:?}", opened.raw_os_error());
            // fork(2) is not on the list: the process dies here.
            let _ = std::process::Command::new("/bin/true").status();
            println!("forked");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "confined::confine::tests::under_the_filter_threads_start_files_are_refused_and_a_fork_kills_the_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(UNDER_FILTER, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("thread 7"), "{stdout}");
        assert!(
            stdout.contains(&format!("open Some({})", libc::EACCES)),
            "{stdout}"
        );
        assert!(!stdout.contains("forked"), "{stdout}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGSYS), "{:?}", out.status);
    }

    #[test]
    fn the_filters_compile_for_this_machine() {
        let rules: BTreeMap<i64, Vec<SeccompRule>> =
            allowed().into_iter().map(|n| (n, Vec::new())).collect();
        filter(rules, SeccompAction::KillProcess, SeccompAction::Allow).unwrap();
    }
}
