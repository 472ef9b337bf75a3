//! The CRI harness proven with runc: containerd's default runtime through the same CRI
//! client, pause image, CNI network and teardown the gvisor-hardened pod tests use. If these
//! fail, the harness is broken, not the shim.
//!
//! Needs root, containerd 1.6 with its runc shim, runc, Debian containernetworking-plugins
//! (/usr/lib/cni), iproute2, gcc with a static libc.

use std::time::Duration;

use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::{poll_until, shim_binary, TEST_IMAGE_REF};
use k8s_cri::v1::ContainerState;

fn sleeper(name: &str) -> k8s_cri::v1::ContainerConfig {
    container_config(
        name,
        TEST_IMAGE_REF,
        &["sh", "-c", &format!("echo {name} started; exec sleep 600")],
    )
}

fn state(cri: &CriContainerd, id: &str) -> ContainerState {
    let (status, _) = cri.client().container_status(id, false).unwrap();
    ContainerState::try_from(status.state).unwrap()
}

#[test]
fn runc_pod_with_two_containers_execs_reports_stats_restarts_and_leaves_nothing() {
    let cri = CriContainerd::start(CriOptions::runc_only()).unwrap();
    let pod = cri.run_pod("runc-pod", RUNC_HANDLER).unwrap();
    assert!(pod.netns.is_some(), "CRI created no netns: {pod:?}");

    let a = cri.run_container(&pod, &sleeper("a")).unwrap();
    let b = cri.run_container(&pod, &sleeper("b")).unwrap();
    let mut all_ids = vec![a.clone(), b.clone()];
    for id in [&a, &b] {
        assert_eq!(state(&cri, id), ContainerState::ContainerRunning);
        let out = cri.client().exec_sync(id, &["id", "-u"], 10).unwrap();
        assert!(out.success(), "{out}");
        assert_eq!(out.stdout.trim(), "0", "runc keeps the image's root user");
        let host = cri.client().exec_sync(id, &["hostname"], 10).unwrap();
        assert_eq!(host.stdout.trim(), "runc-pod", "{host}");
    }

    // Both containers are in the pod's network namespace, with an address on the CNI subnet.
    let subnet_prefix = cri.layout().subnet().trim_end_matches("0/24").to_string();
    let addr_a = cri
        .client()
        .exec_sync(&a, &["ip", "-o", "-4", "addr", "show", "eth0"], 10)
        .unwrap();
    assert!(addr_a.stdout.contains(&subnet_prefix), "{addr_a}");
    let addr_b = cri
        .client()
        .exec_sync(&b, &["ip", "-o", "-4", "addr", "show", "eth0"], 10)
        .unwrap();
    assert_eq!(addr_a.stdout, addr_b.stdout);

    // A failing command is an exit code, not an RPC error.
    let fail = cri
        .client()
        .exec_sync(&a, &["sh", "-c", "exit 3"], 10)
        .unwrap();
    assert_eq!(fail.exit_code, 3, "{fail}");

    // Container logs in CRI format under the pod's log directory.
    let log = pod.log_directory().join("a/0.log");
    poll_until("the log line", Duration::from_secs(10), || {
        std::fs::read_to_string(&log)
            .ok()
            .filter(|l| l.contains(" stdout F a started"))
    })
    .unwrap_or_else(|e| panic!("{e}: {}", log.display()));

    // Stats: the container's and the pod's, from the cgroups under the pod's parent.
    let stats = cri.client().container_stats(&a).unwrap();
    let mem = stats.memory.expect("memory stats");
    assert!(
        mem.working_set_bytes.is_some_and(|w| w.value > 0),
        "{mem:?}"
    );
    assert!(stats.cpu.is_some());
    let pod_stats = cri.client().pod_sandbox_stats(&pod.id).unwrap();
    let linux = pod_stats.linux.expect("linux pod stats");
    assert!(linux.cpu.is_some() && linux.memory.is_some(), "{linux:?}");
    assert_eq!(linux.containers.len(), 2, "{:?}", linux.containers);

    // Restart of one container inside the running pod, as the kubelet does it.
    cri.client().stop_container(&a, 5).unwrap();
    assert_eq!(state(&cri, &a), ContainerState::ContainerExited);
    cri.client().remove_container(&a).unwrap();
    let mut again = sleeper("a");
    again.metadata.as_mut().unwrap().attempt = 1;
    again.log_path = "a/1.log".into();
    let a2 = cri.run_container(&pod, &again).unwrap();
    all_ids.push(a2.clone());
    let out = cri.client().exec_sync(&a2, &["echo", "back"], 10).unwrap();
    assert_eq!(out.stdout.trim(), "back");
    assert_eq!(state(&cri, &b), ContainerState::ContainerRunning);

    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &all_ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn two_runc_pods_get_their_own_network_namespaces() {
    let cri = CriContainerd::start(CriOptions::runc_only()).unwrap();
    let p1 = cri.run_pod("one", RUNC_HANDLER).unwrap();
    let p2 = cri.run_pod("two", RUNC_HANDLER).unwrap();
    assert_ne!(p1.netns, p2.netns);
    let c1 = cri.run_container(&p1, &sleeper("c")).unwrap();
    let c2 = cri.run_container(&p2, &sleeper("c")).unwrap();
    let ip = |id: &str| {
        cri.client()
            .exec_sync(id, &["ip", "-o", "-4", "addr", "show", "eth0"], 10)
            .unwrap()
            .stdout
    };
    assert_ne!(ip(&c1), ip(&c2));
    cri.remove_pod(&p1).unwrap();
    assert_pod_gone(&cri, &p1, std::slice::from_ref(&c1));
    // The other pod is untouched by the first one's removal.
    assert_eq!(state(&cri, &c2), ContainerState::ContainerRunning);
    cri.remove_pod(&p2).unwrap();
    assert_pod_gone(&cri, &p2, &[c2]);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_pod_left_running_is_removed_by_teardown_and_reported() {
    let cri = CriContainerd::start(CriOptions::runc_only()).unwrap();
    let pod = cri.run_pod("forgotten", RUNC_HANDLER).unwrap();
    cri.run_container(&pod, &sleeper("c")).unwrap();
    let netns = pod.netns.clone().unwrap();
    let report = cri.shutdown();
    assert_eq!(report.pods_left, vec![pod.id.clone()], "{report}");
    assert!(report.pod_errors.is_empty(), "{report}");
    assert!(!netns.exists(), "netns {} left", netns.display());
    assert!(!report.is_clean());
}

#[test]
fn handlers_registered_by_the_installer_code_are_listed_by_cri() {
    let cri = CriContainerd::start(CriOptions::with_shim(shim_binary().unwrap())).unwrap();
    let status = cri.client().status(true).unwrap();
    let config: serde_json::Value = serde_json::from_str(&status.info["config"]).unwrap();
    let runtimes = &config["containerd"]["runtimes"];
    for handler in [HARDENED_HANDLER, HARDENED_TOOL_HANDLER] {
        let rt = &runtimes[handler];
        assert_eq!(
            rt["runtimeType"], "io.containerd.gvisor-hardened.v1",
            "{rt}"
        );
        assert_eq!(
            rt["PodAnnotations"],
            serde_json::json!(["gvisor-hardened.dev/*"]),
            "{rt}"
        );
        assert_eq!(
            rt["options"]["ConfigPath"],
            cri.policy_path(handler).unwrap().display().to_string(),
            "{rt}"
        );
        assert_eq!(
            rt["runtimePath"],
            cri.layout().shim_path().display().to_string(),
            "{rt}"
        );
    }
    assert_eq!(config["containerd"]["defaultRuntimeName"], RUNC_HANDLER);
    // containerd 1.x lists the pause image in the runtime's config; 2.x keeps it with the
    // images plugin, which the status does not show (every pod of the CRI tests runs on it:
    // there is no registry to pull another from).
    if !gvisor_hardened_tests::stack::Stack::selected().containerd2() {
        assert_eq!(config["sandboxImage"], PAUSE_IMAGE_REF);
    }
    // The tool class's policy is the shipped one plus the test's audit and runsc paths.
    let tool = std::fs::read_to_string(cri.policy_path(HARDENED_TOOL_HANDLER).unwrap()).unwrap();
    assert!(tool.starts_with(SHIPPED_TOOL_POLICY), "{tool}");
    assert_clean_cri_shutdown(cri);
}
