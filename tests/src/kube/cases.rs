//! What the Kubernetes tests (modules `kube_node` and `kube_agents` of the integration binary)
//! share: one node per module (`up` once, the cases in order, `down` at the end, which fails if
//! anything of the node is left), the shim installed by the harness, and the helpers the cases
//! use on it. Helpers panic with what they saw: they run inside a case.

use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use super::{install_shim_directly, KubeNode, NodePolicies, PodSpec, PodWatch};
use crate::{poll_until, shim_binary, ProbeLine, TestImage, TEST_IMAGE_REF};

/// The repository's root (for `kubectl apply -k runtimeclass/...`).
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// How long a pod gets to become Ready.
pub const READY: Duration = Duration::from_secs(120);

/// Picks the cases: a comma-separated list of words, a case runs if its name contains one (all
/// of them when unset or empty).
pub const CASES_ENV: &str = "GVH_KUBE_CASES";

/// The node and what the harness installed on it.
pub struct Ctx {
    pub node: KubeNode,
    pub installed: NodePolicies,
}

pub type Case = fn(&Ctx);

/// The cases of `cases` that `filter` (the value of [`CASES_ENV`]) picks, in their order.
pub fn select<'a>(cases: &'a [(&'a str, Case)], filter: &str) -> Vec<&'a (&'a str, Case)> {
    let words: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .collect();
    cases
        .iter()
        .filter(|(n, _)| words.is_empty() || words.iter().any(|w| n.contains(w)))
        .collect()
}

/// A module's one test: brings the node up, runs the cases [`CASES_ENV`] picks in order (each
/// caught, so one failing case does not skip the rest), takes the node down and checks nothing
/// of it is left. Panics naming every case, the setup, `down` or the leftover check that failed.
/// A filter that picks no case runs nothing (and brings no node up).
pub fn run_on_one_node(module: &str, cases: &[(&str, Case)]) {
    let filter = std::env::var(CASES_ENV).unwrap_or_default();
    let selected = select(cases, &filter);
    if selected.is_empty() {
        println!("no {module} case matches {CASES_ENV}={filter:?}");
        return;
    }
    let started = Instant::now();
    let shim =
        shim_binary().expect("the shim binary (cargo build -p containerd-shim-gvisor-hardened)");
    let node = KubeNode::up().expect("hack/kube-node.sh up");
    println!("{module}: node up in {:?}", started.elapsed());
    let setup = panic::catch_unwind(AssertUnwindSafe(|| setup(&node, &shim)));
    let mut failed = Vec::new();
    match setup {
        Ok(installed) => {
            let ctx = Ctx { node, installed };
            for (name, case) in &selected {
                let t = Instant::now();
                let r = panic::catch_unwind(AssertUnwindSafe(|| case(&ctx)));
                let verdict = if r.is_ok() { "ok" } else { "FAILED" };
                println!("case {name} ... {verdict} ({:.1?})", t.elapsed());
                if r.is_err() {
                    failed.push(name.to_string());
                }
            }
            let down = ctx.node.down();
            if let Err(e) = down {
                println!("hack/kube-node.sh down failed: {e}");
                failed.push("down".into());
            }
        }
        Err(_) => {
            failed.push("setup".into());
            if let Err(e) = node.down() {
                println!("hack/kube-node.sh down failed: {e}");
            }
        }
    }
    // Nothing of the node is left: processes, mounts, the bridge, cgroups, the rule.
    let leftovers = leftovers();
    if !leftovers.is_empty() {
        println!("left behind after down: {leftovers:#?}");
        failed.push("nothing-left".into());
    }
    println!(
        "{module}: {} cases, {} failed, {:.1?}",
        selected.len(),
        failed.len(),
        started.elapsed()
    );
    assert!(failed.is_empty(), "{module}: failed: {failed:?}");
}

pub fn leftovers() -> Vec<String> {
    let dir = "/run/gvisor-hardened-kube";
    let mut left = Vec::new();
    if Path::new(dir).exists() {
        left.push(dir.to_string());
    }
    for p in crate::inspect::processes_mentioning(dir) {
        left.push(format!("process {} {}", p.pid, p.cmdline));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    left.extend(
        mountinfo
            .lines()
            .filter(|l| l.contains(dir))
            .map(String::from),
    );
    if Path::new("/sys/class/net/gvhkube0").exists() {
        left.push("bridge gvhkube0".into());
    }
    for h in ["memory", "cpu,cpuacct", "pids", "cpuset"] {
        for g in ["gvh-kube", "gvh-kube-node"] {
            let p = format!("/sys/fs/cgroup/{h}/{g}");
            if Path::new(&p).exists() {
                left.push(p);
            }
        }
    }
    let nat = std::process::Command::new("iptables")
        .args(["-t", "nat", "-S"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    left.extend(
        nat.lines()
            .filter(|l| l.contains("gvh-kube"))
            .map(String::from),
    );
    left
}

/// The test image imported, the shim installed by the harness, the RuntimeClasses applied.
pub fn setup(node: &KubeNode, shim: &Path) -> NodePolicies {
    let image = TestImage::ensure().unwrap();
    node.import(&image).unwrap();
    let installed = install_shim_directly(node, shim).unwrap();
    node.kubectl()
        .args(["apply", "-k"])
        .arg(format!("{REPO}/runtimeclass"))
        .checked()
        .unwrap();
    installed
}

/// Creates namespace `name` (if missing) and waits for its default service account.
pub fn ns(ctx: &Ctx, name: &str) -> String {
    ctx.node
        .kubectl()
        .args(["create", "namespace", name])
        .output()
        .unwrap();
    // The service account the pods run as is made by the controller manager.
    poll_until("the default service account", READY, || {
        (!ctx
            .node
            .jsonpath(name, "serviceaccount/default", "{.metadata.name}")
            .is_empty())
        .then_some(())
    })
    .unwrap();
    name.to_string()
}

/// Applies `pod` and waits until it is Ready.
pub fn run(ctx: &Ctx, pod: &PodSpec) {
    ctx.node.apply(&pod.to_yaml()).unwrap();
    ctx.node
        .wait_ready(&pod.namespace, &pod.name, READY)
        .unwrap();
}

/// A pod of one container `app` sleeping 600 s, on `class` (runc without one).
pub fn sleeper(name: &str, namespace: &str, class: Option<&str>) -> PodSpec {
    let p = PodSpec::new(name, namespace, TEST_IMAGE_REF).container("app", &["sleep", "600"]);
    match class {
        Some(c) => p.runtime_class(c),
        None => p,
    }
}

/// `kubectl exec`, which must succeed; its stdout.
pub fn exec_ok(ctx: &Ctx, ns: &str, pod: &str, container: &str, argv: &[&str]) -> String {
    let out = ctx.node.exec(ns, pod, container, argv).unwrap();
    assert!(out.success(), "kubectl exec {argv:?}: {out}");
    out.stdout
}

/// The test image's `/bin/sandbox-probe CMD` in the container, its last line parsed.
pub fn probe(ctx: &Ctx, ns: &str, pod: &str, container: &str, cmd: &str) -> ProbeLine {
    let argv: Vec<&str> = std::iter::once("/bin/sandbox-probe")
        .chain(cmd.split(' '))
        .collect();
    let out = exec_ok(ctx, ns, pod, container, &argv);
    ProbeLine::parse_last(&out).unwrap_or_else(|e| panic!("{cmd}: {e}: {out}"))
}

/// What every hardened container shows from inside: [`assert_confined`], and gVisor's kernel
/// log.
pub fn assert_hardened(ctx: &Ctx, ns: &str, pod: &str, container: &str) {
    assert_confined(ctx, ns, pod, container);
    let dmesg = exec_ok(ctx, ns, pod, container, &["dmesg"]);
    assert!(dmesg.contains("gVisor"), "not gVisor's kernel log: {dmesg}");
}

/// No capabilities, uid 65534, no-new-privileges, a read-only root, a tmpfs /tmp, a kernel
/// release other than the host's. (For a pod whose seccomp profile refuses syslog(2), e.g.
/// `RuntimeDefault`, where `dmesg` cannot show gVisor's log.)
pub fn assert_confined(ctx: &Ctx, ns: &str, pod: &str, container: &str) {
    let caps = probe(ctx, ns, pod, container, "caps");
    for set in ["CapEff", "CapPrm", "CapBnd"] {
        assert_eq!(caps.field(set), Some("0000000000000000"), "{set}: {caps:?}");
    }
    let ids = probe(ctx, ns, pod, container, "ids");
    assert_eq!(ids.field("uid"), Some("65534"), "{ids:?}");
    let nnp = probe(ctx, ns, pod, container, "nnp");
    assert_eq!(nnp.field("nnp"), Some("1"), "{nnp:?}");
    // /srv is world-writable in the image: only a read-only root refuses the write.
    let srv = probe(ctx, ns, pod, container, "write /srv/probe x");
    assert_eq!(srv.errno(), Some("EROFS"), "{srv:?}");
    let tmp = probe(ctx, ns, pod, container, "statfs /tmp");
    assert_eq!(tmp.field("fstype"), Some("tmpfs"), "{tmp:?}");
    let uname = probe(ctx, ns, pod, container, "uname");
    let host = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_ne!(uname.field("release"), Some(host.trim()), "{uname:?}");
}

/// The CRI sandbox id of a pod (`crictl pods`).
pub fn sandbox_id(ctx: &Ctx, ns: &str, pod: &str) -> String {
    let crictl = crate::stack::Stack::Current.binary("crictl").unwrap();
    let out = std::process::Command::new(crictl)
        .arg("--runtime-endpoint")
        .arg(format!("unix://{}", ctx.node.containerd_address.display()))
        .args(["pods", "-q", "--name", pod, "--namespace", ns])
        .output()
        .unwrap();
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!id.is_empty(), "no sandbox for {ns}/{pod}");
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop(_: &Ctx) {}

    const CASES: &[(&str, Case)] = &[
        ("hardened_pod_is_hardened_inside", noop),
        ("oom_shows_oomkilled", noop),
        ("admission_by_the_api_server", noop),
    ];

    fn names(filter: &str) -> Vec<&str> {
        select(CASES, filter).iter().map(|(n, _)| *n).collect()
    }

    #[test]
    fn no_filter_selects_every_case_in_order() {
        assert_eq!(names(""), names(" , "));
        assert_eq!(
            names(""),
            [
                "hardened_pod_is_hardened_inside",
                "oom_shows_oomkilled",
                "admission_by_the_api_server"
            ]
        );
    }

    #[test]
    fn a_case_runs_if_its_name_contains_one_of_the_words() {
        assert_eq!(
            names("admission, oom"),
            ["oom_shows_oomkilled", "admission_by_the_api_server"]
        );
        assert!(names("nothing_like_it").is_empty());
    }
}
