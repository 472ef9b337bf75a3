//! `[mounts] protect` and `mask` through the containerd shim (`ctr run --mount`): the same
//! host-tree scan and policy decision as runsc-hardened, in the shim's Create.

use gvisor_hardened_tests::*;

#[test]
fn protected_paths_stay_read_only_and_masked_files_read_empty_in_a_writable_bind() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let project = c.dir().join("project");
    std::fs::create_dir_all(project.join(".githooks")).unwrap();
    std::fs::write(project.join(".env"), "API_KEY=s3cr3t\n").unwrap();
    // The sandbox runs as nobody: permissions must not be what refuses the writes.
    use std::os::unix::fs::PermissionsExt;
    for dir in [project.clone(), project.join(".githooks")] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let policy = c.dir().join("protect.toml");
    std::fs::write(
        &policy,
        format!(
            "[mounts]\nwritable_sources = [{:?}]\nprotect = [\".githooks\"]\nmask = [\"**/.env\"]\n[audit]\npath = {:?}\n",
            format!("{}/**", project.display()),
            c.dir().join("audit.jsonl").display().to_string()
        ),
    )
    .unwrap();
    let id = unique_id("protect");
    let mount = format!(
        "type=bind,src={},dst=/w,options=rbind:rw",
        project.display()
    );
    let out = c
        .run_output(
            &Run::new(image.reference(), &id)
                .runtime(Runtime::hardened_with_policy(&policy))
                .flags(["--mount", &mount])
                .sh("sandbox-probe write /w/new; sandbox-probe write /w/.githooks/post-checkout; wc -c < /w/.env"),
        )
        .unwrap();
    assert_eq!(out.code(), 0, "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        ProbeLine::parse(lines[0]).unwrap().is_ok(),
        "the bind is writable: {out}"
    );
    assert_eq!(
        ProbeLine::parse(lines[1]).unwrap().errno(),
        Some("EROFS"),
        "{out}"
    );
    assert_eq!(lines[2].trim(), "0", "{out}");
    assert!(!project.join(".githooks/post-checkout").exists());
    let audit = std::fs::read_to_string(c.dir().join("audit.jsonl")).unwrap();
    assert!(
        audit.contains("masked") && audit.contains(".env"),
        "{audit}"
    );
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert!(!c.bundle_dir(&id).join("gvisor-hardened-empty").exists());
    assert_clean_shutdown(c);
}
