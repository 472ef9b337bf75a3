//! A real one-node Kubernetes cluster (`hack/kube-node.sh up`): pods of our RuntimeClasses
//! started by the kubelet, checked through the API server with kubectl; the admission policies
//! evaluated by the real API server. One node for the whole module, in one test
//! (`cases_on_one_node`): `up` once, the cases in order, `down` at the end, which fails if
//! anything of the node is left.
//!
//! `GVH_KUBE_CASES=WORD[,WORD...] hack/integration.sh kube_node` runs the cases whose name
//! contains a word (all of them without it); needs root and the shim built.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gvisor_hardened_tests::cri::runsc_sandbox_processes;
use gvisor_hardened_tests::kube::cases::{
    self, assert_hardened, exec_ok, ns, probe, run, sandbox_id, sleeper, Case, Ctx, READY, REPO,
};
use gvisor_hardened_tests::kube::{
    uninstall_directly, InstallerOverlay, PodSpec, PodWatch, NODE_NAME,
};
use gvisor_hardened_tests::{poll_until, TEST_IMAGE_REF};
use serde_json::json;

/// The cases below on one node, in order (`GVH_KUBE_CASES=word,...`: those whose names contain
/// a word). One test, not one per case: they share the node, which takes minutes to bring up.
#[test]
fn cases_on_one_node() {
    cases::run_on_one_node("kube_node", CASES);
}

const CASES: &[(&str, Case)] = &[
    (
        "runc_pod_keeps_running_across_a_containerd_restart",
        runc_pod_keeps_running_across_a_containerd_restart,
    ),
    (
        "hardened_pod_is_hardened_inside",
        hardened_pod_is_hardened_inside,
    ),
    (
        "runtimeclass_overhead_is_in_the_pod",
        runtimeclass_overhead_is_in_the_pod,
    ),
    (
        "tool_and_agent_classes_run_under_their_own_policies",
        tool_and_agent_classes_run_under_their_own_policies,
    ),
    (
        "two_containers_share_one_sandbox",
        two_containers_share_one_sandbox,
    ),
    (
        "exec_it_attach_logs_follow_and_cp",
        exec_it_attach_logs_follow_and_cp,
    ),
    (
        "wall_clock_limit_stops_the_pod",
        wall_clock_limit_stops_the_pod,
    ),
    ("oom_shows_oomkilled", oom_shows_oomkilled),
    ("admission_by_the_api_server", admission_by_the_api_server),
    // Last: it takes the harness's own install out first.
    (
        "installer_daemonset_installs_and_uninstalls",
        installer_daemonset_installs_and_uninstalls,
    ),
];

fn runc_pod_keeps_running_across_a_containerd_restart(ctx: &Ctx) {
    let ns = ns(ctx, "plain");
    let pod = sleeper("runc-restart", &ns, None);
    run(ctx, &pod);
    let uid = exec_ok(ctx, &ns, &pod.name, "app", &["id", "-u"]);
    assert_eq!(uid.trim(), "0", "runc runs the image's user");
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let uname = exec_ok(ctx, &ns, &pod.name, "app", &["uname", "-r"]);
    assert_eq!(uname.trim(), host.trim(), "runc shares the host's kernel");
    let started = ctx.node.jsonpath(
        &ns,
        "pod/runc-restart",
        "{.status.containerStatuses[0].state.running.startedAt}",
    );
    ctx.node.restart_containerd().unwrap();
    // The container is the same one (not restarted) and answers through the new containerd.
    poll_until("exec through the restarted containerd", READY, || {
        ctx.node
            .exec(&ns, &pod.name, "app", &["true"])
            .ok()?
            .success()
            .then_some(())
    })
    .unwrap();
    let after = ctx.node.jsonpath(
        &ns,
        "pod/runc-restart",
        "{.status.containerStatuses[0].state.running.startedAt}",
    );
    assert_eq!(started, after);
    let restarts = ctx.node.jsonpath(
        &ns,
        "pod/runc-restart",
        "{.status.containerStatuses[0].restartCount}",
    );
    assert_eq!(restarts, "0");
    ctx.node.delete_pod(&ns, &pod.name).unwrap();
}

fn hardened_pod_is_hardened_inside(ctx: &Ctx) {
    let ns = ns(ctx, "hardened");
    let pod = PodSpec::new("hardened", &ns, TEST_IMAGE_REF)
        .runtime_class("gvisor-hardened")
        .container(
            "app",
            &["sh", "-c", "echo started-$(id -u); exec sleep 600"],
        );
    run(ctx, &pod);
    assert_hardened(ctx, &ns, "hardened", "app");
    // The kubelet mounted the service-account token (automount is on by default); the runtime
    // removed it.
    let mounts = ctx.node.jsonpath(
        &ns,
        "pod/hardened",
        "{.spec.containers[0].volumeMounts[*].mountPath}",
    );
    assert!(
        mounts.contains("/var/run/secrets/kubernetes.io/serviceaccount"),
        "{mounts}"
    );
    let token = ctx
        .node
        .exec(
            &ns,
            "hardened",
            "app",
            &["cat", "/var/run/secrets/kubernetes.io/serviceaccount/token"],
        )
        .unwrap();
    assert!(!token.success(), "the token is readable: {token}");
    let logs = ctx
        .node
        .kubectl()
        .args(["-n", &ns, "logs", "hardened"])
        .checked()
        .unwrap();
    assert_eq!(logs.stdout.trim(), "started-65534", "{logs}");
    // The scratch tmpfs mounts have the policy's sizes (default policy: /tmp 1Gi, /var/tmp
    // 100Mi, /run 64Mi).
    for (path, size) in [
        ("/tmp", 1u64 << 30),
        ("/var/tmp", 100 << 20),
        ("/run", 64 << 20),
    ] {
        let st = probe(ctx, &ns, "hardened", "app", &format!("statfs {path}"));
        assert_eq!(st.field("fstype"), Some("tmpfs"), "{st:?}");
        let field = |k: &str| st.field(k).and_then(|v| v.parse::<u64>().ok()).unwrap();
        assert_eq!(field("bsize") * field("blocks"), size, "{path}: {st:?}");
    }
    let audit = ctx.installed.audit_log();
    let uid = ctx.node.jsonpath(&ns, "pod/hardened", "{.metadata.uid}");
    assert!(
        audit
            .lines()
            .any(|l| l.contains(&uid) || l.contains("hardened")),
        "no audit line for the pod"
    );
    ctx.node.delete_pod(&ns, "hardened").unwrap();
}

fn runtimeclass_overhead_is_in_the_pod(ctx: &Ctx) {
    let ns = ns(ctx, "overhead");
    let pod = sleeper("overhead", &ns, Some("gvisor-hardened"));
    ctx.node.apply(&pod.to_yaml()).unwrap();
    let overhead = ctx
        .node
        .wait_field(&ns, "overhead", "{.spec.overhead}", READY)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&overhead).unwrap();
    assert_eq!(v, json!({"cpu": "20m", "memory": "40Mi"}), "{overhead}");
    ctx.node.delete_pod(&ns, "overhead").unwrap();
}

fn tool_and_agent_classes_run_under_their_own_policies(ctx: &Ctx) {
    let ns = ns(ctx, "classes");
    for class in ["gvisor-hardened-tool", "gvisor-hardened-agent"] {
        let pod = sleeper(class, &ns, Some(class));
        run(ctx, &pod);
        assert_hardened(ctx, &ns, class, "app");
        let policy = ctx.installed.policy_path(class).unwrap();
        let cid = ctx.node.jsonpath(
            &ns,
            &format!("pod/{class}"),
            "{.status.containerStatuses[0].containerID}",
        );
        let cid = cid.trim_start_matches("containerd://").to_string();
        let audit = ctx.installed.audit_log();
        assert!(
            audit
                .lines()
                .any(|l| l.contains(&cid) && l.contains(&policy.display().to_string())),
            "no audit line for {cid} under {}",
            policy.display()
        );
    }
    // The tool class's memory ceiling is what the sandbox sees (gVisor sizes its memory to it).
    let meminfo = exec_ok(
        ctx,
        &ns,
        "gvisor-hardened-tool",
        "app",
        &["cat", "/proc/meminfo"],
    );
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap();
    assert!(
        total_kib <= 512 * 1024,
        "MemTotal {total_kib} kB over the tool policy's 512Mi"
    );
    for class in ["gvisor-hardened-tool", "gvisor-hardened-agent"] {
        ctx.node.delete_pod(&ns, class).unwrap();
    }
}

fn two_containers_share_one_sandbox(ctx: &Ctx) {
    let ns = ns(ctx, "two");
    let pod = PodSpec::new("two", &ns, TEST_IMAGE_REF)
        .runtime_class("gvisor-hardened")
        .container("a", &["sleep", "600"])
        .container("b", &["sleep", "600"]);
    run(ctx, &pod);
    for c in ["a", "b"] {
        assert_hardened(ctx, &ns, "two", c);
    }
    // Both containers see the same sandbox: the same gVisor boot (its kernel log) and one
    // runsc-sandbox process for the pod.
    let a = exec_ok(ctx, &ns, "two", "a", &["dmesg"]);
    let b = exec_ok(ctx, &ns, "two", "b", &["dmesg"]);
    assert_eq!(a.lines().next(), b.lines().next());
    let sandbox = sandbox_id(ctx, &ns, "two");
    let sandboxes = runsc_sandbox_processes(&sandbox);
    assert_eq!(sandboxes.len(), 1, "{sandboxes:#?}");
    ctx.node.delete_pod(&ns, "two").unwrap();
}

fn exec_it_attach_logs_follow_and_cp(ctx: &Ctx) {
    let ns = ns(ctx, "streams");
    let pod = PodSpec::new("streams", &ns, TEST_IMAGE_REF)
        .runtime_class("gvisor-hardened")
        .container(
            "app",
            &[
                "sh",
                "-c",
                "i=0; while true; do echo tick-$i; i=$((i+1)); sleep 1; done",
            ],
        )
        .container(
            "reader",
            &["sh", "-c", "read line; echo got-$line; sleep 600"],
        );
    // attach needs a container with stdin: the second one.
    let mut manifest = pod.to_json();
    manifest["spec"]["containers"][1]["stdin"] = json!(true);
    manifest["spec"]["containers"][1]["stdinOnce"] = json!(true);
    ctx.node.apply(&manifest.to_string()).unwrap();
    ctx.node.wait_ready(&ns, "streams", READY).unwrap();

    // exec -it: a shell on a terminal.
    let out = ctx
        .node
        .kubectl()
        .args(["-n", &ns, "exec", "-it", "streams", "-c", "app", "--", "sh"])
        .output_in_pty("[ -t 0 ] && echo on-a-terminal; id -u; exit 3\n")
        .unwrap();
    // The shell prompts (busybox sh does only on a terminal) and stdin is one.
    assert!(out.stdout.contains("/ $ "), "{out}");
    assert!(out.stdout.contains("\non-a-terminal"), "{out}");
    assert!(out.stdout.contains("65534"), "{out}");
    assert_eq!(out.code(), 3, "{out}");

    // logs -f: lines keep coming.
    let mut cmd = ctx.node.kubectl_command();
    cmd.args(["-n", &ns, "logs", "-f", "streams", "-c", "app"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match lines.next() {
            Some(Ok(l)) => seen.push(l),
            _ => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|l| l.starts_with("tick-")), "{seen:?}");

    // attach: our stdin reaches the container's.
    let mut cmd = ctx.node.kubectl_command();
    cmd.args(["-n", &ns, "attach", "-i", "streams", "-c", "reader"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // attach may connect after our line is written: write until the container read it.
    poll_until("attach to deliver a line", Duration::from_secs(60), || {
        let _ = stdin.write_all(b"hello\n");
        let logs = ctx
            .node
            .kubectl()
            .args(["-n", &ns, "logs", "streams", "-c", "reader"])
            .output()
            .ok()?;
        logs.stdout.contains("got-hello").then_some(())
    })
    .unwrap();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();

    // cp: into the writable scratch and back.
    let src = tempfile_path("cp-in");
    std::fs::write(&src, "copied through kubectl cp\n").unwrap();
    ctx.node
        .kubectl()
        .args(["-n", &ns, "cp", "-c", "app"])
        .arg(&src)
        .arg("streams:/tmp/cp-in")
        .checked()
        .unwrap();
    let inside = exec_ok(ctx, &ns, "streams", "app", &["cat", "/tmp/cp-in"]);
    assert_eq!(inside, "copied through kubectl cp\n");
    let back = tempfile_path("cp-out");
    ctx.node
        .kubectl()
        .args(["-n", &ns, "cp", "-c", "app", "streams:/tmp/cp-in"])
        .arg(&back)
        .checked()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&back).unwrap(),
        "copied through kubectl cp\n"
    );
    let _ = std::fs::remove_file(src);
    let _ = std::fs::remove_file(back);
    ctx.node.delete_pod(&ns, "streams").unwrap();
}

fn tempfile_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("gvh-kube-{name}-{}", std::process::id()))
}

/// A container over its Kubernetes memory limit: the kubelet makes that limit (plus the
/// RuntimeClass overhead) the pod cgroup's, the sandbox is the pod's one process tree, so the
/// memory cgroup kills the sandbox; the shim's TaskOOM makes containerd say `OOMKilled`.
fn oom_shows_oomkilled(ctx: &Ctx) {
    let ns = ns(ctx, "oom");
    let pod = PodSpec::new("oom", &ns, TEST_IMAGE_REF)
        .runtime_class("gvisor-hardened")
        .container("app", &["/bin/sandbox-probe", "mem", "1024", "60"])
        .each_container(json!({"resources": {"limits": {"memory": "128Mi"}}}));
    ctx.node.apply(&pod.to_yaml()).unwrap();
    let reason = ctx.node.wait_field(
        &ns,
        "oom",
        "{.status.containerStatuses[0].state.terminated.reason}",
        READY,
    );
    let reason = reason.unwrap_or_else(|e| {
        // What the pod and the sandbox were doing, for a run where the kill never came.
        let status = ctx.node.jsonpath(&ns, "pod/oom", "{.status}");
        let sandbox = sandbox_id(ctx, &ns, "oom");
        let procs: Vec<String> = gvisor_hardened_tests::inspect::processes_mentioning(&sandbox)
            .iter()
            .map(|p| {
                let stat =
                    std::fs::read_to_string(format!("/proc/{}/status", p.pid)).unwrap_or_default();
                let keep = |k: &str| {
                    stat.lines()
                        .find(|l| l.starts_with(k))
                        .unwrap_or("")
                        .to_string()
                };
                format!(
                    "{} {} | {} | {}",
                    p.pid,
                    &p.cmdline[..p.cmdline.len().min(60)],
                    keep("State:"),
                    keep("VmRSS:")
                )
            })
            .collect();
        panic!(
            "{e}\nstatus {status}\nsandbox {sandbox} processes:\n{}",
            procs.join("\n")
        );
    });
    let state = ctx.node.jsonpath(
        &ns,
        "pod/oom",
        "{.status.containerStatuses[0].state.terminated}",
    );
    println!("  oom: terminated state {state}");
    assert_eq!(reason, "OOMKilled", "{state}");
    ctx.node.delete_pod(&ns, "oom").unwrap();
}

fn wall_clock_limit_stops_the_pod(ctx: &Ctx) {
    let ns = ns(ctx, "lifetime");
    let pod = PodSpec::new("lifetime", &ns, TEST_IMAGE_REF)
        .runtime_class("gvisor-hardened")
        .annotation("gvisor-hardened.dev/max-runtime", "5s")
        .container("app", &["sleep", "600"]);
    ctx.node.apply(&pod.to_yaml()).unwrap();
    let t = Instant::now();
    let code = ctx
        .node
        .wait_field(
            &ns,
            "lifetime",
            "{.status.containerStatuses[0].state.terminated.exitCode}",
            READY,
        )
        .unwrap();
    assert!(t.elapsed() < Duration::from_secs(90), "{:?}", t.elapsed());
    assert!(code == "137" || code == "143", "exit code {code}");
    let state = ctx.node.jsonpath(
        &ns,
        "pod/lifetime",
        "{.status.containerStatuses[0].state.terminated}",
    );
    println!("  lifetime: terminated state {state}");
    poll_until("the pod to fail", READY, || {
        (ctx.node.jsonpath(&ns, "pod/lifetime", "{.status.phase}") == "Failed").then_some(())
    })
    .unwrap();
    // containerd's reason is `Error`; why is in the message the kubelet read from the
    // container's termination-message file, where the shim wrote it before the exit.
    let message = ctx.node.jsonpath(
        &ns,
        "pod/lifetime",
        "{.status.containerStatuses[0].state.terminated.message}",
    );
    assert_eq!(
        message.trim(),
        "gvisor-hardened: stopped at the policy's maximum runtime (5s)",
        "{state}"
    );
    // The audit log has the same, with the container's and the pod's ids.
    let cid = ctx.node.jsonpath(
        &ns,
        "pod/lifetime",
        "{.status.containerStatuses[0].containerID}",
    );
    let cid = cid.trim_start_matches("containerd://").to_string();
    let sandbox = sandbox_id(ctx, &ns, "lifetime");
    let audit = ctx.installed.audit_log();
    let mentions: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains(&cid) || l.contains(&sandbox))
        .collect();
    assert!(
        mentions.iter().any(|l| l.contains("\"event\":\"timeout\"")),
        "no timeout record for container {cid} or sandbox {sandbox}: {mentions:#?}"
    );
    ctx.node.delete_pod(&ns, "lifetime").unwrap();
}

/// `kubectl create --dry-run=server` of `manifest` (admission runs, nothing is stored), as the
/// admin or as `as_user` in `groups`.
fn dry_run(
    ctx: &Ctx,
    manifest: &serde_json::Value,
    as_user: Option<(&str, &str)>,
) -> Result<String, String> {
    let mut cmd = ctx
        .node
        .kubectl()
        .args(["create", "--dry-run=server", "-o", "json", "-f", "-"]);
    if let Some((user, group)) = as_user {
        cmd = cmd.args(["--as", user, "--as-group", group]);
    }
    let out = cmd
        .stdin(manifest.to_string().into_bytes())
        .output()
        .unwrap();
    if out.success() {
        Ok(out.stdout)
    } else {
        Err(out.stderr)
    }
}

/// Polls until creating `manifest` is refused with `message` (a new policy takes effect once the
/// API server's policy informer has it), then checks the refusal names the policy.
fn assert_refused(ctx: &Ctx, manifest: &serde_json::Value, message: &str) {
    let mut last = String::new();
    let refused = poll_until(
        &format!("refusal: {message}"),
        Duration::from_secs(60),
        || match dry_run(ctx, manifest, None) {
            Err(e) if e.contains(message) => Some(e),
            Err(e) => {
                last = e;
                None
            }
            Ok(_) => {
                last = "accepted".into();
                None
            }
        },
    );
    let e =
        refused.unwrap_or_else(|_| panic!("not refused with {message:?}: {last}\n{manifest:#}"));
    assert!(e.contains("ValidatingAdmissionPolicy"), "{e}");
}

fn assert_accepted(ctx: &Ctx, manifest: &serde_json::Value) -> serde_json::Value {
    let out = dry_run(ctx, manifest, None).unwrap_or_else(|e| panic!("refused: {e}\n{manifest:#}"));
    serde_json::from_str(&out).unwrap()
}

fn admission_by_the_api_server(ctx: &Ctx) {
    let k = &ctx.node;
    k.kubectl()
        .args(["apply", "-k"])
        .arg(format!("{REPO}/runtimeclass/admission"))
        .checked()
        .unwrap();
    let enforced = ns(ctx, "enforced");
    k.kubectl()
        .args([
            "label",
            "namespace",
            &enforced,
            "gvisor-hardened.dev/enforce=true",
        ])
        .checked()
        .unwrap();
    let plain = ns(ctx, "not-enforced");
    let system = ns(ctx, "gvisor-hardened-system");
    k.kubectl()
        .args([
            "label",
            "namespace",
            &system,
            "gvisor-hardened.dev/enforce=true",
        ])
        .checked()
        .unwrap();

    // A RuntimeClass that is not ours (the built-in RuntimeClass admission refuses a pod whose
    // class does not exist, before any policy sees it).
    let other = json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": "other"}, "handler": "runc"});
    k.apply(&other.to_string()).unwrap();
    let good = || sleeper("p", &enforced, Some("gvisor-hardened"));
    let with = |extra: serde_json::Value| good().spec(extra).to_json();

    // require-runtimeclass
    let require = "this namespace enforces gvisor-hardened";
    assert_refused(ctx, &sleeper("p", &enforced, None).to_json(), require);
    assert_refused(
        ctx,
        &sleeper("p", &enforced, Some("other")).to_json(),
        require,
    );
    for class in [
        "gvisor-hardened",
        "gvisor-hardened-tool",
        "gvisor-hardened-agent",
    ] {
        assert_accepted(ctx, &sleeper("p", &enforced, Some(class)).to_json());
    }
    // Bound by the namespace label, the installer's namespace exempt.
    assert_accepted(ctx, &sleeper("p", &plain, None).to_json());
    assert_accepted(ctx, &sleeper("p", &system, None).to_json());

    // deny-host-access, one expression at a time.
    assert_refused(
        ctx,
        &with(json!({"hostNetwork": true})),
        "hostNetwork is not allowed",
    );
    assert_accepted(ctx, &with(json!({"hostNetwork": false})));
    assert_refused(
        ctx,
        &with(json!({"hostPID": true})),
        "hostPID is not allowed",
    );
    assert_accepted(ctx, &with(json!({"hostPID": false})));
    assert_refused(
        ctx,
        &with(json!({"hostIPC": true})),
        "hostIPC is not allowed",
    );
    assert_accepted(ctx, &with(json!({"hostIPC": false})));
    let host_path =
        json!({"volumes": [{"name": "h", "hostPath": {"path": "/var/run/containerd"}}]});
    assert_refused(ctx, &with(host_path), "hostPath volumes are not allowed");
    assert_accepted(
        ctx,
        &with(json!({"volumes": [{"name": "e", "emptyDir": {}}]})),
    );
    let privileged = |on: bool| {
        good()
            .each_container(json!({"securityContext": {"privileged": on}}))
            .to_json()
    };
    assert_refused(
        ctx,
        &privileged(true),
        "privileged containers are not allowed",
    );
    assert_accepted(ctx, &privileged(false));
    let init = json!({"initContainers": [{"name": "i", "image": TEST_IMAGE_REF, "imagePullPolicy": "Never",
        "command": ["true"], "securityContext": {"privileged": true}}]});
    assert_refused(ctx, &with(init), "privileged containers are not allowed");

    // deny-token-volumes: a projected token only at the standard path.
    let token_at = |path: &str| {
        good()
            .spec(json!({"automountServiceAccountToken": false, "volumes": [{"name": "tok",
                "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}]}}]}))
            .each_container(json!({"volumeMounts": [{"name": "tok", "mountPath": path}]}))
            .to_json()
    };
    assert_refused(
        ctx,
        &token_at("/opt/token"),
        "a projected serviceAccountToken volume may only be mounted at",
    );
    assert_accepted(
        ctx,
        &token_at("/var/run/secrets/kubernetes.io/serviceaccount"),
    );

    // protect-runtimeclasses: the admin may not drop the nodeSelector (the API server itself
    // refuses a new handler: the field is immutable); only admins may delete.
    let mut rc: serde_json::Value = serde_json::from_str(
        &k.kubectl()
            .args(["get", "runtimeclass", "gvisor-hardened", "-o", "json"])
            .checked()
            .unwrap()
            .stdout,
    )
    .unwrap();
    rc["scheduling"] = json!(null);
    let replaced = k
        .kubectl()
        .args(["replace", "--dry-run=server", "-f", "-"])
        .stdin(rc.to_string().into_bytes())
        .output()
        .unwrap();
    assert!(
        !replaced.success()
            && replaced
                .stderr
                .contains("must keep handler equal to its name"),
        "{replaced}"
    );
    let rbac = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "gvh-test-rc"},
         "rules": [{"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["*"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "gvh-test-rc"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gvh-test-rc"},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"},
                      {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "gvisor-hardened:admins"}]}]});
    k.apply(&rbac.to_string()).unwrap();
    let delete_as = |group: &str| {
        k.kubectl()
            .args([
                "delete",
                "runtimeclass",
                "gvisor-hardened",
                "--dry-run=server",
                "--as",
                "alice",
                "--as-group",
                group,
            ])
            .output()
            .unwrap()
    };
    let out = poll_until("RBAC for the test group", Duration::from_secs(30), || {
        let out = delete_as("devs");
        (!out.stderr.contains("forbidden: User")
            || out.stderr.contains("ValidatingAdmissionPolicy"))
        .then_some(out)
    })
    .unwrap();
    assert!(
        !out.success()
            && out
                .stderr
                .contains("only members of gvisor-hardened:admins"),
        "{out}"
    );
    let out = delete_as("gvisor-hardened:admins");
    assert!(out.success(), "{out}");
    // Other RuntimeClasses are not ours to protect.
    let out = k
        .kubectl()
        .args([
            "delete",
            "runtimeclass",
            "other",
            "--dry-run=server",
            "--as",
            "alice",
            "--as-group",
            "devs",
        ])
        .output()
        .unwrap();
    assert!(out.success(), "{out}");

    // The MutatingAdmissionPolicy (admissionregistration.k8s.io/v1 in this release) sets the
    // class where none is given, and leaves a given one alone.
    k.kubectl()
        .args(["apply", "-k"])
        .arg(format!("{REPO}/runtimeclass/admission-mutating"))
        .checked()
        .unwrap();
    let bare = sleeper("p", &enforced, None).to_json();
    let mutated = poll_until(
        "the mutating policy to set the class",
        Duration::from_secs(60),
        || {
            let out = dry_run(ctx, &bare, None).ok()?;
            let pod: serde_json::Value = serde_json::from_str(&out).ok()?;
            (pod["spec"]["runtimeClassName"] == "gvisor-hardened").then_some(pod)
        },
    )
    .unwrap();
    // The RuntimeClass admission then added its overhead too.
    assert_eq!(mutated["spec"]["overhead"]["memory"], "40Mi", "{mutated:#}");
    let tool = assert_accepted(
        ctx,
        &sleeper("p", &enforced, Some("gvisor-hardened-tool")).to_json(),
    );
    assert_eq!(tool["spec"]["runtimeClassName"], "gvisor-hardened-tool");
    let untouched = assert_accepted(ctx, &sleeper("p", &plain, None).to_json());
    assert!(
        untouched["spec"].get("runtimeClassName").is_none(),
        "{untouched:#}"
    );

    k.kubectl()
        .args(["delete", "-k"])
        .arg(format!("{REPO}/runtimeclass/admission-mutating"))
        .checked()
        .unwrap();
    k.kubectl()
        .args(["delete", "-k"])
        .arg(format!("{REPO}/runtimeclass/admission"))
        .checked()
        .unwrap();
    k.kubectl()
        .args(["delete", "clusterrolebinding,clusterrole", "gvh-test-rc"])
        .checked()
        .unwrap();
}

fn node_label(ctx: &Ctx) -> String {
    ctx.node.jsonpath(
        "default",
        &format!("node/{NODE_NAME}"),
        "{.metadata.labels.gvisor-hardened\\.dev/installed}",
    )
}

/// The `policy.path` of the container's create record in an audit log.
fn create_record_policy(log: &str, container_id: &str) -> Option<String> {
    log.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|r| r["event"] == "create" && r["container_id"] == container_id)
        .and_then(|r| r["policy"]["path"].as_str().map(str::to_string))
}

/// The value of the sample `name` + `labels` (`{policy="..."}` or empty) in an exposition.
fn sample(exposition: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{labels} ");
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

const INSTALLER_NS: &str = "gvisor-hardened-system";
/// The exporter's DaemonSet and its pods' label (deploy/kustomize/base/metrics.yaml).
const METRICS_DAEMONSET: &str = "gvisor-hardened-metrics";
const METRICS_SELECTOR: &str =
    "app.kubernetes.io/name=gvisor-hardened,app.kubernetes.io/component=metrics";
/// The exporter's command line as the DaemonSet runs it.
const EXPORTER_CMDLINE: &str =
    "policy-injector audit metrics --log /var/log/gvisor-hardened/audit.jsonl --listen 0.0.0.0:9464";

/// The exporter's families that count the hardened pod, by its policy.
const COUNTED: [&str; 3] = [
    "gvh_sandboxes_created_total",
    "gvh_sandboxes_running",
    "gvh_containers_created_total",
];

/// Scrapes the node's exporter pod (port 9464, the metrics DaemonSet's `metrics` port), found
/// by its own labels, at its IP on the node's bridge with the Secret's bearer token, as a
/// Prometheus discovering the pod would (the API server's pod proxy cannot carry the token:
/// it consumes the Authorization header). Polls until the hardened pod's sandbox is counted
/// under `policy` and the chain gauge is 1; the exporter follows the log every 250 ms, and the
/// pod may still be coming up. Without the token the same scrape is refused (401).
fn assert_exporter_counts(ctx: &Ctx, overlay: &InstallerOverlay, policy: &str) {
    let k = &ctx.node;
    let labels = format!("{{policy=\"{policy}\"}}");
    let mut last = String::new();
    let scraped = poll_until("the exporter pod to count the pod", READY, || {
        let ip = k
            .kubectl()
            .args([
                "-n",
                INSTALLER_NS,
                "get",
                "pods",
                "-l",
                METRICS_SELECTOR,
                "-o",
            ])
            .arg("jsonpath={.items[0].status.podIP}")
            .output()
            .ok()?;
        let addr = std::net::SocketAddr::new(ip.stdout.trim().parse().ok()?, 9464);
        let (status, text) =
            gvisor_hardened_tests::http_get::get(addr, "/metrics", Some(&overlay.metrics_token))
                .ok()?;
        last = format!("{status}: {text}");
        if status != 200 {
            return None;
        }
        let unauthenticated = gvisor_hardened_tests::http_get::get(addr, "/metrics", None).ok()?;
        assert_eq!(unauthenticated.0, 401, "{}", unauthenticated.1);
        // One pod: its sandbox (pause) and its app container; at least, as the kubelet
        // may have retried a create cut off by the installer's containerd restart.
        let counted = COUNTED
            .iter()
            .zip([1.0, 1.0, 2.0])
            .all(|(name, min)| sample(&text, name, &labels).is_some_and(|v| v >= min))
            && sample(&text, "gvh_audit_chain_intact", "")? == 1.0;
        counted.then_some(text)
    });
    let text = scraped.unwrap_or_else(|e| {
        let logs = k
            .kubectl()
            .args([
                "-n",
                INSTALLER_NS,
                "logs",
                &format!("daemonset/{METRICS_DAEMONSET}"),
            ])
            .args(["-c", "metrics"])
            .output()
            .map(|o| format!("{o}"))
            .unwrap_or_default();
        panic!("{e}\nlast scrape: {last}\nmetrics container logs: {logs}")
    });
    let seen: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("gvh_audit_chain_intact ")
                || COUNTED
                    .iter()
                    .any(|n| l.starts_with(&format!("{n}{labels} ")))
        })
        .collect();
    println!(
        "exporter at its pod IP, with the token: {}",
        seen.join("; ")
    );
    // The kubelet's readiness probe (GET /healthz on the named port, no token) passes too.
    poll_until("the metrics container ready", READY, || {
        let out = k
            .kubectl()
            .args([
                "-n",
                INSTALLER_NS,
                "get",
                "pods",
                "-l",
                METRICS_SELECTOR,
                "-o",
            ])
            .arg("jsonpath={.items[*].status.containerStatuses[?(@.name==\"metrics\")].ready}")
            .output()
            .ok()?;
        (out.stdout.trim() == "true").then_some(())
    })
    .unwrap();
    // No other policy ran a sandbox under the installed shim: one series.
    let policies: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gvh_sandboxes_created_total{"))
        .collect();
    assert_eq!(policies.len(), 1, "{text}");
}

/// The pid namespace `pid` is in (`pid:[inode]`).
fn pid_namespace(pid: impl std::fmt::Display) -> String {
    let link = format!("/proc/{pid}/ns/pid");
    std::fs::read_link(&link)
        .unwrap_or_else(|e| panic!("{link}: {e}"))
        .display()
        .to_string()
}

/// What the counts above were read with: the exporter process (seen from the host, which sees
/// every process of the node) runs as uid 0 with no capability at all and no_new_privs, sees
/// no host `/`, and the log it read is root's, mode 0600: the owner's bits alone let it read.
/// Its PID namespace is not the node's: uid 0 there can signal nothing of the node's.
fn assert_exporter_unprivileged(ctx: &Ctx, overlay: &InstallerOverlay) {
    let procs = gvisor_hardened_tests::inspect::processes_mentioning(EXPORTER_CMDLINE);
    assert_eq!(procs.len(), 1, "{procs:?}");
    let pid = procs[0].pid;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    assert_eq!(field("Uid"), "0 0 0 0", "{status}");
    for caps in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(field(caps), "0000000000000000", "{caps}: {status}");
    }
    assert_eq!(field("NoNewPrivs"), "1", "{status}");
    // PID 1 of its own namespace: no other process of the node is visible to it.
    assert_eq!(field("NSpid").split(' ').next_back(), Some("1"), "{status}");
    let root = std::path::PathBuf::from(format!("/proc/{pid}/root"));
    assert!(root.join("var/log/gvisor-hardened/audit.jsonl").is_file());
    assert!(!root.join("host").exists(), "the exporter sees a /host");
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(overlay.audit_dir().join("audit.jsonl")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));

    // Not the node's PID namespace. These machines do not let /proc/1/ns be read (EACCES), so
    // the node's namespace is the kubelet's, which the test process shares; where /proc/1/ns
    // is readable it must be the same. The installer (hostPID) is the control: in the node's.
    let node = pid_namespace(ctx.node.kubelet_pid().unwrap());
    assert_eq!(pid_namespace("self"), node);
    if let Ok(init) = std::fs::read_link("/proc/1/ns/pid") {
        assert_eq!(init.display().to_string(), node);
    }
    let installer = gvisor_hardened_tests::inspect::processes_mentioning(
        "/opt/gvisor-hardened/bin/gvisor-hardened-installer run",
    );
    assert_eq!(installer.len(), 1, "{installer:?}");
    assert_eq!(pid_namespace(installer[0].pid), node, "the installer's");
    let exporter = pid_namespace(pid);
    assert_ne!(
        exporter, node,
        "the exporter is in the node's PID namespace"
    );
    println!("pid namespaces: node (kubelet, installer) {node}, exporter {exporter}");
}

fn installer_daemonset_installs_and_uninstalls(ctx: &Ctx) {
    let k = &ctx.node;
    uninstall_directly(k, &ctx.installed).unwrap();
    let original = std::fs::read(&k.containerd_config).unwrap();
    assert_eq!(original, ctx.installed.original_config);
    assert_eq!(node_label(ctx), "");

    // A runc pod that must keep running through the installer's containerd restarts.
    let sns = ns(ctx, "survivor");
    run(ctx, &sleeper("survivor", &sns, None));
    let started = "{.status.containerStatuses[0].state.running.startedAt}";
    let before = k.jsonpath(&sns, "pod/survivor", started);

    let overlay = InstallerOverlay::write(k).unwrap();
    k.kubectl()
        .args(["apply", "-k"])
        .arg(&overlay.dir)
        .checked()
        .unwrap();
    poll_until(
        "the installer to label the node",
        Duration::from_secs(300),
        || (node_label(ctx) == "true").then_some(()),
    )
    .unwrap_or_else(|e| {
        let logs = k
            .kubectl()
            .args([
                "-n",
                "gvisor-hardened-system",
                "logs",
                "daemonset/gvisor-hardened-installer",
                "-c",
                "installer",
            ])
            .output()
            .map(|o| format!("{o}"))
            .unwrap_or_default();
        panic!("{e}\ninstaller logs: {logs}");
    });
    let installed = std::fs::read(&k.containerd_config).unwrap();
    assert_ne!(installed, original, "the config was not edited");
    assert!(overlay.shim_dest().is_file());

    // Hardened pods run under the installed shim and policies.
    let hns = ns(ctx, "after-install");
    run(ctx, &sleeper("hardened", &hns, Some("gvisor-hardened")));
    // The installer may still be restarting containerd when the pod is Ready.
    poll_until("exec through the installed containerd", READY, || {
        k.exec(&hns, "hardened", "app", &["true"])
            .ok()?
            .success()
            .then_some(())
    })
    .unwrap();
    assert_hardened(ctx, &hns, "hardened", "app");
    let cid = k.jsonpath(
        &hns,
        "pod/hardened",
        "{.status.containerStatuses[0].containerID}",
    );
    let cid = cid.trim_start_matches("containerd://").to_string();
    assert!(
        overlay.audit_log().contains(&cid),
        "no audit record for {cid} in the installed policy's log"
    );
    // The node's exporter pod (the metrics DaemonSet) counts the pod's sandbox under the
    // policy its create record names, and found the log's chain intact.
    let policy = overlay.default_policy().display().to_string();
    assert_eq!(
        create_record_policy(&overlay.audit_log(), &cid).as_deref(),
        Some(policy.as_str())
    );
    assert_exporter_counts(ctx, &overlay, &policy);
    assert_exporter_unprivileged(ctx, &overlay);
    k.delete_pod(&hns, "hardened").unwrap();

    // The runc pod is the same container, never restarted.
    assert_eq!(k.jsonpath(&sns, "pod/survivor", started), before);
    assert_eq!(
        k.jsonpath(
            &sns,
            "pod/survivor",
            "{.status.containerStatuses[0].restartCount}"
        ),
        "0"
    );

    // The installer's own account of the uninstall, shown if the checks below fail.
    let log_path = tempfile_path("installer-log");
    let mut follow = k.kubectl_command();
    follow
        .args([
            "-n",
            "gvisor-hardened-system",
            "logs",
            "-f",
            "daemonset/gvisor-hardened-installer",
            "-c",
            "installer",
        ])
        .stdout(std::fs::File::create(&log_path).unwrap())
        .stderr(Stdio::null());
    let mut follow = follow.spawn().unwrap();
    // The DaemonSet first, the rest after: `kubectl delete -k` of everything at once removes
    // the installer's RBAC while it uninstalls, its unlabelling is refused (403) and it stops
    // before restoring the config (seen here; see the README).
    k.kubectl()
        .args([
            "-n",
            "gvisor-hardened-system",
            "delete",
            "daemonset",
            "gvisor-hardened-installer",
        ])
        .args(["--cascade=foreground", "--wait=true", "--timeout=300s"])
        .timeout(Duration::from_secs(330))
        .checked()
        .unwrap();
    // The installer uninstalls on SIGTERM: config byte for byte, label, files.
    let restored = poll_until("the config restored", Duration::from_secs(120), || {
        (std::fs::read(&k.containerd_config).ok()? == original).then_some(())
    });
    let _ = follow.kill();
    let _ = follow.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    restored.unwrap_or_else(|e| panic!("{e}; the installer's log:\n{log}"));
    poll_until("the label removed", Duration::from_secs(60), || {
        node_label(ctx).is_empty().then_some(())
    })
    .unwrap();
    for p in [
        overlay.shim_dest(),
        overlay.forwarder_dest(),
        overlay.layout.policy_dir(),
    ] {
        assert!(!p.exists(), "{} left behind", p.display());
    }
    // The rest, the metrics DaemonSet with it: its pods go with the namespace, which
    // `--wait` waits for; the exporter is PID 1 of its namespace and ignores SIGTERM, so the
    // kubelet kills it after the DaemonSet's short grace.
    assert_eq!(
        gvisor_hardened_tests::inspect::processes_mentioning(EXPORTER_CMDLINE).len(),
        1,
        "the exporter before the rest is deleted"
    );
    let deleting = Instant::now();
    k.kubectl()
        .args(["delete", "-k"])
        .arg(&overlay.dir)
        .args(["--ignore-not-found", "--wait=true", "--timeout=300s"])
        .timeout(Duration::from_secs(330))
        .checked()
        .unwrap();
    poll_until("the exporter process gone", Duration::from_secs(60), || {
        gvisor_hardened_tests::inspect::processes_mentioning(EXPORTER_CMDLINE)
            .is_empty()
            .then_some(())
    })
    .unwrap();
    let left = k
        .kubectl()
        .args([
            "get",
            "daemonsets,pods",
            "-A",
            "-l",
            "app.kubernetes.io/name=gvisor-hardened",
        ])
        .args(["-o", "name"])
        .checked()
        .unwrap();
    assert_eq!(left.stdout.trim(), "", "left after delete -k");
    println!(
        "delete -k, metrics DaemonSet included: {:.1} s",
        deleting.elapsed().as_secs_f64()
    );
    // Our classes are gone: a pod asking for one is refused.
    let refused = k
        .create(&sleeper("late", &hns, Some("gvisor-hardened")).to_yaml())
        .unwrap();
    assert!(
        !refused.success() && refused.stderr.contains("not found"),
        "{refused}"
    );
    assert_eq!(k.jsonpath(&sns, "pod/survivor", started), before);
    k.delete_pod(&sns, "survivor").unwrap();
}
