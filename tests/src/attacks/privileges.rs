//! Privilege attacks: setuid and file-capability binaries, identity changes, namespaces,
//! ptrace, kernel interfaces (keys, bpf, perf, userfaultfd, modules, kexec), /proc/sys, kernel
//! memory, rlimits, and `ctr task exec --user 0`.

use std::fs;

use super::filesystem::probe_errno;
use super::lab::{Job, Lab};
use super::{ensure, Attack, Category, Failed, Outcome};

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Privileges,
        expected,
        run,
    };
    vec![
        a(
            "run a setuid-root binary",
            "euid stays 65534",
            setuid_binary,
        ),
        a(
            "run a binary with file capabilities",
            "CapEff 0; raw socket EPERM",
            file_caps,
        ),
        a("setuid(0)", "EPERM", setuid0),
        a("setgid(0)", "EPERM", setgid0),
        a("setgroups([0])", "EPERM", setgroups),
        a("chown /tmp to root", "EPERM", chown),
        a("unshare a user namespace", "EPERM (seccomp)", unshare_user),
        a("clone(CLONE_NEWUSER)", "EPERM (seccomp)", clone_userns),
        a(
            "unshare mount and cgroup namespaces",
            "EPERM x2 (seccomp)",
            unshare_other,
        ),
        a("ptrace a child", "EPERM (seccomp)", ptrace_child),
        a("ptrace pid 1", "EPERM (seccomp)", ptrace_init),
        a("keyctl", "EPERM (seccomp)", keyctl),
        a("add_key", "EPERM (seccomp)", add_key),
        a("bpf", "EPERM (seccomp)", bpf),
        a("perf_event_open", "EPERM (seccomp)", perf_event_open),
        a("userfaultfd", "EPERM (seccomp)", userfaultfd),
        a("init_module", "EPERM (seccomp)", init_module),
        a("finit_module", "EPERM (seccomp)", finit_module),
        a("kexec_load", "EPERM (seccomp)", kexec_load),
        a(
            "write /proc/sys (core_pattern) and sethostname",
            "EACCES, EPERM; host values unchanged",
            proc_sys,
        ),
        a(
            "read kernel memory (/proc/kcore, /dev/mem, /dev/kmem)",
            "ENOENT x3",
            kernel_memory,
        ),
        a("raise RLIMIT_NOFILE", "EPERM", raise_rlimit),
        a(
            "overwrite the runtime through /proc/self/exe (CVE-2019-5736 style)",
            "EACCES; /proc/self/exe is the sandbox's own binary; host runsc unchanged",
            proc_self_exe,
        ),
        a(
            "ctr task exec --user 0",
            "uid 65534, no capability",
            exec_as_root,
        ),
    ]
}

fn setuid_binary(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::cmd("priv-suid", ["/bin/sandbox-probe-suid", "ids"]))?;
    let line = ran.line()?;
    ensure(
        line.field("euid") == Some("65534") && line.field("uid") == Some("65534"),
        || format!("expected uid/euid 65534: {}", ran.summary()),
    )?;
    Ok("uid=65534 euid=65534".into())
}

fn file_caps(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::sh(
        "priv-fcaps",
        "/bin/sandbox-probe-fcaps caps; /bin/sandbox-probe-fcaps socket-raw",
    ))?;
    let l = ran.probe_lines(2)?;
    let zero = "0000000000000000";
    ensure(
        ["CapEff", "CapPrm", "CapBnd"]
            .iter()
            .all(|k| l[0].field(k) == Some(zero)),
        || format!("capabilities raised: {}", ran.summary()),
    )?;
    ensure(l[1].errno() == Some("EPERM"), || {
        format!("raw socket: {}", ran.summary())
    })?;
    Ok("CapEff=CapPrm=CapBnd=0; raw socket EPERM".into())
}

fn setuid0(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-setuid", &["setuid", "0"], "EPERM")
}

fn setgid0(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-setgid", &["setgid", "0"], "EPERM")
}

fn setgroups(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-setgroups", &["setgroups"], "EPERM")
}

fn chown(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-chown", &["chown", "/tmp", "0", "0"], "EPERM")
}

fn unshare_user(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-userns", &["unshare", "user"], "EPERM")
}

fn clone_userns(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-cloneuser", &["clone-userns"], "EPERM")
}

fn unshare_other(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probes(
        "priv-unshare",
        &["unshare mount", "unshare cgroup"],
    ))?;
    let l = ran.probe_lines(2)?;
    ensure(l.iter().all(|l| l.errno() == Some("EPERM")), || {
        format!("expected EPERM x2: {}", ran.summary())
    })?;
    Ok("mount: EPERM; cgroup: EPERM".into())
}

fn ptrace_child(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-ptrace", &["ptrace-attach", "child"], "EPERM")
}

fn ptrace_init(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-ptrace1", &["ptrace-attach", "1"], "EPERM")
}

fn keyctl(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-keyctl", &["keyctl"], "EPERM")
}

fn add_key(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-addkey", &["add-key"], "EPERM")
}

fn bpf(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-bpf", &["bpf"], "EPERM")
}

fn perf_event_open(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-perf", &["perf-event-open"], "EPERM")
}

fn userfaultfd(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-uffd", &["userfaultfd"], "EPERM")
}

fn init_module(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-initmod", &["init-module"], "EPERM")
}

fn finit_module(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-finitmod", &["finit-module"], "EPERM")
}

fn kexec_load(lab: &Lab) -> Outcome {
    probe_errno(lab, "priv-kexec", &["kexec-load"], "EPERM")
}

fn host_hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default()
}

fn proc_sys(lab: &Lab) -> Outcome {
    let core_before = fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let host_before = host_hostname();
    let ran = lab.run(Job::probes(
        "priv-procsys",
        &[
            "write /proc/sys/kernel/core_pattern '|/tmp/gvh-pwned'",
            "sethostname gvh-pwned",
        ],
    ))?;
    let l = ran.probe_lines(2)?;
    ensure(l[0].errno() == Some("EACCES"), || {
        format!("core_pattern write: {}", ran.summary())
    })?;
    ensure(l[1].errno() == Some("EPERM"), || {
        format!("sethostname: {}", ran.summary())
    })?;
    let core_after = fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    ensure(core_after == core_before, || {
        format!("host core_pattern changed to {core_after:?}")
    })?;
    ensure(host_hostname() == host_before, || {
        format!("host hostname changed to {:?}", host_hostname())
    })?;
    Ok("core_pattern: EACCES; sethostname: EPERM; host's unchanged".into())
}

fn kernel_memory(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probes(
        "priv-kmem",
        &["read /proc/kcore", "read /dev/mem", "read /dev/kmem"],
    ))?;
    let l = ran.probe_lines(3)?;
    ensure(l.iter().all(|l| l.errno() == Some("ENOENT")), || {
        format!("expected ENOENT x3: {}", ran.summary())
    })?;
    Ok("ENOENT x3 (gVisor exposes none of them)".into())
}

fn raise_rlimit(lab: &Lab) -> Outcome {
    probe_errno(
        lab,
        "priv-rlimit",
        &["setrlimit", "NOFILE", "1048576", "1048576"],
        "EPERM",
    )
}

fn proc_self_exe(lab: &Lab) -> Outcome {
    // The runsc the sandbox runs on (crate::stack), which it must not be able to change.
    let runsc_path = crate::stack::bin("runsc").map_err(|e| Failed(format!("runsc: {e}")))?;
    let runsc = fs::metadata(&runsc_path).map_err(|e| Failed(format!("runsc: {e}")))?;
    let ran = lab.run(Job::sh(
        "priv-selfexe",
        "/bin/sandbox-probe write /proc/self/exe pwned; readlink /proc/self/exe",
    ))?;
    let first = ran.out.stdout.lines().next().unwrap_or("");
    let line = crate::probe::ProbeLine::parse(first)
        .map_err(|e| Failed(format!("{e}: {}", ran.summary())))?;
    ensure(line.errno() == Some("EACCES"), || {
        format!("expected EACCES: {}", ran.summary())
    })?;
    // readlink in a fresh process names busybox: the image's binary, not a host one.
    ensure(ran.out.stdout.contains("/bin/busybox"), || {
        format!(
            "/proc/self/exe is not the image's binary: {}",
            ran.summary()
        )
    })?;
    let after = fs::metadata(&runsc_path).map_err(|e| Failed(format!("runsc: {e}")))?;
    use std::os::unix::fs::MetadataExt;
    ensure(
        after.mtime() == runsc.mtime()
            && after.ctime() == runsc.ctime()
            && after.len() == runsc.len(),
        || "the host's runsc binary changed".into(),
    )?;
    Ok("EACCES; /proc/self/exe -> /bin/busybox (the image's); host runsc unchanged".into())
}

fn exec_as_root(lab: &Lab) -> Outcome {
    let id = lab.start_detached(Job::probe("priv-exec", &["sleep", "120"]))?;
    let result = (|| {
        let ids = lab.exec(&id, &["--user", "0"], &["/bin/sandbox-probe", "ids"])?;
        let caps = lab.exec(&id, &["--user", "0"], &["/bin/sandbox-probe", "caps"])?;
        let ids_line = crate::probe::ProbeLine::parse_last(&ids.stdout)
            .map_err(|e| Failed(format!("{e}: {ids}")))?;
        let caps_line = crate::probe::ProbeLine::parse_last(&caps.stdout)
            .map_err(|e| Failed(format!("{e}: {caps}")))?;
        ensure(
            ids_line.field("uid") == Some("65534") && ids_line.field("euid") == Some("65534"),
            || format!("exec --user 0 ran as: {}", ids.stdout.trim()),
        )?;
        ensure(
            caps_line.field("CapEff") == Some("0000000000000000"),
            || format!("exec --user 0 capabilities: {}", caps.stdout.trim()),
        )?;
        Ok("exec --user 0: uid=65534 euid=65534, CapEff=0".to_string())
    })();
    lab.remove(&id)?;
    result
}
