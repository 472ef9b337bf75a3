//! crictl for real: the stack's crictl (hack/deps.sh) against the CRI harness's private
//! containerd (2.x on the current stack: config version 3, `io.containerd.cri.v1.runtime`),
//! the handlers `gvisor-hardened` and `gvisor-hardened-tool` registered by the node installer's
//! config code, real runsc. Pods go through `crictl runp/create/start/exec/logs/stopp/rmp` as an
//! operator debugging a node would; the harness only records them for its leak checks.

use std::time::Duration;

use gvisor_hardened_tests::cri::*;
use gvisor_hardened_tests::crictl::{log_file, Crictl};
use gvisor_hardened_tests::{poll_until, shim_binary, ProbeLine, TEST_IMAGE_REF};
use k8s_cri::v1::{ContainerConfig, PodSandboxConfig};

fn start() -> (CriContainerd, Crictl) {
    let cri = CriContainerd::start(CriOptions::with_shim(shim_binary().unwrap())).unwrap();
    let crictl = Crictl::new(&cri).unwrap();
    (cri, crictl)
}

/// `crictl runp --runtime HANDLER`, recorded with the harness.
fn runp(cri: &CriContainerd, crictl: &Crictl, config: PodSandboxConfig, handler: &str) -> Pod {
    let id = crictl.runp(&config, handler).unwrap();
    cri.adopt_pod(id, config, handler).unwrap()
}

/// `crictl create` + `crictl start`: the container's id.
fn run(crictl: &Crictl, pod: &Pod, config: &ContainerConfig) -> String {
    let out = crictl.create(&pod.id, &pod.config, config).unwrap();
    assert!(out.success(), "{out}");
    let id = out.stdout.trim().to_string();
    crictl.checked(["start", &id]).unwrap();
    id
}

/// `crictl stopp` + `crictl rmp`, then the kubelet's part (the pod's cgroup parent).
fn remove(cri: &CriContainerd, crictl: &Crictl, pod: &Pod, containers: &[String]) {
    let out = crictl.checked(["stopp", &pod.id]).unwrap();
    assert!(out.stdout.contains("Stopped sandbox"), "{out}");
    let out = crictl.checked(["rmp", &pod.id]).unwrap();
    assert!(out.stdout.contains("Removed sandbox"), "{out}");
    cri.forget_pod(&pod.id);
    assert_pod_gone(cri, pod, containers);
}

/// The probe lines of `commands`, run in one `crictl exec -s` (ExecSync).
fn probe(crictl: &Crictl, id: &str, commands: &[&str]) -> Vec<ProbeLine> {
    let script = commands
        .iter()
        .map(|c| format!("sandbox-probe {c}"))
        .collect::<Vec<_>>()
        .join("; ");
    let out = crictl
        .checked(["exec", "-s", id, "sh", "-c", &script])
        .unwrap();
    // ExecSync output through crictl ends with empty lines.
    let lines: Vec<ProbeLine> = out
        .stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| ProbeLine::parse(l).unwrap_or_else(|e| panic!("{e}\n{out}")))
        .collect();
    assert_eq!(lines.len(), commands.len(), "{out}");
    lines
}

#[track_caller]
fn assert_hardened(crictl: &Crictl, id: &str) {
    let r = probe(
        crictl,
        id,
        &["caps", "nnp", "ids", "write /srv/probe x", "uname"],
    );
    let [caps, nnp, ids, srv, uname] = &r[..] else {
        unreachable!()
    };
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(caps.field(set), Some("0000000000000000"), "{set}: {caps:?}");
    }
    assert_eq!(nnp.field("nnp"), Some("1"), "{nnp:?}");
    assert_eq!(ids.field("uid"), Some("65534"), "{ids:?}");
    assert_eq!(srv.errno(), Some("EROFS"), "{srv:?}");
    let release = uname.field("release").unwrap_or_default();
    assert!(
        gvisor_hardened_tests::stack::is_gvisor_release(release),
        "{uname:?}"
    );
    // What the hardening changed, where crictl inspect looks (containerd's copy of the spec,
    // which the shim annotates after the Create).
    let summary = gvisor_hardened_tests::poll::poll_until(
        "the hardening's summary in crictl inspect",
        std::time::Duration::from_secs(10),
        || {
            let out = crictl.checked(["inspect", id]).ok()?;
            let status: serde_json::Value = serde_json::from_str(&out.stdout).ok()?;
            status["info"]["runtimeSpec"]["annotations"]["gvisor-hardened.dev/decisions"]
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

/// `MemTotal` in kB as the sandbox's kernel reports it: the pod's memory ceiling.
fn mem_total_kb(crictl: &Crictl, id: &str) -> u64 {
    let out = crictl
        .checked(["exec", "-s", id, "grep", "MemTotal", "/proc/meminfo"])
        .unwrap();
    out.stdout
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"))
}

#[test]
fn a_two_container_pod_through_crictl_runs_hardened_and_is_removed_without_a_trace() {
    let system_config = std::path::Path::new("/etc/crictl.yaml");
    let had_system_config = system_config.exists();
    let (cri, crictl) = start();
    let pod = runp(&cri, &crictl, cri.pod_config("agent"), HARDENED_HANDLER);
    let a = container_config(
        "a",
        TEST_IMAGE_REF,
        &["sh", "-c", "echo a-out; echo a-err >&2; exec sleep 600"],
    );
    let b = container_config("b", TEST_IMAGE_REF, &["sleep", "600"]);
    let ids = [run(&crictl, &pod, &a), run(&crictl, &pod, &b)];

    let ps = crictl
        .checked(["ps", "--pod", &pod.id, "-o", "json"])
        .unwrap();
    let listed: serde_json::Value = serde_json::from_str(&ps.stdout).unwrap();
    let mut states: Vec<(String, String)> = listed["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().unwrap().into(),
                c["state"].as_str().unwrap().into(),
            )
        })
        .collect();
    states.sort();
    assert_eq!(
        states,
        [
            ("a".to_string(), "CONTAINER_RUNNING".to_string()),
            ("b".to_string(), "CONTAINER_RUNNING".to_string())
        ],
        "{ps}"
    );
    for id in &ids {
        assert_hardened(&crictl, id);
    }
    // The default handler's policy: 2Gi for the pod, as its kernel sees it.
    assert_eq!(mem_total_kb(&crictl, &ids[0]), 2 * 1024 * 1024);

    // Streaming exec through CRI's stream server (127.0.0.1), with and without a terminal.
    let exec = crictl.checked(["exec", &ids[1], "id", "-u"]).unwrap();
    assert_eq!(exec.stdout.trim(), "65534", "{exec}");
    let tty = crictl
        .command()
        .args(["exec", "-it", &ids[1], "sh"])
        .output_in_pty("[ -t 0 ] && echo CRICTL-TTY; exit 0\n")
        .unwrap();
    assert!(tty.success(), "{tty}");
    assert!(
        tty.stdout
            .lines()
            .any(|l| l.trim_end_matches('\r') == "CRICTL-TTY"),
        "{tty}"
    );

    // What the container wrote, through CRI's log file, both streams.
    poll_until("both lines in crictl logs", Duration::from_secs(30), || {
        let logs = crictl.checked(["logs", &ids[0]]).ok()?;
        (logs.stdout.contains("a-out") && logs.stderr.contains("a-err")).then_some(())
    })
    .unwrap();
    assert!(log_file(&pod.config, &a).is_file());

    // One shim and one runsc sandbox serve the pod; every decision is audited under the
    // handler's policy.
    assert_eq!(shim_processes(&cri, &pod.id).len(), 1);
    assert_eq!(runsc_sandbox_processes(&pod.id).len(), 1);
    let audit = cri.audit_log();
    let policy = cri.policy_path(HARDENED_HANDLER).unwrap();
    for id in [&pod.id, &ids[0], &ids[1]] {
        assert!(
            audit
                .lines()
                .any(|l| l.contains(id.as_str()) && l.contains(&policy.display().to_string())),
            "no audit line for {id} under {}",
            policy.display()
        );
    }

    remove(&cri, &crictl, &pod, &ids);
    let pods = crictl.checked(["pods", "-q"]).unwrap();
    assert_eq!(pods.stdout.trim(), "", "{pods}");
    assert_clean_cri_shutdown(cri);
    // crictl used its own config only.
    assert_eq!(system_config.exists(), had_system_config);
}

#[test]
fn the_tool_handler_runs_a_crictl_pod_under_the_tool_policy() {
    let (cri, crictl) = start();
    let pod = runp(
        &cri,
        &crictl,
        cri.pod_config("tool-call"),
        HARDENED_TOOL_HANDLER,
    );
    let id = run(
        &crictl,
        &pod,
        &container_config("tool", TEST_IMAGE_REF, &["sleep", "600"]),
    );
    assert_hardened(&crictl, &id);
    // The tool policy's 512Mi for the whole pod (the default handler's is 2Gi).
    assert_eq!(mem_total_kb(&crictl, &id), 512 * 1024);
    let tool_policy = cri.policy_path(HARDENED_TOOL_HANDLER).unwrap();
    let audit = cri.audit_log();
    for subject in [&pod.id, &id] {
        assert!(
            audit
                .lines()
                .any(|l| l.contains(subject.as_str())
                    && l.contains(&tool_policy.display().to_string())),
            "the tool policy did not govern {subject}"
        );
    }
    let inspect = crictl.checked(["inspectp", &pod.id]).unwrap();
    let status: serde_json::Value = serde_json::from_str(&inspect.stdout).unwrap();
    assert_eq!(
        status["status"]["runtimeHandler"], HARDENED_TOOL_HANDLER,
        "{inspect}"
    );
    remove(&cri, &crictl, &pod, &[id]);
    assert_clean_cri_shutdown(cri);
}

/// `crictl create` only records the container (CRI); `crictl start` runs the shim's Create,
/// which the policy refuses. Returns the refusal and the container's id (removed with its pod).
fn refused_at_start(crictl: &Crictl, pod: &Pod, config: &ContainerConfig) -> (String, String) {
    let created = crictl.create(&pod.id, &pod.config, config).unwrap();
    assert!(created.success(), "{created}");
    let id = created.stdout.trim().to_string();
    let out = crictl.output(["start", &id]).unwrap();
    assert!(!out.success(), "{out}");
    (out.stderr, id)
}

#[test]
fn crictl_is_refused_a_privileged_container_and_a_var_run_host_path_naming_the_rule() {
    let (cri, crictl) = start();

    // A privileged pod starts (its sandbox is hardened like any); its privileged container
    // is refused by the devices rule, saying it is privileged.
    let mut privileged = cri.pod_config("privileged");
    privileged.sandbox_security().privileged = true;
    let pod = runp(&cri, &crictl, privileged, HARDENED_HANDLER);
    let c = container_config("c", TEST_IMAGE_REF, &["sleep", "600"]).privileged();
    let (err, id) = refused_at_start(&crictl, &pod, &c);
    assert!(
        err.contains("rejected by policy: devices:") && err.contains("a privileged container"),
        "{err}"
    );
    eprintln!("privileged: {err}");
    remove(&cri, &crictl, &pod, &[id]);

    // A hostPath of /var/run: it holds containerd's socket directory.
    let pod = runp(&cri, &crictl, cri.pod_config("var-run"), HARDENED_HANDLER);
    let c =
        container_config("c", TEST_IMAGE_REF, &["sleep", "600"]).host_path("/var/run", "/x", false);
    let (err, id) = refused_at_start(&crictl, &pod, &c);
    // CRI resolves the hostPath's symlinks first: /var/run arrives as /run (crictl prints the
    // error quoted, so the rule's pattern is checked apart).
    assert!(
        err.contains(
            "rejected by policy: mounts: mounts[/x]: bind of denied host path: source /run matches or contains"
        ) && err.contains("/run/containerd/**"),
        "{err}"
    );
    eprintln!("hostPath /var/run: {err}");
    remove(&cri, &crictl, &pod, &[id]);

    let listed = crictl.checked(["ps", "-a", "-q"]).unwrap();
    assert_eq!(listed.stdout.trim(), "", "{listed}");
    let pods = crictl.checked(["pods", "-q"]).unwrap();
    assert_eq!(pods.stdout.trim(), "", "{pods}");
    assert_clean_cri_shutdown(cri);
}

/// `crictl metricsp` (CRI ListPodSandboxMetrics, what replaces cAdvisor's endpoint): a hardened
/// pod reports every metric a runc pod on the same node reports. The sentry does not account
/// CPU throttling, kernel memory, swap or OOM kills per container: those come from the
/// sandbox's cgroup (before, the hardened pod left them out).
#[test]
fn a_hardened_pod_reports_every_pod_metric_a_runc_pod_does() {
    let (cri, crictl) = start();
    let mut pods = Vec::new();
    for (name, handler) in [
        ("metrics-runc", RUNC_HANDLER),
        ("metrics-gvh", HARDENED_HANDLER),
    ] {
        let pod = runp(&cri, &crictl, cri.pod_config(name), handler);
        let id = run(
            &crictl,
            &pod,
            &container_config("c", TEST_IMAGE_REF, &["sleep", "600"]),
        );
        pods.push((pod, id));
    }
    let names = |pod: &Pod| -> std::collections::BTreeSet<String> {
        let out = crictl.checked(["metricsp", "-o", "json"]).unwrap();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        v["podMetrics"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["podSandboxId"] == pod.id.as_str())
            .flat_map(|p| {
                let pod_level = p["metrics"].as_array().cloned().unwrap_or_default();
                let containers = p["containerMetrics"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .flat_map(|c| c["metrics"].as_array().cloned().unwrap_or_default());
                pod_level.into_iter().chain(containers).collect::<Vec<_>>()
            })
            .filter_map(|m| m["name"].as_str().map(str::to_string))
            .collect()
    };
    let runc = names(&pods[0].0);
    let ours = names(&pods[1].0);
    let missing: Vec<&String> = runc.difference(&ours).collect();
    assert!(!runc.is_empty());
    assert!(
        missing.is_empty(),
        "missing under gvisor-hardened: {missing:?}\nrunc: {runc:?}\nours: {ours:?}"
    );
    for (pod, id) in &pods {
        remove(&cri, &crictl, pod, std::slice::from_ref(id));
    }
    assert_clean_cri_shutdown(cri);
}
