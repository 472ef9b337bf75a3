//! Agents on the real one-node Kubernetes cluster (`hack/kube-node.sh up`, see kube_node.rs for
//! the node itself): a pod of the `gvisor-hardened-agent` class reaching an allowlisted upstream
//! pod through the shim's egress proxy and nothing else, and kubernetes-sigs/agent-sandbox's
//! controller (built by `hack/deps.sh`, run as a host process out of cluster) making a hardened
//! pod from `runtimeclass/examples/agent-sandbox.yaml`. One node for the whole module, in one
//! test (`cases_on_one_node`), `down` at the end, which fails if anything of the node is left.
//!
//! `GVH_KUBE_CASES=WORD[,WORD...] hack/integration.sh kube_agents` runs the cases whose name
//! contains a word (all of them without it); needs root and the shim built.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gvisor_hardened_tests::cri::runsc_sandbox_processes;
use gvisor_hardened_tests::egress::{egress_section, with_egress};
use gvisor_hardened_tests::kube::cases::{
    self, assert_confined, assert_hardened, exec_ok, ns, run, sandbox_id, sleeper, Case, Ctx,
    READY, REPO,
};
use gvisor_hardened_tests::kube::{PodSpec, PodWatch, PolicyOverride, SHIPPED_AGENT_POLICY};
use gvisor_hardened_tests::stack::{mentions_no_route, Stack};
use gvisor_hardened_tests::{poll_until, TEST_IMAGE_REF};
use serde_json::{json, Value};

const CASES: &[(&str, Case)] = &[
    (
        "agent_pod_reaches_its_allowlisted_upstream_pod_and_nothing_else",
        agent_pod_reaches_its_allowlisted_upstream_pod_and_nothing_else,
    ),
    (
        "agent_sandbox_controller_makes_a_hardened_pod",
        agent_sandbox_controller_makes_a_hardened_pod,
    ),
];

/// The cases above on one node of this module's own, in order (`GVH_KUBE_CASES=word,...`: those
/// whose names contain a word).
#[test]
fn cases_on_one_node() {
    cases::run_on_one_node("kube_agents", CASES);
}

const AGENT_CLASS: &str = "gvisor-hardened-agent";
const BODY: &str = "hello from the upstream pod";
const UPSTREAM: &str = "upstream.example.test";

/// The `egress-connection` records of pod sandbox `sandbox` in the node's audit log.
fn connections(ctx: &Ctx, sandbox: &str) -> Vec<Value> {
    ctx.installed
        .audit_log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["event"] == "egress-connection" && r["sandbox_id"] == sandbox)
        .collect()
}

/// The upstream is a runc pod on the node's bridge (its own namespace): busybox httpd serving
/// one file on 8080. The agent class's policy gets an allowlist of that one name and port,
/// resolved by the policy's `hosts` to the pod's IP and allowed by `allow_cidrs` (a pod IP is a
/// private address). The agent pod's sandbox keeps `--network=none`: only the proxy, which dials
/// from the agent pod's own network namespace, gets there.
fn agent_pod_reaches_its_allowlisted_upstream_pod_and_nothing_else(ctx: &Ctx) {
    let k = &ctx.node;
    let up_ns = ns(ctx, "egress-upstream");
    let serve = format!(
        "mkdir -p /tmp/www && printf %s '{BODY}' > /tmp/www/hello.txt && \
         exec busybox httpd -f -p 8080 -h /tmp/www"
    );
    let upstream = PodSpec::new("upstream", &up_ns, TEST_IMAGE_REF)
        .container("httpd", &["sh", "-c", &serve])
        .each_container(
            json!({"readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}}),
        );
    run(ctx, &upstream);
    let ip = k.jsonpath(&up_ns, "pod/upstream", "{.status.podIP}");
    assert!(ip.starts_with("10.190.0."), "upstream pod IP {ip:?}");
    // The upstream answers on the bridge (the node reaches it), so a refusal below is the
    // sandbox's doing.
    // (Debian's busybox 1.35 wget crashes with -T: bounded by timeout(1) instead.)
    let direct_from_node = Command::new("timeout")
        .args(["20", "busybox", "wget", "-q", "-O", "-"])
        .arg(format!("http://{ip}:8080/hello.txt"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&direct_from_node.stdout),
        BODY,
        "{direct_from_node:?}"
    );

    let section = egress_section(
        &[&format!("{UPSTREAM}:8080")],
        &[(UPSTREAM, ip.clone())],
        &[format!("{ip}/32")],
    );
    let policy = PolicyOverride::write(k, &ctx.installed, AGENT_CLASS, SHIPPED_AGENT_POLICY, |p| {
        with_egress(p, &section)
    })
    .unwrap();

    let agents = ns(ctx, "egress-agent");
    run(ctx, &sleeper("agent", &agents, Some(AGENT_CLASS)));
    assert_hardened(ctx, &agents, "agent", "app");
    // The shim pointed the exec at the forwarder.
    let env = exec_ok(ctx, &agents, "agent", "app", &["env"]);
    assert!(
        env.lines().any(|l| l == "HTTP_PROXY=http://127.0.0.1:3128"),
        "{env}"
    );

    let fetch = |url: &str| {
        k.exec(&agents, "agent", "app", &["wget", "-q", "-O", "-", url])
            .unwrap()
    };
    let allowed = fetch(&format!("http://{UPSTREAM}:8080/hello.txt"));
    assert!(allowed.success() && allowed.stdout == BODY, "{allowed}");
    let not_listed = fetch("http://elsewhere.example.test:8080/x");
    assert!(
        !not_listed.success()
            && not_listed.stderr.contains("403")
            && not_listed.stderr.contains("egress denied"),
        "{not_listed}"
    );
    let other_port = fetch(&format!("http://{UPSTREAM}:9090/x"));
    assert!(
        !other_port.success() && other_port.stderr.contains("403"),
        "{other_port}"
    );
    // Around the proxy, straight to the upstream's IP: the sandbox has no route.
    let direct = k
        .exec(
            &agents,
            "agent",
            "app",
            &["/bin/sandbox-probe", "connect", &ip, "8080", "2000"],
        )
        .unwrap();
    assert!(
        mentions_no_route(&format!("{}{}", direct.stdout, direct.stderr)),
        "{direct}"
    );

    // Each connection is in the audit log under the pod's sandbox, with its verdict.
    let sandbox = sandbox_id(ctx, &agents, "agent");
    let records = connections(ctx, &sandbox);
    let verdicts = |host: &str| -> Vec<&str> {
        records
            .iter()
            .filter(|r| r["host"] == host)
            .filter_map(|r| r["verdict"].as_str())
            .collect()
    };
    assert_eq!(verdicts(UPSTREAM), ["allowed", "denied"], "{records:#?}");
    assert_eq!(
        verdicts("elsewhere.example.test"),
        ["denied"],
        "{records:#?}"
    );
    let denied = records
        .iter()
        .find(|r| r["host"] == "elsewhere.example.test")
        .unwrap();
    assert!(
        denied["reason"]
            .as_str()
            .is_some_and(|r| r.contains("not in the allowlist")),
        "{denied}"
    );
    let allowed_record = records.iter().find(|r| r["verdict"] == "allowed").unwrap();
    assert_eq!(
        allowed_record["resolved"],
        format!("{ip}:8080"),
        "{allowed_record}"
    );

    k.delete_pod(&agents, "agent").unwrap();
    drop(policy);
    k.delete_pod(&up_ns, "upstream").unwrap();
}

/// agent-sandbox's controller as a host process with the admin kubeconfig: no leader election,
/// no metrics or health listeners (its webhooks are not part of v1.0.1's controller). Stopped
/// with SIGTERM when dropped.
struct Controller {
    child: Child,
    log: PathBuf,
}

impl Controller {
    fn start(ctx: &Ctx, binary: &Path) -> Controller {
        let log = std::env::temp_dir().join(format!(
            "gvh-kube-agent-sandbox-controller-{}.log",
            std::process::id()
        ));
        let out = fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .args([
                "--leader-elect=false",
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
            ])
            .env("KUBECONFIG", &ctx.node.kubeconfig)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        Controller { child, log }
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then its exit within 30 s; its log.
    fn stop(mut self) -> (Option<std::process::ExitStatus>, String) {
        let status = self.terminate();
        (status, self.log())
    }

    fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        // Our own child, by its pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let status = poll_until(
            "agent-sandbox-controller to exit",
            Duration::from_secs(30),
            || self.child.try_wait().ok().flatten(),
        )
        .ok();
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        status
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.terminate();
        let _ = fs::remove_file(&self.log);
    }
}

/// The example Sandbox as shipped, with what this node lacks substituted: the test image
/// (`imagePullPolicy: Never`, no registry here) for python:3.12-slim, and a busybox sleep.
fn example_sandbox() -> Value {
    let path = format!("{REPO}/runtimeclass/examples/agent-sandbox.yaml");
    let mut sandbox: Value = serde_yaml_ng::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
    let container = &mut sandbox["spec"]["podTemplate"]["spec"]["containers"][0];
    assert_eq!(container["image"], "python:3.12-slim", "{container:#}");
    container["image"] = json!(TEST_IMAGE_REF);
    container["imagePullPolicy"] = json!("Never");
    container["command"] = json!(["sleep", "600"]);
    sandbox
}

fn agent_sandbox_controller_makes_a_hardened_pod(ctx: &Ctx) {
    let k = &ctx.node;
    let binary = Stack::Current.binary("agent-sandbox-controller").unwrap();
    let crd = binary
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("crds/agents.x-k8s.io_sandboxes.yaml");
    // Server-side: the CRD is too large for the last-applied annotation of a client-side apply.
    k.kubectl()
        .args(["apply", "--server-side", "-f"])
        .arg(&crd)
        .checked()
        .unwrap();
    // (`kubectl wait` right after the apply fails while the CRD has no status yet.)
    poll_until("the Sandbox CRD established", READY, || {
        let established = r#"{.status.conditions[?(@.type=="Established")].status}"#;
        (k.jsonpath("default", "crd/sandboxes.agents.x-k8s.io", established) == "True")
            .then_some(())
    })
    .unwrap();
    let controller = Controller::start(ctx, &binary);

    let sandbox = example_sandbox();
    let ns_name = sandbox["metadata"]["namespace"]
        .as_str()
        .unwrap()
        .to_string();
    let name = sandbox["metadata"]["name"].as_str().unwrap().to_string();
    let agents = ns(ctx, &ns_name);
    k.apply(&sandbox.to_string()).unwrap();
    // The controller names the pod after the Sandbox.
    let class = k
        .wait_field(&agents, &name, "{.spec.runtimeClassName}", READY)
        .unwrap_or_else(|e| panic!("{e}; the controller's log:\n{}", controller.log()));
    assert_eq!(class, "gvisor-hardened");
    let owner = k.jsonpath(
        &agents,
        &format!("pod/{name}"),
        "{.metadata.ownerReferences[0].kind}",
    );
    assert_eq!(owner, "Sandbox");
    k.wait_ready(&agents, &name, READY).unwrap();
    assert_confined(ctx, &agents, &name, "workspace");
    // The example asks for the RuntimeDefault seccomp profile, which refuses syslog(2): no
    // kernel log to read. That the pod is a runsc sandbox is seen from the host instead.
    let dmesg = k.exec(&agents, &name, "workspace", &["dmesg"]).unwrap();
    assert!(
        !dmesg.success() && dmesg.stderr.contains("Operation not permitted"),
        "{dmesg}"
    );
    let sandboxes = runsc_sandbox_processes(&sandbox_id(ctx, &agents, &name));
    assert_eq!(sandboxes.len(), 1, "{sandboxes:#?}");
    // The workspace is the emptyDir, writable by the agent; the image is not.
    exec_ok(ctx, &agents, &name, "workspace", &["touch", "/workspace/f"]);
    let pwd = exec_ok(ctx, &agents, &name, "workspace", &["pwd"]);
    assert_eq!(pwd.trim(), "/workspace");
    poll_until("the Sandbox Ready", READY, || {
        let ready = r#"{.status.conditions[?(@.type=="Ready")].status}"#;
        (k.jsonpath(&agents, &format!("sandbox/{name}"), ready) == "True").then_some(())
    })
    .unwrap_or_else(|e| {
        let status = k.jsonpath(&agents, &format!("sandbox/{name}"), "{.status}");
        panic!("{e}: {status}")
    });

    // Deleting the Sandbox takes its pod.
    k.kubectl()
        .args(["-n", &agents, "delete", "sandbox", &name, "--wait=true"])
        .args(["--timeout=120s"])
        .checked()
        .unwrap();
    poll_until("the Sandbox's pod gone", READY, || {
        k.jsonpath(&agents, &format!("pod/{name}"), "{.metadata.name}")
            .is_empty()
            .then_some(())
    })
    .unwrap();

    let (status, log) = controller.stop();
    let status = status.unwrap_or_else(|| panic!("the controller did not exit on SIGTERM:\n{log}"));
    assert!(
        status.success() || status.signal() == Some(libc::SIGTERM),
        "{status:?}\n{log}"
    );
    k.kubectl()
        .args(["delete", "--wait=true", "-f"])
        .arg(&crd)
        .checked()
        .unwrap();
}
