use gvisor_hardened_tests::*;

#[test]
fn smoke_echo_runs_under_gvisor() {
    let c = Containerd::start(ContainerdOptions::with_shim(shim_binary().unwrap())).unwrap();
    let image = TestImage::ensure().unwrap();
    c.import(&image).unwrap();
    let id = unique_id("smoke");
    let out = c
        .run_output(&Run::new(image.reference(), &id).sh("echo hi; cat /proc/version; id; exit 3"))
        .unwrap();
    println!("{out}");
    println!("{}", c.log());
    assert_eq!(out.code(), 3, "{out}");
    assert_nothing_left(&c, &id, &Runtime::hardened());
    assert_clean_shutdown(c);
}
