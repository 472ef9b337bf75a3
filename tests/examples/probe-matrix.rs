//! Runs every sandbox-probe primitive inside one container and prints what it saw: a quick
//! way to see how a runtime behaves before writing assertions.
//!
//! `cargo run -p gvisor-hardened-tests --example probe-matrix -- [baseline|runc|hardened] [--user]`
//! (`hardened` needs the shim built, see `shim_binary`; `--user` runs each probe as 65534 (`sandbox-probe as`)).

use gvisor_hardened_tests::*;

/// Probe invocations, each run in the same container one after the other.
const MATRIX: &[&str] = &[
    "caps",
    "nnp",
    "seccomp",
    "ids",
    "rlimits",
    "uname",
    "statfs /",
    "statfs /tmp",
    "write /probe-root-write",
    "write /etc/probe",
    "write /tmp/probe",
    "read /proc/kcore",
    "read /dev/mem",
    "write /proc/sys/kernel/hostname gvh",
    "mount-tmpfs /mnt",
    "mount-proc /mnt",
    "remount-root-rw",
    "chroot /tmp",
    "mknod /tmp/blk b 8 0",
    "mknod /tmp/mem c 1 1",
    "setuid 0",
    "setgid 0",
    "setgroups",
    "sethostname gvh",
    "chown /tmp 0 0",
    "unshare user",
    "unshare mount",
    "clone-userns",
    "ptrace-attach child",
    "ptrace-attach 1",
    "keyctl",
    "add-key",
    "bpf",
    "perf-event-open",
    "userfaultfd",
    "init-module",
    "finit-module",
    "kexec-load",
    "socket-raw",
    "socket-packet",
    "bind 80",
    "bind 8080",
    "connect 127.0.0.1 1 500",
    // A live server in a network namespace of this run's own (veth), reached from the host.
    "connect @NET@ 500",
    "fds 100",
    "fill /tmp/f 1048576",
    "fork 10",
    "mem 16",
    "spin 1",
    "sleep 0",
];

fn main() -> anyhow_free::Result {
    let mut args = std::env::args().skip(1);
    let runtime = match args.next().as_deref() {
        None | Some("baseline") => Runtime::Baseline,
        Some("runc") => Runtime::Runc,
        Some("hardened") => Runtime::hardened(),
        Some(other) => return Err(format!("unknown runtime {other}").into()),
    };
    let as_user = args.next().as_deref() == Some("--user");
    let opts = match runtime {
        Runtime::Hardened { .. } => ContainerdOptions::with_shim(shim_binary()?),
        _ => ContainerdOptions::default(),
    };
    let c = Containerd::start(opts)?;
    let image = TestImage::ensure()?;
    c.import(&image)?;
    let prefix = if as_user { "as 65534 65534 " } else { "" };
    let net = netns::TestNetns::create()?;
    let target = net.ns_tcp();
    let script: String = MATRIX
        .iter()
        .map(|cmd| cmd.replace("@NET@", &format!("{} {}", target.ip(), target.port())))
        .map(|cmd| format!("printf '%-40s ' '{cmd}'; /bin/sandbox-probe {prefix}{cmd} 2>&1 || echo \"(exit $?)\"\n"))
        .collect();
    let id = unique_id("matrix");
    let out = c.run_output(
        &Run::new(image.reference(), &id)
            .runtime(runtime.clone())
            .sh(script),
    )?;
    println!("{}", out.stdout);
    if !out.stderr.is_empty() {
        eprintln!("stderr: {}", out.stderr);
    }
    println!("exit {}", out.code());
    let leaks = container_leaks(&c, &id, &runtime);
    let report = c.shutdown();
    println!("shutdown: {report}");
    if !leaks.is_empty() {
        println!("(right after the run, before the grace period):\n{leaks}");
    }
    Ok(())
}

/// Examples may not use anyhow (not a dependency): a boxed error is enough here.
mod anyhow_free {
    pub type Result = std::result::Result<(), Box<dyn std::error::Error>>;
}
