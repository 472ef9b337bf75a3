//! The file-count cap of scratch space, measured under real runsc (see "File count" in
//! policy-injector/README.md): runsc 20221219 ignores `nr_inodes` on its tmpfs mounts, so the
//! policy refuses the option and the sandbox's memory limit is what bounds the number of files.

use gvisor_hardened_tests::fault::TestPolicy;
use gvisor_hardened_tests::*;

fn setup() -> (Containerd, TestImage) {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    (c, image)
}

/// Creates up to 1000 files in a tmpfs at /tmp mounted with nr_inodes=100, spec unchanged.
fn files_in_capped_tmpfs(c: &Containerd, image: &TestImage, runtime: Runtime) -> ProbeLine {
    let id = unique_id("nrinodes");
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(runtime.clone())
                .flags([
                    "--mount",
                    "type=tmpfs,src=tmpfs,dst=/tmp,options=size=1048576:nr_inodes=100",
                ])
                .probe(["files", "/tmp", "1000", "0"]),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    assert_nothing_left(c, &id, &runtime);
    ProbeLine::parse_last(&out.stdout).unwrap()
}

#[test]
fn runsc_ignores_nr_inodes_where_the_host_kernel_enforces_it() {
    let (c, image) = setup();
    // runc: the host kernel's tmpfs. 100 inodes, one of them the root directory.
    let runc = files_in_capped_tmpfs(&c, &image, Runtime::Runc);
    assert_eq!(runc.errno(), Some("ENOSPC"), "{runc:?}");
    assert_eq!(runc.field("created"), Some("99"), "{runc:?}");
    // runsc (through the Go shim, the spec as given): no cap at all. If this starts failing,
    // runsc honours nr_inodes now and the policy can offer a `files` setting.
    let runsc = files_in_capped_tmpfs(&c, &image, Runtime::Baseline);
    assert!(runsc.is_ok(), "{runsc:?}");
    assert_eq!(runsc.field("created"), Some("1000"), "{runsc:?}");
    assert_clean_shutdown(c);
}

#[test]
fn the_memory_limit_bounds_the_file_count() {
    let (c, image) = setup();
    let policy = TestPolicy::builder(&c, &unique_id("files-mem"))
        .write()
        .unwrap();
    let id = unique_id("files-mem");
    // Measured: ~2 KiB of sentry memory per empty file; 64 MiB ends the sandbox near 25000.
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(policy.runtime())
                .flags(["--annotation", "gvisor-hardened.dev/memory=64Mi"])
                .probe(["files", "/tmp", "1000000", "1000"]),
        )
        .unwrap();
    assert_eq!(out.code(), 137, "the sandbox is OOM-killed: {out}");
    let last = ProbeLine::parse_last(&out.stdout).unwrap();
    let created: u64 = last.field("created").unwrap().parse().unwrap();
    assert_eq!(last.field("progress"), Some("1"), "killed mid-way: {out}");
    assert!((1000..1_000_000).contains(&created), "{out}");
    let exit = policy
        .audit_lines()
        .into_iter()
        .find(|l| l["container_id"] == id.as_str() && l["event"] == "exit")
        .unwrap_or_else(|| panic!("no exit record: {:?}", policy.audit_lines()));
    assert_eq!(exit["oom"], true, "{exit}");
    assert_nothing_left(&c, &id, &policy.runtime());
    assert_clean_shutdown(c);
}
