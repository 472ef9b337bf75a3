//! Claims: what a pod gets from the pool, under concurrency and after its shim died.

use std::time::Duration;

use super::*;

#[test]
fn a_pod_claims_a_warm_sandbox_runs_hardened_in_its_own_cgroup_and_takes_it_away_for_good() {
    let cri = start(
        "size = 2\nrefill_per_minute = 600",
        "size = 1\nrefill_per_minute = 600",
    );
    let handler = HARDENED_HANDLER;

    // The pool is empty: the first pod boots cold, and its shim starts the filler.
    let cold = cri.run_pod("cold", handler).unwrap();
    assert!(
        cri.pool_claim_of(&cold.id).is_none(),
        "an empty pool was claimed from"
    );
    let cold_app = cri.run_container(&cold, &sleeper("app")).unwrap();
    let ready = wait_ready(&cri, handler, 2);
    let key = cri.pool_key_dir(handler).unwrap();

    // The next pod takes the oldest warm sandbox; the audit names the record of its boot.
    let warm = cri.run_pod("warm", handler).unwrap();
    let claim = cri.pool_claim_of(&warm.id).unwrap_or_else(|| {
        let events: Vec<String> = cri
            .audit_records()
            .iter()
            .map(|r| format!("{} {}", r["event"], r["container_id"]))
            .collect();
        panic!(
            "the second pod ({}) claimed no warm sandbox:\n{}\n{events:#?}",
            warm.id,
            pool_state(&cri)
        )
    });
    let taken = claim["pool"]["sandbox"].as_str().unwrap().to_string();
    assert_eq!(taken, ready[0]["id"], "{claim}");
    let booted = cri
        .audit_records()
        .into_iter()
        .find(|r| r["event"] == "pool-sandbox-booted" && r["container_id"] == taken.as_str())
        .expect("no boot record of the claimed sandbox");
    assert_eq!(claim["pool"]["boot_record"], ready[0]["boot_record"]);
    assert_eq!(claim["pool"]["key"], booted["pool"]["key"]);
    assert_eq!(warm.pid, ready[0]["pid"].as_i64().map(|p| p as i32));
    gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema(
        &cri.layout().audit_log(),
    );

    // Its containers run hardened, in the pod's cgroup, and see what a cold pod's see.
    let warm_app = cri.run_container(&warm, &sleeper("app")).unwrap();
    let id = cri
        .client()
        .exec_sync(&warm_app, &["id", "-u"], 10)
        .unwrap();
    assert_eq!(id.stdout.trim(), "65534", "{id:?}");
    let parent = warm.cgroup_parent().unwrap();
    let sandbox_cgroup =
        std::fs::read_to_string(format!("/proc/{}/cgroup", ready[0]["pid"])).unwrap();
    let memory_line = sandbox_cgroup
        .lines()
        .find(|l| l.split(':').nth(1) == Some("memory"))
        .unwrap();
    assert!(
        memory_line.contains(parent) && !memory_line.contains("gvisor-hardened-pool"),
        "the claimed sandbox is not in its pod's cgroup: {memory_line}"
    );
    // Warm sandboxes wait and boot at the lowest CPU priority; a claimed one runs at the
    // normal priority, every thread of it.
    let claimed_pid = ready[0]["pid"].as_i64().unwrap();
    let waiting_pid = refilled_or_ready_pid(&cri, handler, &taken);
    assert_eq!(
        nice_of_threads(waiting_pid),
        vec![19],
        "a warm sandbox not at nice 19"
    );
    assert_eq!(
        nice_of_threads(claimed_pid),
        vec![0],
        "a claimed sandbox not at nice 0"
    );
    let (cold_view, warm_view) = (view(&cri, &cold_app), view(&cri, &warm_app));
    assert_eq!(
        cold_view.replacen("cold", "warm", 1),
        warm_view,
        "a claimed pod's container sees something a cold pod's does not"
    );
    assert!(!warm_view.contains("gvisor-hardened-hold"), "{warm_view}");

    // The pool is refilled behind it, and the claimed sandbox is not among the warm ones.
    let refilled = wait_ready(&cri, handler, 2);
    assert!(refilled.iter().all(|e| e["id"] != taken.as_str()));

    // Removing the pod removes the claimed sandbox for good.
    cri.remove_pod(&warm).unwrap();
    assert_pod_gone(&cri, &warm, &[warm_app]);
    assert_warm_sandbox_gone(&cri, &key, &taken);
    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[cold_app]);

    // Draining deletes the warm sandboxes; containerd then stops with nothing left.
    let ids = ids_of(&wait_ready(&cri, handler, 2));
    drain_and_check(&cri, &key, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn twenty_pods_at_once_never_share_a_warm_sandbox_and_the_rest_start_cold() {
    let cri = start(
        "size = 4\nrefill_per_minute = 600\nmemory_limit = \"1Gi\"",
        "size = 1",
    );
    let handler = HARDENED_HANDLER;
    let (cold, _, key) = filled(&cri, handler, 4);

    // 20 RunPodSandbox at once, each pod then running hardened: 4 warm sandboxes (and what the
    // filler boots during the burst) for 20 claimants.
    let pods: Vec<(Pod, Vec<String>)> = std::thread::scope(|s| {
        let cri = &cri;
        let started: Vec<_> = (0..20)
            .map(|i| {
                s.spawn(move || {
                    let pod = cri.run_pod(&format!("p{i}"), handler).unwrap();
                    let app = cri.run_container(&pod, &sleeper("app")).unwrap();
                    let id = cri.client().exec_sync(&app, &["id", "-u"], 30).unwrap();
                    assert_eq!(id.stdout.trim(), "65534", "pod {}: {id:?}", pod.id);
                    (pod, vec![app])
                })
            })
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    });

    // No warm sandbox served two pods: each claim names another one, each one a booted warm
    // sandbox; a pod that claimed runs in the sandbox that was booted, a pod that did not runs
    // in one of its own, and no two pods share a sandbox process.
    let booted = records(&cri, "pool-sandbox-booted");
    let mut claimed = Vec::new();
    for (pod, _) in &pods {
        let pid = pod.pid.expect("no sandbox pid of a pod");
        let booted_as = booted.iter().find(|b| b["pid"] == pid);
        match cri.pool_claim_of(&pod.id) {
            Some(c) => {
                let sandbox = c["pool"]["sandbox"].as_str().unwrap().to_string();
                assert!(!claimed.contains(&sandbox), "{sandbox} claimed twice");
                let boot = booted
                    .iter()
                    .find(|b| b["container_id"] == sandbox.as_str())
                    .unwrap_or_else(|| panic!("claimed {sandbox} was never booted"));
                assert_eq!(c["pool"]["key"], boot["pool"]["key"]);
                assert_eq!(
                    booted_as,
                    Some(boot),
                    "pod {} does not run in {sandbox}",
                    pod.id
                );
                claimed.push(sandbox);
            }
            None => assert!(
                booted_as.is_none(),
                "pod {} runs in a warm sandbox it did not claim: {booted_as:?}",
                pod.id
            ),
        }
    }
    gvisor_hardened_tests::audit_tools::assert_chain_intact_and_records_fit_the_schema(
        &cri.layout().audit_log(),
    );
    let pids: std::collections::BTreeSet<i32> = pods.iter().filter_map(|(p, _)| p.pid).collect();
    assert_eq!(pids.len(), pods.len(), "two pods share a sandbox process");
    assert!(!claimed.is_empty(), "no pod claimed:\n{}", pool_state(&cri));
    println!(
        "{} of {} pods claimed a warm sandbox; {} warm sandboxes booted",
        claimed.len(),
        pods.len(),
        booted.len()
    );

    // Each claimed sandbox goes with its pod.
    remove_pods(&cri, &pods);
    for sandbox in &claimed {
        assert_warm_sandbox_gone(&cri, &key, sandbox);
    }
    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[]);

    // The pool is full again (so no filler is at work) before it is drained.
    let ids = ids_of(&wait_ready(&cri, handler, 4));
    drain_and_check(&cri, &key, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_claimed_pod_whose_shim_died_is_cleaned_up_by_the_delete_action() {
    let cri = start("size = 1\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    let (cold, ready, key) = filled(&cri, handler, 1);
    let taken = ready[0]["id"].as_str().unwrap().to_string();
    let pod = cri.run_pod("orphan", handler).unwrap();
    assert_eq!(
        cri.pool_claim_of(&pod.id)
            .map(|c| c["pool"]["sandbox"].clone()),
        Some(serde_json::json!(taken))
    );
    let app = cri.run_container(&pod, &sleeper("app")).unwrap();

    // The pod's shim dies: only the claim record in the pod sandbox's bundle still names the
    // warm sandbox runsc knows by the pool's id. containerd's delete action must find it.
    let shims = shim_processes(&cri, &pod.id);
    assert_eq!(shims.len(), 1, "{shims:#?}");
    // SAFETY: kill(2) with integer arguments, at the shim this test's containerd started.
    assert_eq!(unsafe { libc::kill(shims[0].pid, libc::SIGKILL) }, 0);
    poll_until(
        "the killed shim to be gone",
        Duration::from_secs(10),
        || shim_processes(&cri, &pod.id).is_empty().then_some(()),
    )
    .unwrap();
    poll_until(
        "the app container of the killed shim to read as exited",
        Duration::from_secs(30),
        || {
            let (status, _) = cri.client().container_status(&app, false).unwrap();
            (status.state == k8s_cri::v1::ContainerState::ContainerExited as i32).then_some(())
        },
    )
    .unwrap();
    // What the kubelet does with a pod whose sandbox died: stop and remove it.
    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[app]);
    assert_warm_sandbox_gone(&cri, &key, &taken);

    cri.remove_pod(&cold).unwrap();
    assert_pod_gone(&cri, &cold, &[]);
    let left = ids_of(&wait_ready(&cri, handler, 1));
    drain_and_check(&cri, &key, &left);
    assert_clean_cri_shutdown(cri);
}

/// `name`'s pod config with the RuntimeDefault seccomp profile on its sandbox, as a kubelet
/// sends it for a pod under Pod Security's `restricted` level.
fn runtime_default(cri: &CriContainerd, name: &str) -> k8s_cri::v1::PodSandboxConfig {
    let mut config = cri.pod_config(name);
    let linux = config.linux.get_or_insert_with(Default::default);
    let security = linux.security_context.get_or_insert_with(Default::default);
    security.seccomp = Some(k8s_cri::v1::SecurityProfile {
        profile_type: k8s_cri::v1::security_profile::ProfileType::RuntimeDefault as i32,
        localhost_ref: String::new(),
    });
    config
}

#[test]
fn a_pod_under_the_runtime_default_seccomp_profile_claims_and_gets_its_hostname() {
    let cri = start("size = 1\nrefill_per_minute = 600", "size = 1");
    let handler = HARDENED_HANDLER;
    // RuntimeDefault refuses sethostname to a sandbox without CAP_SYS_ADMIN, and runsc applies
    // the sandbox container's profile to the claim's exec too: without the template's one
    // rule more, every claim failed (seen through a kubelet).
    let cold = cri
        .run_pod_with(runtime_default(&cri, "cold"), handler)
        .unwrap();
    let ready = wait_ready(&cri, handler, 1);
    let key = cri.pool_key_dir(handler).unwrap();
    let template: serde_json::Value =
        serde_json::from_slice(&std::fs::read(key.join("template.json")).unwrap()).unwrap();
    assert!(
        template["spec"]["linux"]["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO",
        "the pod's profile did not reach the template: {template}"
    );
    let warm = cri
        .run_pod_with(runtime_default(&cri, "warm-seccomp"), handler)
        .unwrap();
    assert_eq!(
        cri.pool_claim_of(&warm.id)
            .map(|c| c["pool"]["sandbox"].clone()),
        Some(serde_json::json!(ready[0]["id"])),
    );
    let app = cri.run_container(&warm, &sleeper("app")).unwrap();
    let out = cri.client().exec_sync(&app, &["hostname"], 20).unwrap();
    assert!(out.success(), "{out}");
    assert_eq!(out.stdout.trim(), "warm-seccomp");

    remove_pods(&cri, &[(warm, vec![app]), (cold, vec![])]);
    let left = ids_of(&wait_ready(&cri, handler, 1));
    drain_and_check(&cri, &key, &left);
    assert_clean_cri_shutdown(cri);
}
