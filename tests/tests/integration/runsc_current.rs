//! The current runsc (`hack/deps.sh --print`, named in each policy's `[runsc] path`) under the
//! shim, against Debian's runsc 20221219 where they differ: the platform the shim picks, what a
//! read-only root and the directfs setting mean for the container's files, and GNU `ls -la` in
//! a bind-mounted workspace (`Invalid argument` on 20221219). The defaults these back are
//! explained in policy-injector/README.md ("runsc platform, directfs and overlay").

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use gvisor_hardened_tests::direct::make_busybox_rootfs;
use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::stack::Stack;
use gvisor_hardened_tests::*;

fn setup() -> (Containerd, TestImage) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    (c, image)
}

fn current_runsc() -> PathBuf {
    Stack::Current.binary("runsc").unwrap()
}

fn old_runsc() -> PathBuf {
    Stack::Compat.binary("runsc").unwrap()
}

/// A policy for `runsc` with `runsc_keys` in its `[runsc]` table and `more` after it.
fn policy(c: &Containerd, runsc: &Path, runsc_keys: &str, more: &str) -> TestPolicy {
    TestPolicy::builder(c, &unique_id("runsc-current"))
        .extra(&format!(
            "[runsc]\npath = {:?}\n{runsc_keys}\n{more}",
            runsc.display().to_string()
        ))
        .write()
        .unwrap()
}

/// runsc's global arguments in the `create` audit record of `id`.
fn runsc_args(p: &TestPolicy, id: &str) -> Vec<String> {
    let create = p
        .audit_lines()
        .into_iter()
        .find(|l| l["container_id"] == id && l["event"] == "create")
        .unwrap_or_else(|| panic!("no create record for {id}"));
    create["runsc_args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// A world-writable workspace directory holding `names`.
fn workspace(c: &Containerd, names: &[&str]) -> PathBuf {
    let dir = c.dir().join(unique_id("ws"));
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    for n in names {
        fs::write(dir.join(n), "x\n").unwrap();
    }
    dir
}

fn workspace_mount(dir: &Path) -> String {
    format!("type=bind,src={},dst=/work,options=rbind:rw", dir.display())
}

/// With no `[runsc] platform`, the shim names systrap where runsc has it (the current runsc) and
/// ptrace where it does not (20221219); a policy's ptrace is kept. Each runs.
#[test]
fn the_platform_is_systrap_where_runsc_has_it_else_ptrace() {
    let (c, image) = setup();
    for (runsc, keys, want) in [
        (current_runsc(), "", "--platform=systrap"),
        (
            current_runsc(),
            "platform = \"ptrace\"",
            "--platform=ptrace",
        ),
        (old_runsc(), "", "--platform=ptrace"),
    ] {
        let p = policy(&c, &runsc, keys, "");
        let id = unique_id("platform");
        let out = c
            .run_output(
                &Run::new(image.reference(), &id)
                    .runtime(p.runtime())
                    .probe(["ids"]),
            )
            .unwrap();
        assert_eq!(out.code(), 0, "{}: {out}", runsc.display());
        let args = runsc_args(&p, &id);
        assert!(args.contains(&want.to_string()), "{want} not in {args:?}");
        assert_nothing_left(&c, &id, &p.runtime());
    }
    assert_clean_shutdown(c);
}

/// The root is mounted read-only and without an overlay whatever `[runsc] overlay` says (runsc
/// skips the rootfs overlay for a read-only root), and a file the workload writes into the
/// workspace belongs to the container's user on the host, with directfs on and off alike.
#[test]
fn a_read_only_root_has_no_overlay_and_workspace_files_keep_their_owner_under_directfs() {
    let (c, image) = setup();
    for (keys, more) in [
        ("", "[runsc.extra_flags]\ndirectfs = true"),
        ("", "[runsc.extra_flags]\ndirectfs = false"),
        ("overlay = \"root:self\"", ""),
    ] {
        let ws = workspace(&c, &[]);
        let writable = format!(
            "[mounts]\nwritable_sources = [{:?}]\n",
            format!("{}/**", ws.display())
        );
        let p = policy(&c, &current_runsc(), keys, &format!("{more}\n{writable}"));
        let id = unique_id("rootfs");
        let out = c
            .run_output(
                &Run::new(image.reference(), &id)
                    .runtime(p.runtime())
                    .flags(["--mount", &workspace_mount(&ws)])
                    .sh("grep ' / ' /proc/mounts; echo made > /work/made && touch /srv/x 2>&1; true"),
            )
            .unwrap();
        assert_eq!(out.code(), 0, "{keys} {more}: {out}");
        let root_line = out.stdout.lines().next().unwrap_or_default();
        let fields: Vec<&str> = root_line.split_whitespace().collect();
        assert!(
            fields.len() >= 4 && fields[2] != "overlay" && fields[3].split(',').any(|o| o == "ro"),
            "{keys} {more}: root mount {root_line:?}"
        );
        assert!(out.stdout.contains("Read-only file system"), "{out}");
        let m = fs::metadata(ws.join("made")).unwrap();
        assert_eq!((m.uid(), m.gid()), (65534, 65534), "{keys} {more}");
        let args = runsc_args(&p, &id);
        let directfs: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("--directfs"))
            .collect();
        // Unset: the shim's default, off.
        let want = if more.contains("true") {
            vec!["--directfs=true".to_string()]
        } else {
            vec!["--directfs=false".to_string()]
        };
        assert_eq!(directfs, want.iter().collect::<Vec<_>>(), "{args:?}");
        assert_nothing_left(&c, &id, &p.runtime());
    }
    assert_clean_shutdown(c);
}

/// A root filesystem with GNU `ls` (the host's /bin/ls and the libraries it links) beside
/// busybox: coreutils' `ls -l` calls statx with AT_NO_AUTOMOUNT, which 20221219 refuses.
fn gnu_ls_rootfs(c: &Containerd) -> PathBuf {
    let root = c.dir().join("gnu-ls-rootfs");
    make_busybox_rootfs(&root).unwrap();
    fs::create_dir_all(root.join("work")).unwrap();
    let ldd = Command::new("ldd").arg("/bin/ls").output().unwrap();
    let mut files = vec![PathBuf::from("/bin/ls")];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let target = line.split_once("=>").map_or(line, |(_, r)| r).trim();
        if let Some(p) = target
            .split_whitespace()
            .next()
            .filter(|p| p.starts_with('/'))
        {
            files.push(PathBuf::from(p));
        }
    }
    for f in files {
        let dest = if f == Path::new("/bin/ls") {
            root.join("bin/gnu-ls")
        } else {
            root.join(f.strip_prefix("/").unwrap())
        };
        fs::create_dir_all(dest.parent().unwrap()).unwrap();
        fs::copy(&f, &dest).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    }
    root
}

/// GNU `ls -la` of a bind-mounted workspace lists it under the current runsc (directfs on and
/// off); under 20221219 every entry fails with "Invalid argument" (its statx refuses
/// AT_NO_AUTOMOUNT, which coreutils 9 passes). If the second half starts failing, Debian's runsc
/// was fixed.
#[test]
fn gnu_ls_la_of_a_bind_mounted_workspace_works_on_the_current_runsc() {
    let (c, _image) = setup();
    let rootfs = gnu_ls_rootfs(&c);
    let ws = workspace(&c, &["README.md", "main.rs"]);
    let allow = format!(
        "[root]\nallowed_host_paths = [{:?}]\n",
        rootfs.display().to_string()
    );
    for (runsc, more, works) in [
        (
            current_runsc(),
            "[runsc.extra_flags]\ndirectfs = true",
            true,
        ),
        (
            current_runsc(),
            "[runsc.extra_flags]\ndirectfs = false",
            true,
        ),
        (old_runsc(), "", false),
    ] {
        let p = policy(&c, &runsc, "", &format!("{more}\n{allow}"));
        let id = unique_id("gnu-ls");
        let out = c
            .run_output(
                &Run::new(rootfs.display().to_string(), &id)
                    .runtime(p.runtime())
                    .flags(["--rootfs", "--mount", &workspace_mount(&ws)])
                    .cmd(["/bin/gnu-ls", "-la", "/work"]),
            )
            .unwrap();
        if works {
            assert_eq!(out.code(), 0, "{}: {out}", runsc.display());
            for name in ["README.md", "main.rs", ".."] {
                assert!(out.stdout.contains(name), "{name} missing: {out}");
            }
        } else {
            assert_ne!(out.code(), 0, "{out}");
            assert!(
                format!("{}{}", out.stdout, out.stderr).contains("Invalid argument"),
                "{out}"
            );
        }
        assert_nothing_left(&c, &id, &p.runtime());
    }
    assert_clean_shutdown(c);
}

/// `Uid:` (real) and `CapEff:` of the sentry (`runsc-sandbox`) of container `id`.
fn sentry_credentials(id: &str) -> (String, String) {
    let sentry = gvisor_hardened_tests::inspect::processes()
        .into_iter()
        .find(|p| p.cmdline.starts_with("runsc-sandbox") && p.cmdline.contains(id))
        .unwrap_or_else(|| panic!("no runsc-sandbox process for {id}"));
    let status = fs::read_to_string(format!("/proc/{}/status", sentry.pid)).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    (field("Uid:"), field("CapEff:"))
}

/// Why directfs is off unless a policy turns it on: with it, the sentry runs as uid 0 with
/// CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_FSETID (and CAP_SYS_PTRACE
/// for the platform) over a full identity uid map; without it, as uid 65534 with no capability.
/// A spec cannot switch it on: `dev.gvisor.flag.directfs` and the config bundle annotation
/// that sets it are stripped.
#[test]
fn the_sentry_runs_unprivileged_unless_the_policy_turns_directfs_on() {
    let (c, image) = setup();
    for (more, annotations, uid, caps) in [
        ("", vec![], "65534", "0000000000000000"),
        (
            "",
            vec![
                "dev.gvisor.flag.directfs=true",
                "dev.gvisor.bundle.experimental-high-performance=true",
            ],
            "65534",
            "0000000000000000",
        ),
        (
            "[runsc.extra_flags]\ndirectfs = true",
            vec![],
            "0",
            "000000000008001f",
        ),
    ] {
        let p = policy(&c, &current_runsc(), "", more);
        let id = unique_id("sentry-creds");
        let mut flags = Vec::new();
        for a in &annotations {
            flags.extend(["--annotation", a]);
        }
        c.ctr()
            .args(
                Run::new(image.reference(), &id)
                    .runtime(p.runtime())
                    .flags(flags)
                    .detach()
                    .cmd(["/bin/sleep", "600"])
                    .ctr_args_for(&c),
            )
            .checked()
            .unwrap();
        let (got_uid, got_caps) = sentry_credentials(&id);
        gvisor_hardened_tests::fault::kill_and_remove(&c, &id, std::time::Duration::from_secs(30))
            .unwrap();
        assert_eq!(
            (got_uid.as_str(), got_caps.as_str()),
            (uid, caps),
            "{more} {annotations:?}"
        );
        assert_nothing_left(&c, &id, &p.runtime());
    }
    assert_clean_shutdown(c);
}
