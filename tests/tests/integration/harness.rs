//! Self-tests of the harness with real parts: a private containerd 1.6, the local test image,
//! the sandbox probe, and runsc driven by containerd's Go runc shim (the baseline runtime).

use std::fs;
use std::os::unix::fs::PermissionsExt;

use gvisor_hardened_tests::fault::remove_stopped;
use gvisor_hardened_tests::*;

fn start() -> Containerd {
    Containerd::start(ContainerdOptions::default()).expect("private containerd starts")
}

fn start_with_image() -> (Containerd, TestImage) {
    let c = start();
    let image = TestImage::ensure().expect("test image builds");
    c.import(&image).expect("test image imports");
    (c, image)
}

#[test]
fn private_containerd_answers_and_leaves_nothing_after_shutdown() {
    let c = start();
    let out = c.ctr().arg("version").checked().unwrap();
    assert!(out.stdout.contains("Server:"), "{out}");
    assert!(c.dir().starts_with(std::env::temp_dir()));
    assert!(c.namespace().starts_with("gvh-"));
    assert_clean_shutdown(c);
}

#[test]
fn overlayfs_is_used_whenever_containerd_could_load_it() {
    let c = start();
    let plugins = c.ctr().args(["plugins", "ls"]).checked().unwrap();
    let overlay_ok = plugins
        .stdout
        .lines()
        .any(|l| l.contains(" overlayfs ") && l.trim_end().ends_with("ok"));
    let expected = if overlay_ok { "overlayfs" } else { "native" };
    assert_eq!(c.snapshotter(), expected, "{}", plugins.stdout);
    assert_eq!(c.snapshotter_fallback().is_some(), !overlay_ok);
    assert_clean_shutdown(c);
}

#[test]
fn the_test_image_imports_under_its_reference() {
    let (c, image) = start_with_image();
    let images = c.ctr().args(["images", "ls", "-q"]).checked().unwrap();
    assert!(
        images.stdout.lines().any(|l| l == image.reference()),
        "{images}"
    );
    let check = c.ctr().args(["images", "check"]).checked().unwrap();
    let line = check
        .stdout
        .lines()
        .find(|l| l.starts_with(image.reference()))
        .unwrap_or_else(|| panic!("{check}"));
    assert!(line.contains("complete"), "{line}");
    assert_clean_shutdown(c);
}

#[test]
fn the_probe_runs_inside_gvisor_under_the_baseline_runtime() {
    let (c, image) = start_with_image();
    let id = unique_id("baseline-dmesg");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .sh("dmesg; /bin/sandbox-probe uname");
    let out = c.run_output(&run).unwrap().checked().unwrap();
    assert!(
        out.stdout.contains("gVisor"),
        "not gVisor's kernel log: {out}"
    );
    let uname = ProbeLine::parse_last(&out.stdout).unwrap();
    let host_release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(uname.field("release"), Some(host_release.trim()), "{out}");
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

#[test]
fn exit_codes_pass_through_the_baseline_runtime() {
    let (c, image) = start_with_image();
    for (args, code) in [(vec!["exit", "3"], 3), (vec!["exit", "0"], 0)] {
        let id = unique_id("baseline-exit");
        let out = c
            .run_output(
                &Run::new(image.reference(), &id)
                    .runtime(Runtime::Baseline)
                    .probe(args),
            )
            .unwrap();
        assert_eq!(out.code(), code, "{out}");
        assert_nothing_left(&c, &id, &Runtime::Baseline);
    }
    let id = unique_id("baseline-kill");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(Runtime::Baseline)
                .sh("kill -9 $$"),
        )
        .unwrap();
    assert_eq!(out.code(), 137, "{out}");
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

#[test]
fn the_probe_reports_from_inside_a_plain_runc_container_on_the_host_kernel() {
    let (c, image) = start_with_image();
    let id = unique_id("runc-uname");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(Runtime::Runc)
                .probe(["uname"]),
        )
        .unwrap()
        .checked()
        .unwrap();
    let uname = ProbeLine::parse_last(&out.stdout).unwrap();
    let host_release = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(uname.field("release"), Some(host_release.trim()), "{out}");
    assert_nothing_left(&c, &id, &Runtime::Runc);
    assert_clean_shutdown(c);
}

#[test]
fn a_task_left_running_is_seen_by_the_leak_checks_and_removed_at_shutdown() {
    let (c, image) = start_with_image();
    let id = unique_id("baseline-left");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .detach()
        .probe(["sleep", "600"]);
    c.run_output(&run).unwrap().checked().unwrap();

    let leaks = container_leaks(&c, &id, &Runtime::Baseline);
    assert!(
        !leaks.processes.is_empty(),
        "no sandbox process seen: {leaks}"
    );
    assert!(!leaks.mounts.is_empty(), "no rootfs mount seen: {leaks}");
    assert!(!leaks.cgroups.is_empty(), "no cgroup seen: {leaks}");
    assert!(
        !leaks.runtime_state.is_empty(),
        "no runsc state seen: {leaks}"
    );
    assert!(
        leaks.files.contains(&c.shim_socket(&id)),
        "shim socket not where expected: {leaks}"
    );

    let dir = c.dir().to_path_buf();
    let report = c.shutdown();
    assert_eq!(report.tasks_left, vec![id.clone()], "{report}");
    assert!(!report.is_clean());
    assert!(dir_leaks(&dir).is_empty(), "{}", dir_leaks(&dir));
    assert!(inspect::processes_mentioning(&id).is_empty());
    assert!(inspect::cgroups_named(&id).is_empty());
    assert!(inspect::mounts_mentioning(&id).is_empty());
}

/// Same container id in two private containerds at once: their namespaces (and so cgroup
/// paths and runtime roots) differ. runc allows this; runsc does not (its control socket is
/// named after the container id host-wide), hence `unique_id` for every sandbox.
#[test]
fn two_private_containerds_run_the_same_container_id_side_by_side() {
    let (a, image) = start_with_image();
    let (b, _) = start_with_image();
    assert_ne!(a.namespace(), b.namespace());
    let id = unique_id("same");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Runc)
        .detach()
        .probe(["sleep", "600"]);
    a.run_output(&run).unwrap().checked().unwrap();
    b.run_output(&run).unwrap().checked().unwrap();
    for c in [&a, &b] {
        let tasks = c.ctr().args(["task", "ls"]).checked().unwrap();
        assert!(tasks.stdout.contains("RUNNING"), "{tasks}");
        c.ctr()
            .args(["task", "kill", "-s", "SIGKILL", &id])
            .checked()
            .unwrap();
    }
    for c in [&a, &b] {
        remove_stopped(c, &id, std::time::Duration::from_secs(30)).unwrap();
    }
    // Only now: the id-based leak checks see both containers.
    assert_nothing_left(&a, &id, &Runtime::Runc);
    assert_nothing_left(&b, &id, &Runtime::Runc);
    assert_clean_shutdown(a);
    assert_clean_shutdown(b);
}

#[test]
fn the_hardened_runtime_resolves_to_the_shim_installed_in_the_private_bin() {
    // A stand-in for the real shim: records how containerd started it, then fails the start.
    let fixture = std::env::temp_dir().join(format!("gvh-fake-shim-{}", unique_id("x")));
    fs::create_dir(&fixture).unwrap();
    let fake = fixture.join("shim");
    let record = fixture.join("argv");
    fs::write(
        &fake,
        format!("#!/bin/sh\necho \"$@\" >> {}\nexit 1\n", record.display()),
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();

    let c = Containerd::start(ContainerdOptions::with_shim(&fake)).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let id = unique_id("fake-shim");
    let out = c
        .run_output(&Run::new(image.reference(), &id).probe(["nnp"]))
        .unwrap();
    assert!(!out.success(), "{out}");
    let argv = fs::read_to_string(&record).unwrap_or_default();
    fs::remove_dir_all(&fixture).unwrap();
    assert!(
        argv.contains(&format!("-namespace {}", c.namespace())),
        "{argv}"
    );
    assert!(
        argv.contains(&format!("-address {}", c.address().display())),
        "{argv}"
    );
    assert!(argv.contains(&format!("-id {id}")), "{argv}");
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}

/// The setuid-root and file-capability copies of the probe survive the image build and the
/// import: under plain runc with new privileges allowed, they really elevate a uid-65534
/// process (so the attack suite can show that the hardened runtime stops them).
#[test]
fn the_setuid_and_file_capability_probes_elevate_under_plain_runc() {
    let (c, image) = start_with_image();
    let id = unique_id("runc-suid");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Runc)
        .flags(["--allow-new-privs"])
        .sh(format!(
            "{} as 65534 65534 ids; {} as 65534 65534 caps",
            probe::PROBE_SUID_IN_IMAGE,
            probe::PROBE_FCAPS_IN_IMAGE
        ));
    let out = c.run_output(&run).unwrap().checked().unwrap();
    let mut lines = out.stdout.lines();
    let ids = ProbeLine::parse(lines.next().unwrap()).unwrap();
    assert_eq!(ids.field("uid"), Some("65534"), "{out}");
    assert_eq!(ids.field("euid"), Some("0"), "setuid bit lost: {out}");
    let caps = ProbeLine::parse(lines.next().unwrap()).unwrap();
    // cap_setuid and cap_net_raw.
    assert_eq!(
        caps.field("CapEff"),
        Some("0000000000002080"),
        "file caps lost: {out}"
    );
    assert_nothing_left(&c, &id, &Runtime::Runc);
    assert_clean_shutdown(c);
}

#[test]
fn stdin_reaches_the_task_and_its_output_comes_back_complete() {
    let (c, image) = start_with_image();
    let id = unique_id("baseline-stdin");
    let input: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    let out = c
        .ctr()
        .args(
            Run::new(image.reference(), &id)
                .runtime(Runtime::Baseline)
                .cmd(["cat"])
                .ctr_args_for(&c),
        )
        .stdin(input.clone())
        .checked()
        .unwrap();
    assert_eq!(out.stdout.len(), input.len());
    assert!(out.stdout == input, "output differs from input");
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

#[test]
fn exec_runs_a_probe_in_a_running_baseline_task() {
    let (c, image) = start_with_image();
    let id = unique_id("baseline-exec");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .detach()
        .probe(["sleep", "600"]);
    c.run_output(&run).unwrap().checked().unwrap();
    let out = c
        .exec(&id, &[], [PROBE_IN_IMAGE, "as", "65534", "65534", "ids"])
        .checked()
        .unwrap();
    let ids = ProbeLine::parse_last(&out.stdout).unwrap();
    assert_eq!(ids.field("euid"), Some("65534"), "{out}");
    let code = c
        .exec(&id, &[], [PROBE_IN_IMAGE, "exit", "7"])
        .output()
        .unwrap();
    assert_eq!(code.code(), 7, "{code}");

    c.ctr()
        .args(["task", "kill", "-s", "SIGKILL", &id])
        .checked()
        .unwrap();
    remove_stopped(&c, &id, std::time::Duration::from_secs(30)).unwrap();
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

#[test]
fn the_cri_plugin_loads_only_when_asked_for() {
    let has_cri = |c: &Containerd| {
        let plugins = c.ctr().args(["plugins", "ls"]).checked().unwrap();
        plugins
            .stdout
            .lines()
            .any(|l| l.contains("io.containerd.grpc.v1") && l.contains(" cri "))
    };
    let plain = start();
    assert!(!has_cri(&plain));
    assert_clean_shutdown(plain);

    let with_cri = Containerd::start(ContainerdOptions {
        cri: true,
        ..ContainerdOptions::default()
    })
    .unwrap();
    assert!(has_cri(&with_cri));
    assert_clean_shutdown(with_cri);
}

#[test]
fn events_report_a_task_exit_with_its_status() {
    let (c, image) = start_with_image();
    let events = Events::watch(&c).unwrap();
    let id = unique_id("baseline-events");
    // Detached, so the task (and its shim) stays until the exit event has been seen.
    // containerd 2.4's runc shim is shut down by `ctr run --rm` before its event queue is
    // empty, and on a loaded machine /tasks/exit, /tasks/delete or both are lost (CI lost
    // both once); a shim that lives until its task is deleted has published the exit by
    // then. The hardened shim drains its queue before it exits (shim_task_api.rs).
    c.run_output(
        &Run::new(image.reference(), &id)
            .runtime(Runtime::Baseline)
            .detach()
            .probe(["exit", "5"]),
    )
    .unwrap()
    .checked()
    .unwrap();
    let exit = events
        .wait_for("/tasks/exit", &id, std::time::Duration::from_secs(30))
        .unwrap();
    assert!(exit.contains("\"exit_status\":5"), "{exit}");
    remove_stopped(&c, &id, std::time::Duration::from_secs(30)).unwrap();
    if !gvisor_hardened_tests::stack::Stack::selected().containerd2() {
        // containerd 1.6's shim is shut down after its delete event is out; 2.4's is not
        // (above), so only 1.6 is held to it.
        events
            .wait_for("/tasks/delete", &id, std::time::Duration::from_secs(30))
            .unwrap();
    }
    drop(events);
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

/// The probe's resource primitives detect the conditions the hardening tests look for.
#[test]
fn the_probe_reports_enospc_efbig_emfile_and_an_oom_kill_inside_gvisor() {
    let (c, image) = start_with_image();
    let id = unique_id("baseline-limits");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .flags(["--mount", "type=tmpfs,src=tmpfs,dst=/small,options=size=1m"])
        .sh("/bin/sandbox-probe fill /small/f 4194304; \
             (ulimit -f 64; /bin/sandbox-probe fill /tmp/f 1048576); \
             (ulimit -n 16; /bin/sandbox-probe fds 100)");
    let out = c.run_output(&run).unwrap().checked().unwrap();
    let lines: Vec<ProbeLine> = out
        .stdout
        .lines()
        .map(|l| ProbeLine::parse(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0].errno(), Some("ENOSPC"), "{out}");
    assert_eq!(lines[1].errno(), Some("EFBIG"), "{out}");
    assert_eq!(lines[1].field("sigxfsz"), Some("1"), "{out}");
    assert_eq!(lines[2].errno(), Some("EMFILE"), "{out}");
    assert_nothing_left(&c, &id, &Runtime::Baseline);

    let id = unique_id("baseline-oom");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .flags(["--memory-limit", "67108864"])
        .probe(["mem", "512"]);
    let out = c.run_output(&run).unwrap();
    assert_eq!(out.code(), 137, "memory bomb not killed: {out}");
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

/// When containerd dies under a running sandbox, shutdown still removes the orphans: shim,
/// runsc sandbox and gofer, the rootfs mount, the container's cgroups, the directory.
#[test]
fn shutdown_after_containerd_died_removes_orphaned_sandboxes_mounts_and_cgroups() {
    let (c, image) = start_with_image();
    let id = unique_id("orphan");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .detach()
        .probe(["sleep", "600"]);
    c.run_output(&run).unwrap().checked().unwrap();
    let socket = c.shim_socket(&id);
    assert!(socket.exists(), "no shim socket at {}", socket.display());
    let pid = c.pid().unwrap() as i32;
    // SAFETY: plain kill(2) of the containerd this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };

    let dir = c.dir().to_path_buf();
    let report = c.shutdown();
    eprintln!("{report}");
    assert!(
        !report.containerd_killed,
        "containerd was already dead: {report}"
    );
    assert!(
        report
            .killed_processes
            .iter()
            .any(|p| p.cmdline.contains("containerd-shim-runc-v2")),
        "{report}"
    );
    assert!(
        report
            .killed_processes
            .iter()
            .any(|p| p.cmdline.contains("runsc-sandbox")),
        "{report}"
    );
    assert!(!report.unmounted.is_empty(), "{report}");
    assert!(report.errors.is_empty(), "{report}");
    // The killed shim's socket is outside the directory: reported, and removed.
    assert!(report.shim_sockets_left.contains(&socket), "{report}");
    assert!(!socket.exists(), "{} left", socket.display());
    assert!(dir_leaks(&dir).is_empty(), "{}", dir_leaks(&dir));
    assert!(inspect::processes_mentioning(&id).is_empty());
    assert!(inspect::mounts_mentioning(&id).is_empty());
    assert!(
        inspect::cgroups_named(&id).is_empty(),
        "{:?}",
        inspect::cgroups_named(&id)
    );
}

#[test]
fn ctr_run_with_a_tty_gets_a_terminal_of_the_pty_size_inside_gvisor() {
    let (c, image) = start_with_image();
    let id = unique_id("baseline-tty");
    let run = Run::new(image.reference(), &id)
        .runtime(Runtime::Baseline)
        .flags(["-t"])
        // ctr resizes the console only after the task started: poll (5 s at most) for the
        // size to arrive rather than read it at once and see 0x0.
        .sh("read line; echo \"got:$line\"; i=0; \
             until [ \"$(stty size 2>/dev/null)\" = \"24 80\" ] || [ $i -ge 500 ]; do \
               usleep 10000; i=$((i+1)); \
             done; stty size; exit 4");
    let out = c
        .ctr()
        .args(run.ctr_args_for(&c))
        .output_in_pty("hello\n")
        .unwrap();
    assert_eq!(out.code(), 4, "{out}");
    let screen = out.stdout.replace('\r', "");
    assert!(screen.contains("got:hello\n"), "{out}");
    assert!(
        screen.contains(&format!("\n{} {}\n", pty::PTY_ROWS, pty::PTY_COLS)),
        "{out}"
    );
    assert_nothing_left(&c, &id, &Runtime::Baseline);
    assert_clean_shutdown(c);
}

/// The upstream namespaces of the egress tests each get a /24 of their own, also when many are
/// made at once from several threads: two sharing an address would route one test's traffic to
/// another test's server (a CI run once saw a 404 from the wrong upstream).
#[test]
fn upstream_namespaces_made_at_once_never_share_a_subnet() {
    use gvisor_hardened_tests::egress::UpstreamNetns;
    let made: Vec<UpstreamNetns> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..24)
            .map(|_| s.spawn(|| UpstreamNetns::create().unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut subnets: Vec<u8> = made.iter().map(|ns| ns.n).collect();
    subnets.sort_unstable();
    subnets.dedup();
    assert_eq!(
        subnets.len(),
        made.len(),
        "{} namespaces on {} distinct subnets: {subnets:?}",
        made.len(),
        subnets.len()
    );
    assert!(subnets.iter().all(|n| (2..252).contains(n)), "{subnets:?}");
}
