//! Spec smuggling: what a caller can put into the OCI spec through `ctr run` options, or a
//! hand-made spec (`ctr run --config`), to loosen the sandbox. Each is rejected (Create fails
//! naming the rule, with a `create-rejected` audit line) or neutralised (the container runs,
//! and the inside shows the policy's values).

use std::fs;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use serde_json::{json, Value};

use super::lab::{Job, Lab, Ran};
use super::{ensure, Attack, Category, Failed, Outcome};
use crate::stack::Stack;

pub fn attacks() -> Vec<Attack> {
    let a = |name, expected, run| Attack {
        name,
        category: Category::Smuggling,
        expected,
        run,
    };
    vec![
        a("--privileged", "rejected: devices", privileged),
        a("--net-host", "rejected: namespaces (network)", net_host),
        a("--with-ns pid:/proc/1/ns/pid (host PID)", "rejected: namespaces (pid)", host_pid),
        a("--with-ns ipc:/proc/1/ns/ipc (host IPC)", "rejected: namespaces (ipc)", host_ipc),
        a("--mount /var/run/docker.sock", "rejected: mounts (**/docker.sock)", docker_sock),
        a("--mount containerd's own socket", "rejected: mounts (**/containerd.sock)", containerd_sock),
        a("--mount src=/ (host root)", "rejected: mounts (\"/\")", host_root_bind),
        a("--mount of a symlink to /etc", "rejected: mounts (resolved source /etc)", symlink_bind),
        a("--mount /run/containerd", "rejected: mounts (contains /run/containerd/**)", run_containerd_bind),
        a("ctr run --rootfs / (host root as rootfs)", "rejected: root (root.path)", rootfs_host),
        a("ctr run --rootfs <symlink to />", "rejected: root (root.path not allowed)", rootfs_symlink),
        a("--device /dev/vda", "rejected: devices", device),
        a(
            "dev.gvisor.flag.* annotations (network=host, net-raw=true)",
            "neutralised: stripped (audit), runsc --network=none --net-raw=false; only lo, raw socket EPERM",
            gvisor_flag_annotations,
        ),
        a("looser annotation gvisor-hardened.dev/memory=100Gi", "rejected: annotations", looser_memory),
        a("looser annotation gvisor-hardened.dev/network=host", "rejected: annotations", looser_network),
        a("unknown annotation gvisor-hardened.dev/privileged", "rejected: annotations", unknown_annotation),
        a("sysctl kernel.core_pattern (hand-made spec)", "rejected: sysctls", sysctl),
        a("OCI hooks that run on the host (hand-made spec)", "rejected: hooks; nothing ran on the host", hooks),
        a("device cgroup allow-all rule (hand-made spec)", "rejected: devices", device_cgroup_allow_all),
        a("cgroup v2 unified memory.max (hand-made spec)", "rejected: resources", unified_memory),
        a(
            "--seccomp-profile allowing everything",
            "neutralised: policy rules go first; ptrace, unshare(user), keyctl EPERM",
            seccomp_allow_all,
        ),
        a(
            "--cap-add SYS_ADMIN,NET_RAW,SETUID --allow-new-privs",
            "neutralised: no capability, no_new_privs 1, mount/raw socket EPERM",
            cap_add,
        ),
        a(
            "--memory-limit 100Gi --cpus 64",
            "neutralised: clamped to 2Gi, 2 CPUs, the policy's pids budget",
            huge_limits,
        ),
        a(
            "--uidmap 0:0:65536",
            "rejected: runc runtime options refused (by the shim, or by ctr 2.x)",
            uidmap,
        ),
        a(
            "--mount a host dir over /tmp",
            "neutralised: /tmp is the policy's tmpfs; host dir untouched",
            bind_over_tmp,
        ),
        a("--cgroup of an existing host cgroup", "rejected: resources (linux.cgroupsPath)", host_cgroup),
        a(
            "a cgroup that already exists at the container's own path",
            "rejected: the sandbox never joins a cgroup it did not create",
            existing_cgroup,
        ),
    ]
}

/// Checks that `ran` never started and was rejected by the policy with every `needle` in the
/// message, and that the audit log has the rejection.
fn rejected(lab: &Lab, ran: &Ran, needles: &[&str]) -> Outcome {
    ensure(!ran.started && ran.code() != 0, || {
        format!("not rejected: {}", ran.summary())
    })?;
    let err = &ran.out.stderr;
    let at = err
        .find("rejected by policy: ")
        .ok_or_else(|| Failed(format!("no policy rejection: {}", ran.summary())))?;
    let message = err[at..].trim().trim_end_matches(": failed precondition");
    for n in needles {
        ensure(message.contains(n), || {
            format!("rejection does not mention {n:?}: {message}")
        })?;
    }
    let audit = lab.audit_event(&ran.id, "create-rejected")?;
    ensure(
        audit["error"]
            .as_str()
            .is_some_and(|e| e.contains(needles[0])),
        || format!("audit rejection line: {audit}"),
    )?;
    let short: String = message.chars().take(180).collect();
    Ok(short)
}

fn run_flags(lab: &Lab, prefix: &'static str, flags: &[&str]) -> Result<Ran, Failed> {
    lab.run(
        Job::probe(prefix, &["ids"])
            .flags(flags.iter().copied())
            .ungated(),
    )
}

fn privileged(lab: &Lab) -> Outcome {
    let ran = run_flags(lab, "sm-priv", &["--privileged"])?;
    rejected(
        lab,
        &ran,
        &["devices: linux.devices[", "a privileged container"],
    )
}

fn net_host(lab: &Lab) -> Outcome {
    let ran = run_flags(lab, "sm-nethost", &["--net-host"])?;
    rejected(lab, &ran, &["namespaces: linux.namespaces[network]"])
}

fn host_pid(lab: &Lab) -> Outcome {
    let ran = run_flags(lab, "sm-hostpid", &["--with-ns", "pid:/proc/1/ns/pid"])?;
    rejected(lab, &ran, &["namespaces: linux.namespaces[pid]"])
}

fn host_ipc(lab: &Lab) -> Outcome {
    let ran = run_flags(lab, "sm-hostipc", &["--with-ns", "ipc:/proc/1/ns/ipc"])?;
    rejected(lab, &ran, &["namespaces: linux.namespaces[ipc]"])
}

fn bind(src: &str, dst: &str) -> String {
    format!("type=bind,src={src},dst={dst},options=rbind:ro")
}

fn docker_sock(lab: &Lab) -> Outcome {
    let m = bind("/var/run/docker.sock", "/var/run/docker.sock");
    let ran = run_flags(lab, "sm-docker", &["--mount", &m])?;
    rejected(
        lab,
        &ran,
        &["mounts: mounts[/var/run/docker.sock]", "**/docker.sock"],
    )
}

fn containerd_sock(lab: &Lab) -> Outcome {
    let m = bind(&lab.c.address().to_string_lossy(), "/run/containerd.sock");
    let ran = run_flags(lab, "sm-ctrdsock", &["--mount", &m])?;
    rejected(
        lab,
        &ran,
        &["mounts: mounts[/run/containerd.sock]", "**/containerd.sock"],
    )
}

fn host_root_bind(lab: &Lab) -> Outcome {
    let ran = run_flags(lab, "sm-hostroot", &["--mount", &bind("/", "/host")])?;
    rejected(lab, &ran, &["mounts: mounts[/host]", "\"/\""])
}

fn symlink_bind(lab: &Lab) -> Outcome {
    let link = lab
        .dir()
        .join(format!("etc-link-{}", crate::ids::random_hex(4)));
    symlink("/etc", &link).map_err(|e| Failed(format!("symlink: {e}")))?;
    let m = bind(&link.to_string_lossy(), "/host-etc");
    let ran = run_flags(lab, "sm-symlink", &["--mount", &m])?;
    rejected(
        lab,
        &ran,
        &["mounts: mounts[/host-etc]", "resolved source /etc"],
    )
}

fn run_containerd_bind(lab: &Lab) -> Outcome {
    let ran = run_flags(
        lab,
        "sm-runctrd",
        &["--mount", &bind("/run/containerd", "/x")],
    )?;
    rejected(lab, &ran, &["mounts: mounts[/x]", "/run/containerd/**"])
}

fn rootfs_host(lab: &Lab) -> Outcome {
    let ran = lab.run(
        Job::cmd("sm-rootfs", ["/bin/cat", "/etc/passwd"])
            .rootfs("/")
            .ungated(),
    )?;
    rejected(lab, &ran, &["root: root.path", "\"/\""])
}

fn rootfs_symlink(lab: &Lab) -> Outcome {
    let link = lab
        .dir()
        .join(format!("root-link-{}", crate::ids::random_hex(4)));
    symlink("/", &link).map_err(|e| Failed(format!("symlink: {e}")))?;
    let ran = lab.run(
        Job::cmd("sm-rootlink", ["/bin/cat", "/etc/passwd"])
            .rootfs(&link.to_string_lossy())
            .ungated(),
    )?;
    rejected(lab, &ran, &["root: root.path", "root.allowed_host_paths"])
}

fn device(lab: &Lab) -> Outcome {
    let ran = run_flags(lab, "sm-device", &["--device", "/dev/vda"])?;
    rejected(lab, &ran, &["devices: linux.devices[/dev/vda]"])
}

fn gvisor_flag_annotations(lab: &Lab) -> Outcome {
    let ran = lab.run(Job::probes("sm-gvflags", &["ifaces", "socket-raw"]).flags([
        "--annotation",
        "dev.gvisor.flag.network=host",
        "--annotation",
        "dev.gvisor.flag.net-raw=true",
    ]))?;
    let l = ran.probe_lines(2)?;
    ensure(l[0].field("ifaces") == Some("lo"), || {
        format!("interfaces: {}", ran.summary())
    })?;
    ensure(l[1].errno() == Some("EPERM"), || {
        format!("raw socket: {}", ran.summary())
    })?;
    let create = lab.audit_event(&ran.id, "create")?;
    let removed = |key: &str| {
        create["decisions"].as_array().is_some_and(|d| {
            d.iter().any(|d| {
                d["action"] == "removed" && d["field"].as_str().is_some_and(|f| f.contains(key))
            })
        })
    };
    ensure(
        removed("dev.gvisor.flag.network") && removed("dev.gvisor.flag.net-raw"),
        || format!("no removal decisions: {create}"),
    )?;
    let args: Vec<String> = create["runsc_args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    ensure(
        args.iter().any(|a| a == "--network=none")
            && args.iter().any(|a| a == "--net-raw=false")
            && !args.iter().any(|a| a.contains("allow-flag-override")),
        || format!("runsc arguments: {args:?}"),
    )?;
    Ok("both annotations removed (audit); runsc --network=none --net-raw=false; ifaces=lo; raw socket EPERM".into())
}

fn looser_memory(lab: &Lab) -> Outcome {
    let ran = run_flags(
        lab,
        "sm-annmem",
        &["--annotation", "gvisor-hardened.dev/memory=100Gi"],
    )?;
    rejected(lab, &ran, &["annotations:", "gvisor-hardened.dev/memory"])
}

fn looser_network(lab: &Lab) -> Outcome {
    let ran = run_flags(
        lab,
        "sm-annnet",
        &["--annotation", "gvisor-hardened.dev/network=host"],
    )?;
    rejected(lab, &ran, &["annotations:", "gvisor-hardened.dev/network"])
}

fn unknown_annotation(lab: &Lab) -> Outcome {
    let ran = run_flags(
        lab,
        "sm-annunknown",
        &["--annotation", "gvisor-hardened.dev/privileged=true"],
    )?;
    rejected(
        lab,
        &ran,
        &["annotations:", "gvisor-hardened.dev/privileged"],
    )
}

fn config_run(
    lab: &Lab,
    prefix: &'static str,
    edit: impl FnOnce(&mut Value),
) -> Result<Ran, Failed> {
    let mut spec = lab.base_spec(prefix);
    edit(&mut spec);
    lab.run_config(prefix, &spec)
}

fn sysctl(lab: &Lab) -> Outcome {
    let ran = config_run(lab, "sm-sysctl", |s| {
        s["linux"]["sysctl"] = json!({"kernel.core_pattern": "|/tmp/gvh-pwned"});
    })?;
    rejected(lab, &ran, &["sysctls:", "kernel.core_pattern"])
}

fn hooks(lab: &Lab) -> Outcome {
    let marker: PathBuf = lab
        .dir()
        .join(format!("hook-ran-{}", crate::ids::random_hex(4)));
    let touch =
        json!([{"path": "/bin/sh", "args": ["sh", "-c", format!("touch {}", marker.display())]}]);
    let ran = config_run(lab, "sm-hooks", |s| {
        s["hooks"] = json!({"prestart": touch, "createRuntime": touch, "poststop": touch});
    })?;
    let seen = rejected(lab, &ran, &["hooks:"])?;
    ensure(!marker.exists(), || {
        format!("a hook ran on the host: {}", marker.display())
    })?;
    Ok(format!("{seen}; no hook ran"))
}

fn device_cgroup_allow_all(lab: &Lab) -> Outcome {
    let ran = config_run(lab, "sm-devcg", |s| {
        s["linux"]["resources"] = json!({"devices": [{"allow": true, "access": "rwm"}]});
    })?;
    rejected(lab, &ran, &["devices:"])
}

fn unified_memory(lab: &Lab) -> Outcome {
    let ran = config_run(lab, "sm-unified", |s| {
        s["linux"]["resources"] = json!({"unified": {"memory.max": "max"}});
    })?;
    rejected(lab, &ran, &["resources:", "memory.max"])
}

fn seccomp_allow_all(lab: &Lab) -> Outcome {
    let profile = lab.dir().join("allow-all-seccomp.json");
    let text = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64"],
        "syscalls": [{"names": ["ptrace", "unshare", "keyctl", "clone"], "action": "SCMP_ACT_ALLOW"}]
    });
    fs::write(&profile, text.to_string()).map_err(|e| Failed(format!("profile: {e}")))?;
    let ran = lab.run(
        Job::probes(
            "sm-seccomp",
            &["ptrace-attach child", "unshare user", "keyctl"],
        )
        .flags(["--seccomp", "--seccomp-profile", &profile.to_string_lossy()]),
    )?;
    let l = ran.probe_lines(3)?;
    ensure(l.iter().all(|l| l.errno() == Some("EPERM")), || {
        format!("expected EPERM x3: {}", ran.summary())
    })?;
    Ok("ptrace, unshare(user), keyctl: EPERM x3 despite the spec's allow rules".into())
}

fn cap_add(lab: &Lab) -> Outcome {
    let ran = lab.run(
        Job::probes(
            "sm-capadd",
            &["caps", "nnp", "mount-tmpfs /mnt", "socket-raw"],
        )
        .flags([
            "--cap-add",
            "CAP_SYS_ADMIN",
            "--cap-add",
            "CAP_NET_RAW",
            "--cap-add",
            "CAP_SETUID",
            "--allow-new-privs",
        ]),
    )?;
    let l = ran.probe_lines(4)?;
    ensure(
        l[0].field("CapEff") == Some("0000000000000000")
            && l[0].field("CapBnd") == Some("0000000000000000"),
        || format!("capabilities: {}", ran.summary()),
    )?;
    ensure(l[1].field("nnp") == Some("1"), || {
        format!("no_new_privs: {}", ran.summary())
    })?;
    ensure(
        l[2].errno() == Some("EPERM") && l[3].errno() == Some("EPERM"),
        || format!("mount / raw socket: {}", ran.summary()),
    )?;
    Ok("CapEff=CapBnd=0; no_new_privs=1; mount EPERM; raw socket EPERM".into())
}

fn cgroup_value(lab: &Lab, id: &str, file: &str) -> Result<String, Failed> {
    let dir = crate::inspect::cgroup_dirs(&format!("{}/{id}", lab.c.namespace()))
        .into_iter()
        .find(|d| d.join(file).is_file())
        .ok_or_else(|| Failed(format!("no cgroup of {id} has {file}")))?;
    fs::read_to_string(dir.join(file))
        .map(|s| s.trim().to_string())
        .map_err(|e| Failed(format!("{file}: {e}")))
}

fn huge_limits(lab: &Lab) -> Outcome {
    let id = lab.start_detached(Job::probe("sm-limits", &["sleep", "120"]).flags([
        "--memory-limit",
        "107374182400",
        "--cpus",
        "64",
    ]))?;
    let result = (|| {
        let mem = cgroup_value(lab, &id, "memory.limit_in_bytes")?;
        let quota = cgroup_value(lab, &id, "cpu.cfs_quota_us")?;
        let pids = cgroup_value(lab, &id, "pids.max")?;
        let want_pids = Stack::selected().default_pids_limit().to_string();
        ensure(
            mem == "2147483648" && quota == "200000" && pids == want_pids,
            || format!("cgroup limits: memory {mem}, cpu quota {quota}, pids {pids}"),
        )?;
        let meminfo = lab.exec(&id, &[], &["/bin/sh", "-c", "grep MemTotal /proc/meminfo"])?;
        ensure(meminfo.stdout.contains("2097152 kB"), || {
            format!("meminfo inside: {}", meminfo.stdout.trim())
        })?;
        Ok(format!(
            "memory.limit 2Gi (MemTotal 2097152 kB inside), cpu quota 200000/100000, pids.max {want_pids} ({})",
            Stack::selected().default_platform()
        ))
    })();
    lab.remove(&id)?;
    result
}

fn uidmap(lab: &Lab) -> Outcome {
    let ran = run_flags(
        lab,
        "sm-uidmap",
        &["--uidmap", "0:0:65536", "--gidmap", "0:0:65536"],
    )?;
    ensure(!ran.started && ran.code() != 0, || {
        format!("not rejected: {}", ran.summary())
    })?;
    let err = ran.out.stderr.trim();
    // ctr 1.6 sends runc's options with the mappings and the shim refuses them; ctr 2.x tries
    // to add the mappings to runc's options, finds ours (the policy's ConfigPath) and refuses
    // before anything reaches containerd. Either way no container exists.
    let shim_refused = err.contains("runtime options") && err.contains("not understood");
    let ctr_refused = err.contains("can't unmarshal type \"runtimeoptions.v1.Options\"");
    ensure(shim_refused || ctr_refused, || {
        format!("unexpected error: {}", ran.summary())
    })?;
    let short = err
        .split("failed to create shim task: ")
        .nth(1)
        .unwrap_or(err)
        .trim_end_matches(": invalid argument");
    Ok(short.chars().take(180).collect())
}

fn bind_over_tmp(lab: &Lab) -> Outcome {
    let dir = lab
        .dir()
        .join(format!("tmp-bind-{}", crate::ids::random_hex(4)));
    fs::create_dir_all(&dir).map_err(|e| Failed(format!("mkdir: {e}")))?;
    let m = format!("type=bind,src={},dst=/tmp,options=rbind:rw", dir.display());
    let ran = lab.run(
        Job::probes("sm-tmpbind", &["statfs /tmp", "write /tmp/planted"]).flags(["--mount", &m]),
    )?;
    let l = ran.probe_lines(2)?;
    ensure(
        l[0].field("fstype") == Some("tmpfs") && l[1].is_ok(),
        || format!("/tmp inside: {}", ran.summary()),
    )?;
    let left: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| Failed(format!("readdir: {e}")))?
        .flatten()
        .map(|e| e.file_name())
        .collect();
    ensure(left.is_empty(), || format!("host dir now holds {left:?}"))?;
    Ok("/tmp is tmpfs inside (write lands there); host dir untouched".into())
}

/// Makes cgroup directory `rel` in the memory and pids hierarchies; returns them.
fn make_cgroups(rel: &str) -> Result<Vec<PathBuf>, Failed> {
    let mut made = Vec::new();
    for controller in ["memory", "pids"] {
        let dir = PathBuf::from("/sys/fs/cgroup").join(controller).join(rel);
        fs::create_dir_all(&dir).map_err(|e| Failed(format!("{}: {e}", dir.display())))?;
        made.push(dir);
    }
    Ok(made)
}

fn remove_cgroups(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = fs::remove_dir(d);
    }
}

fn host_cgroup(lab: &Lab) -> Outcome {
    let victim = format!("gvh-victim-{}", crate::ids::random_hex(4));
    let dirs = make_cgroups(&victim)?;
    let result = (|| {
        let ran = run_flags(lab, "sm-cgroup", &["--cgroup", &format!("/{victim}")])?;
        let seen = rejected(lab, &ran, &["resources: linux.cgroupsPath", "container id"])?;
        for d in &dirs {
            let procs = fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
            ensure(procs.trim().is_empty(), || {
                format!("processes joined {}: {procs}", d.display())
            })?;
        }
        Ok(seen)
    })();
    remove_cgroups(&dirs);
    result
}

fn existing_cgroup(lab: &Lab) -> Outcome {
    let id = lab.id("sm-cgexists");
    // ctr's cgroupsPath is /<namespace>/<id>: a directory there before Create is a cgroup the
    // sandbox did not make.
    let dirs = make_cgroups(&format!("{}/{id}", lab.c.namespace()))?;
    let result = (|| match lab
        .start_detached(Job::probe("sm-cgexists", &["sleep", "120"]).with_id(&id))
    {
        Err(e) => {
            let text = e.to_string();
            ensure(text.contains("cgroup"), || {
                format!("failed, but not over the cgroup: {text}")
            })?;
            let short: String = text.chars().take(180).collect();
            Ok(format!("rejected: {short}"))
        }
        Ok(_) => {
            let mem = fs::read_to_string(dirs[0].join("memory.limit_in_bytes")).unwrap_or_default();
            let pids = fs::read_to_string(dirs[1].join("pids.max")).unwrap_or_default();
            let inside = fs::read_to_string(dirs[1].join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .count();
            lab.remove(&id)?;
            Err(Failed(format!(
                "the sandbox ran in the pre-existing cgroup ({inside} host tasks in it) with memory.limit_in_bytes {} and pids.max {}, not the policy's 2Gi / {} (shim: refuse a cgroup that exists before runsc create)",
                mem.trim(),
                pids.trim(),
                Stack::selected().default_pids_limit()
            )))
        }
    })();
    remove_cgroups(&dirs);
    result
}
