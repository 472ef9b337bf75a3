//! Pod grouping through ctr: containers whose CRI annotations name the same sandbox share one
//! shim process and one runsc sandbox (the CRI path itself is tested in `cri_*.rs`).

use std::time::Duration;

use gvisor_hardened_tests::*;

const TYPE: &str = "io.kubernetes.cri.container-type";
const SANDBOX: &str = "io.kubernetes.cri.sandbox-id";

fn running(c: &Containerd, id: &str) -> bool {
    c.ctr()
        .args(["task", "ls"])
        .output()
        .map(|o| {
            o.stdout
                .lines()
                .any(|l| l.starts_with(id) && l.contains("RUNNING"))
        })
        .unwrap_or(false)
}

#[test]
fn containers_of_one_pod_share_one_shim_and_one_sandbox() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let sb = unique_id("pod");
    let app = unique_id("app");
    let sb_ann = [format!("{TYPE}=sandbox"), format!("{SANDBOX}={sb}")];
    let app_ann = [format!("{TYPE}=container"), format!("{SANDBOX}={sb}")];
    let out = c
        .run_output(
            &Run::new(image.reference(), &sb)
                .detach()
                .flags(["--annotation", &sb_ann[0], "--annotation", &sb_ann[1]])
                .cmd(["sleep", "600"]),
        )
        .unwrap();
    assert!(out.success(), "{out}");
    poll_until("sandbox running", Duration::from_secs(10), || {
        running(&c, &sb).then_some(())
    })
    .unwrap();
    let out = c
        .run_output(
            &Run::new(image.reference(), &app)
                .flags(["--annotation", &app_ann[0], "--annotation", &app_ann[1]])
                .sh("id -u; sandbox-probe caps; echo app-done; exit 6"),
        )
        .unwrap();
    assert_eq!(out.code(), 6, "{out}");
    assert!(out.stdout.contains("65534"), "{out}");
    assert!(out.stdout.contains("CapEff=0000000000000000"), "{out}");
    assert!(out.stdout.contains("app-done"), "{out}");
    // One shim serves the pod (the app container's shim start reused the sandbox's socket).
    let shims = inspect::processes_mentioning(&sb)
        .into_iter()
        .filter(|p| p.cmdline.contains("containerd-shim-gvisor-hardened-v1"))
        .count();
    assert_eq!(shims, 1, "one shim per pod");
    c.ctr()
        .args(["task", "kill", "-s", "SIGKILL", &sb])
        .checked()
        .unwrap();
    poll_until("sandbox stopped", Duration::from_secs(10), || {
        (!running(&c, &sb)).then_some(())
    })
    .unwrap();
    c.ctr().args(["task", "delete", &sb]).checked().unwrap();
    c.ctr()
        .args(["container", "delete", &sb])
        .checked()
        .unwrap();
    assert_nothing_left(&c, &app, &Runtime::hardened());
    assert_nothing_left(&c, &sb, &Runtime::hardened());
    assert_clean_shutdown(c);
}
