//! Filesystem attacks: writing the image, mounting, chroot, device nodes, escaping a bind mount,
//! filling scratch space, file size and descriptor limits.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};

use super::lab::{Job, Lab};
use super::{ensure, Attack, Category, Failed, Outcome};
use crate::probe::ProbeLine;

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Filesystem,
        expected,
        run,
    };
    vec![
        a(
            "write a file in /",
            "EACCES (uid 65534) on a root mounted ro; audit root.readonly",
            write_root,
        ),
        a("overwrite /etc/passwd", "EACCES", write_etc),
        a("overwrite /bin/busybox", "EACCES", write_bin),
        a("remount / read-write", "EPERM", remount_root),
        a("mount a tmpfs", "EPERM", mount_tmpfs),
        a("mount proc", "EPERM", mount_proc),
        a("chroot", "EPERM", chroot),
        a(
            "mknod a block device (b 8:0)",
            "EPERM (seccomp); a FIFO still works",
            mknod_block,
        ),
        a(
            "mknod a character device (c 1:1, /dev/mem)",
            "EPERM (seccomp)",
            mknod_char,
        ),
        a(
            "follow symlinks and .. out of a bind mount",
            "ENOENT; host file never read",
            bind_escape,
        ),
        a(
            "write through a read-write bind",
            "EROFS (bind forced ro); host dir unchanged",
            writable_bind,
        ),
        a(
            "fill /tmp past its 1Gi cap",
            "ENOSPC at the 1Gi cap",
            fill_tmp,
        ),
        a(
            "write past RLIMIT_FSIZE (1Gi)",
            "EFBIG + SIGXFSZ at 1Gi; below it works",
            fsize,
        ),
        a(
            "exhaust file descriptors",
            "EMFILE at RLIMIT_NOFILE 1024",
            fds,
        ),
        a(
            "open the host's disk (/dev/vda, /dev/sda)",
            "ENOENT x2 (gVisor's /dev has no host devices)",
            host_disk,
        ),
    ]
}

/// Runs one probe command and expects it to fail with `errno`.
pub fn probe_errno(lab: &Lab, prefix: &'static str, args: &[&str], errno: &str) -> Outcome {
    let ran = lab.run(Job::probe(prefix, args))?;
    let line = ran.line()?;
    ensure(line.errno() == Some(errno), || {
        format!("expected errno {errno}; {}", ran.summary())
    })?;
    Ok(format!("errno {errno}"))
}

fn errno_of(line: &ProbeLine) -> String {
    line.errno()
        .map(str::to_string)
        .unwrap_or_else(|| "ok".into())
}

fn write_root(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::sh(
        "fs-root",
        "/bin/sandbox-probe write /gvh-pwned; awk '$5 == \"/\" { print \"ok rootopts=\" $6 }' /proc/self/mountinfo",
    ))?;
    let lines = ran.probe_lines(2)?;
    ensure(lines[0].errno() == Some("EACCES"), || {
        format!("write: {}", ran.summary())
    })?;
    ensure(lines[1].field("rootopts") == Some("ro"), || {
        format!("/ not mounted ro: {}", ran.summary())
    })?;
    let create = lab.audit_event(&ran.id, "create")?;
    let decided = create["decisions"]
        .as_array()
        .is_some_and(|d| d.iter().any(|d| d["field"] == "root.readonly"));
    ensure(decided, || format!("no root.readonly decision: {create}"))?;
    Ok("errno EACCES; / mounted ro; audit: root.readonly set".into())
}

fn write_etc(lab: &Lab) -> Outcome {
    probe_errno(
        lab,
        "fs-etc",
        &["write", "/etc/passwd", "pwned::0:0::/:/bin/sh\n"],
        "EACCES",
    )
}

fn write_bin(lab: &Lab) -> Outcome {
    probe_errno(
        lab,
        "fs-bin",
        &["write", "/bin/busybox", "#!/bin/sh\n"],
        "EACCES",
    )
}

fn remount_root(lab: &Lab) -> Outcome {
    probe_errno(lab, "fs-remount", &["remount-root-rw"], "EPERM")
}

fn mount_tmpfs(lab: &Lab) -> Outcome {
    probe_errno(lab, "fs-tmpfs", &["mount-tmpfs", "/mnt"], "EPERM")
}

fn mount_proc(lab: &Lab) -> Outcome {
    probe_errno(lab, "fs-proc", &["mount-proc", "/mnt"], "EPERM")
}

fn chroot(lab: &Lab) -> Outcome {
    probe_errno(lab, "fs-chroot", &["chroot", "/tmp"], "EPERM")
}

fn mknod_block(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probes(
        "fs-mknod-b",
        &["mknod /tmp/sda b 8 0", "mknod /tmp/fifo p 0 0"],
    ))?;
    let l = ran.probe_lines(2)?;
    ensure(l[0].errno() == Some("EPERM"), || {
        format!("block node: {}", ran.summary())
    })?;
    ensure(l[1].is_ok(), || {
        format!("FIFO (control) failed: {}", ran.summary())
    })?;
    Ok("errno EPERM; mkfifo ok".into())
}

fn mknod_char(lab: &Lab) -> Outcome {
    probe_errno(
        lab,
        "fs-mknod-c",
        &["mknod", "/tmp/mem", "c", "1", "1"],
        "EPERM",
    )
}

fn io_err(what: &str, e: std::io::Error) -> Failed {
    Failed(format!("{what}: {e}"))
}

/// A host directory with a secret next to the bind source and symlinks pointing at it.
fn bind_escape(lab: &Lab) -> Outcome {
    let base = lab
        .dir()
        .join(format!("escape-{}", crate::ids::random_hex(4)));
    let data = base.join("data");
    fs::create_dir_all(&data).map_err(|e| io_err("mkdir", e))?;
    let marker = format!("gvh-secret-{}", crate::ids::random_hex(8));
    fs::write(base.join("secret"), &marker).map_err(|e| io_err("secret", e))?;
    symlink(base.join("secret"), data.join("abs")).map_err(|e| io_err("symlink", e))?;
    symlink("../secret", data.join("rel")).map_err(|e| io_err("symlink", e))?;
    symlink("/etc", data.join("etc")).map_err(|e| io_err("symlink", e))?;
    let mount = format!(
        "type=bind,src={},dst=/data,options=rbind:ro",
        data.display()
    );
    let ran = lab.run(
        Job::sh(
            "fs-escape",
            "for p in /data/abs /data/rel /data/../secret; do /bin/sandbox-probe read $p 64; done; cat /data/etc/passwd",
        )
        .flags(["--mount", &mount]),
    )?;
    let out = format!("{}{}", ran.out.stdout, ran.out.stderr);
    ensure(!out.contains(&marker), || {
        format!("host secret read: {}", ran.summary())
    })?;
    // The host's passwd has system users; the image's has only root and nobody.
    ensure(!out.contains("daemon:"), || {
        format!("host /etc/passwd read: {}", ran.summary())
    })?;
    let lines: Vec<ProbeLine> = ran
        .out
        .stdout
        .lines()
        .take(3)
        .map(ProbeLine::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| Failed(format!("{e}: {}", ran.summary())))?;
    ensure(lines.iter().all(|l| l.errno() == Some("ENOENT")), || {
        format!("expected ENOENT x3: {}", ran.summary())
    })?;
    Ok("abs, rel and .. symlinks: ENOENT x3; /data/etc is the image's /etc".into())
}

fn writable_bind(lab: &Lab) -> Outcome {
    let dir = lab.dir().join(format!("rw-{}", crate::ids::random_hex(4)));
    fs::create_dir_all(&dir).map_err(|e| io_err("mkdir", e))?;
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).map_err(|e| io_err("chmod", e))?;
    let mount = format!("type=bind,src={},dst=/data,options=rbind:rw", dir.display());
    let ran =
        lab.run(Job::probe("fs-rwbind", &["write", "/data/pwned"]).flags(["--mount", &mount]))?;
    let line = ran.line()?;
    ensure(line.errno() == Some("EROFS"), || {
        format!("expected EROFS: {}", ran.summary())
    })?;
    let left: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| io_err("readdir", e))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    ensure(left.is_empty(), || format!("host dir now holds {left:?}"))?;
    Ok("errno EROFS; host dir still empty".into())
}

fn host_disk(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probes("fs-disk", &["read /dev/vda", "read /dev/sda"]))?;
    let l = ran.probe_lines(2)?;
    ensure(l.iter().all(|l| l.errno() == Some("ENOENT")), || {
        format!("expected ENOENT x2: {}", ran.summary())
    })?;
    Ok("ENOENT x2".into())
}

fn fill_tmp(lab: &Lab) -> Outcome {
    const FILE: u64 = 600 << 20;
    let ran = lab.run(Job::probes(
        "fs-filltmp",
        &[
            &format!("fill /tmp/a {FILE}"),
            &format!("fill /tmp/b {FILE}"),
        ],
    ))?;
    let l = ran.probe_lines(2)?;
    ensure(l[0].is_ok(), || {
        format!("first 600Mi failed: {}", ran.summary())
    })?;
    ensure(l[1].errno() == Some("ENOSPC"), || {
        format!("expected ENOSPC: {}", ran.summary())
    })?;
    let second: u64 = l[1]
        .field("written")
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| Failed(format!("no written=: {}", ran.summary())))?;
    ensure(FILE + second <= 1 << 30, || {
        format!("{} bytes stored, more than the 1Gi cap", FILE + second)
    })?;
    Ok(format!(
        "errno ENOSPC after {} MiB in total",
        (FILE + second) >> 20
    ))
}

fn fsize(lab: &Lab) -> Outcome {
    // Sparse writes: the limit applies to the file's size, not to the bytes stored.
    let ran = lab.run(Job::probes(
        "fs-fsize",
        &[
            "write-at /tmp/below 1073741823",
            "write-at /tmp/past 1073741824",
        ],
    ))?;
    let l = ran.probe_lines(2)?;
    ensure(l[0].is_ok(), || {
        format!("write below the limit failed: {}", ran.summary())
    })?;
    ensure(
        l[1].errno() == Some("EFBIG") && l[1].field("sigxfsz") == Some("1"),
        || format!("expected EFBIG with SIGXFSZ: {}", ran.summary()),
    )?;
    Ok("errno EFBIG + SIGXFSZ at offset 1Gi; 1Gi-1 ok".into())
}

fn fds(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probe("fs-fds", &["fds", "100000"]))?;
    let line = ran.line()?;
    let opened: u64 = line
        .field("opened")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0);
    ensure(line.errno() == Some("EMFILE") && opened < 1024, || {
        format!("expected EMFILE below 1024 descriptors: {}", ran.summary())
    })?;
    Ok(format!(
        "errno {} after {opened} descriptors",
        errno_of(&line)
    ))
}
