//! Pods through CRI with the `gvisor-hardened` RuntimeClass handler, registered by the
//! installer's config code in a private containerd 1.6: what a kubelet would see.
//!
//! Needs root, the machine's containerd 1.6, runsc, runc, containernetworking-plugins,
//! iproute2, gcc with a static libc, and the shim built (`cargo build -p
//! containerd-shim-gvisor-hardened`; `shim_binary()` finds it).

use std::collections::BTreeSet;
use std::time::Duration;

use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::inspect;
use gvisor_hardened_tests::{poll_until, shim_binary, ProbeLine, TEST_IMAGE_REF};
use k8s_cri::v1::{ContainerConfig, ContainerState};

fn start() -> CriContainerd {
    CriContainerd::start(CriOptions::with_shim(shim_binary().unwrap())).unwrap()
}

fn sleeper(name: &str) -> ContainerConfig {
    container_config(name, TEST_IMAGE_REF, &["sleep", "600"])
}

fn state(cri: &CriContainerd, id: &str) -> ContainerState {
    let (status, _) = cri.client().container_status(id, false).unwrap();
    ContainerState::try_from(status.state).unwrap()
}

/// Runs the probe commands in one ExecSync and returns one parsed line per command.
fn probe(cri: &CriContainerd, id: &str, commands: &[&str]) -> Vec<ProbeLine> {
    let script = commands
        .iter()
        .map(|c| format!("/bin/sandbox-probe {c}"))
        .collect::<Vec<_>>()
        .join("; ");
    let out = cri
        .client()
        .exec_sync(id, &["sh", "-c", &script], 30)
        .unwrap();
    assert!(out.success(), "{out}");
    let lines: Vec<ProbeLine> = out
        .stdout
        .lines()
        .map(|l| ProbeLine::parse(l).unwrap_or_else(|e| panic!("{e}\n{out}")))
        .collect();
    assert_eq!(lines.len(), commands.len(), "{out}");
    lines
}

/// The hardening, checked from inside container `id` through ExecSync.
fn assert_hardened(cri: &CriContainerd, id: &str) {
    let r = probe(
        cri,
        id,
        &[
            "caps",
            "nnp",
            "ids",
            "write /srv/probe x",
            "statfs /tmp",
            "write /tmp/probe x",
            "uname",
        ],
    );
    let [caps, nnp, ids, srv, tmp, tmp_write, uname] = &r[..] else {
        unreachable!()
    };
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(caps.field(set), Some("0000000000000000"), "{set}: {caps:?}");
    }
    assert_eq!(nnp.field("nnp"), Some("1"), "{nnp:?}");
    assert_eq!(ids.field("uid"), Some("65534"), "{ids:?}");
    assert_eq!(ids.field("gid"), Some("65534"), "{ids:?}");
    // /srv is world-writable in the image: only a read-only root refuses the write.
    assert_eq!(srv.errno(), Some("EROFS"), "{srv:?}");
    assert_eq!(tmp.field("fstype"), Some("tmpfs"), "{tmp:?}");
    assert!(tmp_write.is_ok(), "{tmp_write:?}");
    // gVisor's kernel answers, not the host's.
    let host_release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(
        uname.field("release"),
        Some(host_release.trim()),
        "{uname:?}"
    );
    let dmesg = cri.client().exec_sync(id, &["dmesg"], 10).unwrap();
    assert!(
        dmesg.stdout.contains("gVisor"),
        "not gVisor's kernel log: {dmesg}"
    );
    // What the hardening changed, where `crictl inspect` looks: the verbose status's copy of
    // the spec, containerd's, which the shim annotates after the Create.
    let summary = gvisor_hardened_tests::poll::poll_until(
        "the hardening's summary in the container's verbose status",
        std::time::Duration::from_secs(10),
        || {
            let (_, info) = cri.client().container_status(id, true).ok()?;
            let info: serde_json::Value = serde_json::from_str(info.get("info")?).ok()?;
            info["runtimeSpec"]["annotations"]["gvisor-hardened.dev/decisions"]
                .as_str()
                .map(String::from)
        },
    )
    .unwrap();
    assert!(
        summary.starts_with("gvisor-hardened changed ") && summary.contains("capabilities: "),
        "{summary}"
    );
}

/// Every hardened shim process of this containerd.
fn all_shims(cri: &CriContainerd) -> Vec<inspect::ProcInfo> {
    let address = cri.containerd().address().display().to_string();
    inspect::processes_mentioning(&address)
        .into_iter()
        .filter(|p| p.cmdline.contains("containerd-shim-gvisor-hardened-v1"))
        .collect()
}

/// Every runsc sandbox process using this instance's runsc root.
fn all_runsc_sandboxes(cri: &CriContainerd) -> Vec<inspect::ProcInfo> {
    inspect::processes_mentioning(&cri.runsc_root().display().to_string())
        .into_iter()
        .filter(|p| p.cmdline.starts_with("runsc-sandbox"))
        .collect()
}

#[test]
fn hardened_pod_runs_two_hardened_containers_in_one_sandbox_with_one_shim() {
    let cri = start();
    let pod = cri.run_pod("agent", HARDENED_HANDLER).unwrap();
    let a = cri.run_container(&pod, &sleeper("a")).unwrap();
    let b = cri.run_container(&pod, &sleeper("b")).unwrap();
    for id in [&a, &b] {
        assert_eq!(state(&cri, id), ContainerState::ContainerRunning);
        assert_hardened(&cri, id);
    }

    // One shim for the pod, serving the sandbox and both containers.
    let shims = all_shims(&cri);
    assert_eq!(shims.len(), 1, "{shims:#?}");
    assert_eq!(shim_processes(&cri, &pod.id).len(), 1, "{shims:#?}");
    // One runsc sandbox for the pod: the containers joined it.
    let sandboxes = all_runsc_sandboxes(&cri);
    assert_eq!(sandboxes.len(), 1, "{sandboxes:#?}");
    assert_eq!(runsc_sandbox_processes(&pod.id).len(), 1, "{sandboxes:#?}");
    // The decisions are in the audit log, under the handler's policy.
    let audit = cri.audit_log();
    let policy = cri.policy_path(HARDENED_HANDLER).unwrap();
    for id in [&pod.id, &a, &b] {
        assert!(
            audit
                .lines()
                .any(|l| l.contains(id.as_str()) && l.contains(&policy.display().to_string())),
            "no audit line for {id} under {}:\n{audit}",
            policy.display()
        );
    }

    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[a, b]);
    assert!(all_shims(&cri).is_empty());
    assert!(all_runsc_sandboxes(&cri).is_empty());
    assert_clean_cri_shutdown(cri);
}

#[test]
fn hardened_pod_reports_stats_restarts_a_container_and_leaves_nothing() {
    let cri = start();
    let pod = cri.run_pod("stats", HARDENED_HANDLER).unwrap();
    let a = cri.run_container(&pod, &sleeper("a")).unwrap();
    let b = cri.run_container(&pod, &sleeper("b")).unwrap();
    let mut ids = vec![a.clone(), b.clone()];

    let stats = cri.client().container_stats(&a).unwrap();
    assert!(stats.cpu.is_some(), "{stats:?}");
    let mem = stats.memory.expect("memory stats");
    assert!(
        mem.working_set_bytes.is_some_and(|w| w.value > 0),
        "{mem:?}"
    );
    let pod_stats = cri.client().pod_sandbox_stats(&pod.id).unwrap();
    let linux = pod_stats.linux.expect("linux pod stats");
    assert!(linux.cpu.is_some() && linux.memory.is_some(), "{linux:?}");
    let in_stats: BTreeSet<String> = linux
        .containers
        .iter()
        .filter_map(|c| c.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    assert_eq!(in_stats, BTreeSet::from([a.clone(), b.clone()]));

    // Container restart inside the running pod, as the kubelet does it.
    cri.client().stop_container(&a, 5).unwrap();
    assert_eq!(state(&cri, &a), ContainerState::ContainerExited);
    cri.client().remove_container(&a).unwrap();
    let mut again = sleeper("a");
    again.metadata.as_mut().unwrap().attempt = 1;
    again.log_path = "a/1.log".into();
    let a2 = cri.run_container(&pod, &again).unwrap();
    ids.push(a2.clone());
    assert_hardened(&cri, &a2);
    assert_eq!(state(&cri, &b), ContainerState::ContainerRunning);
    assert_eq!(all_runsc_sandboxes(&cri).len(), 1);
    assert_eq!(all_shims(&cri).len(), 1);

    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &ids);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn the_tool_handler_runs_its_own_policy() {
    let cri = start();
    let pod = cri.run_pod("tool-call", HARDENED_TOOL_HANDLER).unwrap();
    let c = cri.run_container(&pod, &sleeper("tool")).unwrap();
    assert_hardened(&cri, &c);
    let tool_policy = cri.policy_path(HARDENED_TOOL_HANDLER).unwrap();
    let audit = cri.audit_log();
    assert!(
        audit
            .lines()
            .any(|l| l.contains(&c) && l.contains(&tool_policy.display().to_string())),
        "the tool policy did not govern {c}:\n{audit}"
    );
    // 512Mi for the whole pod: some memory cgroup between the pod's parent and its
    // containers carries a limit no higher than the tool policy's.
    let parent = pod
        .cgroup_parent()
        .unwrap()
        .trim_start_matches('/')
        .to_string();
    let limits: Vec<u64> = inspect::cgroup_roots()
        .into_iter()
        .filter(|r| r.ends_with("memory"))
        .flat_map(|r| {
            let dir = r.join(&parent);
            let mut files = vec![dir.join("memory.limit_in_bytes")];
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                files.push(e.path().join("memory.limit_in_bytes"));
            }
            files
        })
        .filter_map(|f| std::fs::read_to_string(f).ok()?.trim().parse().ok())
        .collect();
    assert!(
        limits.iter().any(|l| *l <= 512 << 20),
        "no memory limit <= 512Mi under {parent}: {limits:?}"
    );
    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[c]);
    assert_clean_cri_shutdown(cri);
}

/// Runs `pod` and then `container` in it; the first failure must be a policy rejection by
/// `rule`. Whatever was created is removed again. Returns the error message.
fn rejected(
    cri: &CriContainerd,
    pod: k8s_cri::v1::PodSandboxConfig,
    container: ContainerConfig,
    rule: &str,
) -> String {
    let err = match cri.run_pod_with(pod, HARDENED_HANDLER) {
        Err(e) => e.to_string(),
        Ok(pod) => {
            let result = cri.run_container(&pod, &container);
            cri.remove_pod(&pod).unwrap();
            assert_pod_gone(cri, &pod, &[]);
            match result {
                Err(e) => e.to_string(),
                Ok(id) => panic!("container {id} ran; expected a rejection by `{rule}`"),
            }
        }
    };
    assert!(
        err.contains(&format!("rejected by policy: {rule}:")),
        "expected a rejection by `{rule}`, got: {err}"
    );
    eprintln!("rejected by `{rule}`: {err}");
    err
}

#[test]
fn host_namespaces_privileged_and_denied_host_paths_are_rejected_at_the_cri_naming_the_rule() {
    let cri = start();

    let mut privileged_pod = cri.pod_config("privileged");
    privileged_pod.sandbox_security().privileged = true;
    let container = sleeper("c").privileged();
    let err = rejected(&cri, privileged_pod, container, "devices");
    assert!(err.contains("a privileged container"), "{err}");

    for (name, pod, field) in [
        (
            "host-net",
            cri.pod_config("host-net").host_network(),
            "network",
        ),
        ("host-pid", cri.pod_config("host-pid").host_pid(), "pid"),
        ("host-ipc", cri.pod_config("host-ipc").host_ipc(), "ipc"),
    ] {
        let container = sleeper("c").namespaces_of(&pod);
        let err = rejected(&cri, pod, container, "namespaces");
        assert!(
            err.contains(&format!("linux.namespaces[{field}]")),
            "{name}: {err}"
        );
    }

    let etc = sleeper("c").host_path("/etc", "/host-etc", true);
    let err = rejected(&cri, cri.pod_config("etc"), etc, "mounts");
    assert!(err.contains("/host-etc"), "{err}");

    // The runtime's own socket (an existing path: CRI would create a missing one).
    let socket = cri.containerd().address().display().to_string();
    let sock = sleeper("c").host_path(&socket, "/run/containerd.sock", false);
    let err = rejected(&cri, cri.pod_config("socket"), sock, "mounts");
    assert!(err.contains("/run/containerd.sock"), "{err}");

    // Nothing of the refused pods is left running or mounted.
    assert!(all_shims(&cri).is_empty(), "{:#?}", all_shims(&cri));
    assert!(all_runsc_sandboxes(&cri).is_empty());
    assert!(cri.client().list_pod_sandboxes().unwrap().is_empty());
    assert_clean_cri_shutdown(cri);
}

#[test]
fn container_output_reaches_the_cri_log_and_exit_codes_reach_the_status() {
    let cri = start();
    let pod = cri.run_pod("logs", HARDENED_HANDLER).unwrap();
    let talker = container_config(
        "talker",
        TEST_IMAGE_REF,
        &[
            "sh",
            "-c",
            "echo out-from-gvisor; echo err-from-gvisor >&2; exit 4",
        ],
    );
    let id = cri.run_container(&pod, &talker).unwrap();
    let exited = poll_until("the container to exit", Duration::from_secs(30), || {
        let (status, _) = cri.client().container_status(&id, false).ok()?;
        (ContainerState::try_from(status.state).ok()? == ContainerState::ContainerExited)
            .then_some(status)
    })
    .unwrap();
    assert_eq!(exited.exit_code, 4, "{exited:?}");
    // The kubelet's view: CRI-format lines in the container's log file.
    let log = pod.log_directory().join("talker/0.log");
    let text = poll_until("both log lines", Duration::from_secs(10), || {
        std::fs::read_to_string(&log).ok().filter(|t| {
            t.contains(" stdout F out-from-gvisor") && t.contains(" stderr F err-from-gvisor")
        })
    })
    .unwrap_or_else(|e| panic!("{e}: {}", log.display()));
    assert_eq!(text.lines().count(), 2, "{text}");
    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[id]);
    assert_clean_cri_shutdown(cri);
}

/// A bound service-account token (`kubernetes.io` claim; the signature is not real).
const SA_TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6Imd2aC10ZXN0In0.eyJhdWQiOlsiaHR0cHM6Ly9rdWJlcm5ldGVzLmRlZmF1bHQuc3ZjIl0sImV4cCI6NDEwMjQ0NDgwMCwiaWF0IjoxNzAwMDAwMDAwLCJpc3MiOiJodHRwczovL2t1YmVybmV0ZXMuZGVmYXVsdC5zdmMiLCJrdWJlcm5ldGVzLmlvIjp7Im5hbWVzcGFjZSI6ImFnZW50cyIsInBvZCI6eyJuYW1lIjoicCIsInVpZCI6IjBiN2UifSwic2VydmljZWFjY291bnQiOnsibmFtZSI6ImRlZmF1bHQiLCJ1aWQiOiI1YTFmIn19LCJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6YWdlbnRzOmRlZmF1bHQifQ.c2lnbmF0dXJlLW5vdC1jaGVja2Vk";

/// A projected volume as kubelet writes it (files in a timestamped directory, `..data` and one
/// symlink per name), under `<kubelet_root>/pods/<uid>/volumes/kubernetes.io~projected/`.
fn projected_volume(kubelet_root: &std::path::Path, name: &str, files: &[(&str, &str)]) -> String {
    use std::os::unix::fs::symlink;
    let vol = kubelet_root
        .join("pods/0b7e-test/volumes/kubernetes.io~projected")
        .join(name);
    let data = vol.join("..2026_12_01_15_00_00.000000001");
    std::fs::create_dir_all(&data).unwrap();
    for (file, content) in files {
        std::fs::write(data.join(file), content).unwrap();
        symlink(format!("..data/{file}"), vol.join(file)).unwrap();
    }
    symlink(data.file_name().unwrap(), vol.join("..data")).unwrap();
    vol.display().to_string()
}

/// A pod's own serviceAccountToken volume mounted at /tokens (not the default destination) is
/// found by the shim in the kubelet-shaped volume and removed, with the reason in the audit log;
/// a projected volume of the same pod without a token is mounted as usual. The kubelet root is
/// a temp dir named by the policy (`mounts.kubelet_root`): no kubelet runs here.
#[test]
fn a_token_volume_mounted_elsewhere_never_reaches_the_container() {
    let kubelet = tempfile::tempdir().unwrap();
    let tokens = projected_volume(kubelet.path(), "tokens", &[("token", SA_TOKEN)]);
    let config = projected_volume(kubelet.path(), "config", &[("ca.crt", "not-a-token\n")]);
    let policy = format!(
        "version = 1\n[mounts]\nkubelet_root = {:?}\n",
        kubelet.path().display().to_string()
    );
    let cri = CriContainerd::start(CriOptions {
        policies: vec![(HARDENED_HANDLER.to_string(), policy)],
        ..CriOptions::with_shim(shim_binary().unwrap())
    })
    .unwrap();
    let pod = cri.run_pod("tokens", HARDENED_HANDLER).unwrap();
    let container = sleeper("agent")
        .host_path(&tokens, "/tokens", true)
        .host_path(&config, "/config", true);
    let id = cri.run_container(&pod, &container).unwrap();

    let out = cri
        .client()
        .exec_sync(
            &id,
            &[
                "sh",
                "-c",
                "ls /tokens 2>&1; cat /tokens/token 2>&1; cat /config/ca.crt; grep -c ' /tokens ' /proc/mounts",
            ],
            10,
        )
        .unwrap();
    assert!(
        !out.stdout.contains(SA_TOKEN),
        "the token is readable: {out}"
    );
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.len() == 4
            && lines[0].contains("No such file or directory")
            && lines[1].contains("No such file or directory")
            && lines[2] == "not-a-token"
            && lines[3] == "0",
        "{out}"
    );

    let audit = cri.audit_log();
    let create = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["event"] == "create" && v.to_string().contains(&id))
        .unwrap_or_else(|| panic!("no create record for {id}:\n{audit}"));
    let removed = create["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["field"] == "mounts[/tokens]")
        .unwrap_or_else(|| panic!("no decision for /tokens: {create}"));
    assert_eq!(removed["action"], "removed", "{removed}");
    assert!(
        removed["reason"]
            .as_str()
            .unwrap()
            .contains("holds a Kubernetes service-account token"),
        "{removed}"
    );
    assert!(!audit.contains(SA_TOKEN), "the token reached the audit log");

    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[id]);
    assert_clean_cri_shutdown(cri);
}

#[test]
fn a_pod_whose_shim_was_killed_reports_its_containers_exited_and_is_removed_leaving_nothing() {
    let cri = start();
    let pod = cri.run_pod("orphaned", HARDENED_HANDLER).unwrap();
    let a = cri.run_container(&pod, &sleeper("a")).unwrap();
    let b = cri.run_container(&pod, &sleeper("b")).unwrap();
    let shims = shim_processes(&cri, &pod.id);
    assert_eq!(shims.len(), 1, "{shims:#?}");

    // SAFETY: kill(2) with integer arguments, at the shim this test's containerd started.
    assert_eq!(unsafe { libc::kill(shims[0].pid, libc::SIGKILL) }, 0);
    // containerd's delete action runs for every task the dead shim served; each container
    // then reads as exited, as the kubelet needs to see before it restarts or removes them.
    for id in [&a, &b] {
        poll_until(
            "a container of the killed shim to read as exited",
            Duration::from_secs(30),
            || (state(&cri, id) == ContainerState::ContainerExited).then_some(()),
        )
        .unwrap_or_else(|e| panic!("{id}: {e}; state {:?}", state(&cri, id)));
    }
    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[a, b]);
    assert!(all_shims(&cri).is_empty());
    assert!(all_runsc_sandboxes(&cri).is_empty());
    assert_clean_cri_shutdown(cri);
}

/// A pod sharing its PID namespace (`shareProcessNamespace: true`): a container whose init
/// exits leaving a child behind is reported exited, as runc does, and the pod stops.
#[test]
fn a_container_in_a_shared_pid_namespace_whose_init_exits_is_reported_exited_and_stops() {
    let cri = start();
    let mut config = cri.pod_config("sharedpid");
    config.namespaces().pid = k8s_cri::v1::NamespaceMode::Pod as i32;
    let pod = cri.run_pod_with(config, HARDENED_HANDLER).unwrap();
    let mut leaver = container_config(
        "leaver",
        TEST_IMAGE_REF,
        &["sh", "-c", "sleep 1000 & sleep 2"],
    );
    leaver
        .linux
        .as_mut()
        .unwrap()
        .security_context
        .as_mut()
        .unwrap()
        .namespace_options
        .as_mut()
        .unwrap()
        .pid = k8s_cri::v1::NamespaceMode::Pod as i32;
    let id = cri.run_container(&pod, &leaver).unwrap();
    let exited = poll_until("the container to exit", Duration::from_secs(30), || {
        let (status, _) = cri.client().container_status(&id, false).ok()?;
        (ContainerState::try_from(status.state).ok()? == ContainerState::ContainerExited)
            .then_some(status)
    })
    .unwrap();
    assert_eq!(exited.exit_code, 0, "{exited:?}");
    // Before, both hung until their deadlines: containerd's delete waited for the output the
    // init's child kept open.
    cri.client().stop_container(&id, 10).unwrap();
    cri.remove_pod(&pod).unwrap();
    assert_pod_gone(&cri, &pod, &[id]);
    assert_clean_cri_shutdown(cri);
}
