//! Pure: what a warm sandbox is booted from, and which pods may claim it.
//!
//! A warm sandbox is booted before its pod exists, from a *template*: the hardened spec of a
//! pod's sandbox container of the same RuntimeClass with everything that names that pod taken
//! out (annotations, cgroup path, hostname, namespace paths, bind mounts) and its process
//! replaced by one that only holds the sandbox open. The key is a hash of what runsc fixes
//! when it boots a sandbox and a claim cannot change afterwards: the runsc binary, its global
//! flags, the policy, and the template itself (which carries the resource shape the sentry
//! sizes itself by). Pods whose hardened sandbox spec differs in any of these get another key,
//! so they never share a pool.

use serde_json::{json, Value};

use crate::runsc::feature_cache::Identity;

/// Where the holding process is mounted inside a warm sandbox (a read-only bind of the
/// forwarder binary, which has a `--hold` mode).
pub const HOLD_PATH: &str = "/.gvisor-hardened-hold";

/// The warm sandbox's cgroup, until a claim moves it into its pod's.
pub fn pool_cgroups_path(pool_id: &str) -> String {
    format!("/gvisor-hardened-pool/{pool_id}")
}

/// Global runsc arguments that name one bundle, not the sandbox's configuration: left out of
/// the key (the claiming shim logs to its own bundle).
fn per_bundle(arg: &str) -> bool {
    ["--log=", "--debug-log=", "--log-format="]
        .iter()
        .any(|p| arg.starts_with(p))
}

/// The global arguments a key is made of.
pub fn keyed_args(global_args: &[String]) -> Vec<String> {
    global_args
        .iter()
        .filter(|a| !per_bundle(a))
        .cloned()
        .collect()
}

/// The pool key: hex sha256 over the runsc binary (its path and `runsc_identity`, the file it
/// is now, which changes when it is replaced), its keyed global arguments, the policy's hash and the
/// template, truncated to 32 hex digits (a directory name).
pub fn key(
    runsc_binary: &str,
    runsc_identity: Option<&Identity>,
    global_args: &[String],
    policy_sha256: &str,
    template: &Value,
) -> String {
    let canonical = json!({
        "runsc": runsc_binary,
        "runsc_identity": runsc_identity,
        "args": keyed_args(global_args),
        "policy": policy_sha256,
        "template": template,
    });
    crate::policy_source::sha256_hex(canonical.to_string().as_bytes())[..32].to_string()
}

/// The template of a pod's hardened sandbox spec: its pod-specific parts removed, the process
/// replaced by the holder. Refused (the pod starts cold) for a spec without a process, and for
/// one whose sandbox gets its own egress CA bundle: that file is made per sandbox, after the
/// warm sandbox booted.
pub fn template(hardened: &Value) -> Result<Value, &'static str> {
    let bound_at = |dest: &str| {
        hardened["mounts"]
            .as_array()
            .is_some_and(|ms| ms.iter().any(|m| m["destination"] == dest))
    };
    if bound_at(policy_injector::egress::CA_BUNDLE_IN_SANDBOX) {
        return Err("the pod's sandbox gets its own egress CA bundle (credentials are on)");
    }
    let mut t = hardened.clone();
    let no_process = "the hardened spec has no process";
    let obj = t.as_object_mut().ok_or(no_process)?;
    obj.remove("annotations");
    obj.remove("hostname");
    obj.remove("hooks");
    obj.insert("root".into(), json!({"path": "rootfs", "readonly": true}));
    let process = obj
        .get_mut("process")
        .and_then(Value::as_object_mut)
        .ok_or(no_process)?;
    process.insert("args".into(), json!([HOLD_PATH, "--hold"]));
    process.insert("env".into(), json!(["PATH=/"]));
    process.insert("cwd".into(), json!("/"));
    process.insert("terminal".into(), json!(false));
    process.remove("consoleSize");
    if let Some(mounts) = obj.get_mut("mounts").and_then(Value::as_array_mut) {
        // Binds name the pod's files on the host (its /dev/shm, resolv.conf): not the pool's.
        // The egress forwarder's is the policy's, the same for every pod: it stays, or the
        // claim could not start the pod's forwarder in the sandbox.
        mounts.retain(|m| {
            !policy_injector::is_bind_mount(m)
                || m["destination"] == policy_injector::egress::FORWARDER_IN_SANDBOX
        });
    }
    if let Some(linux) = obj.get_mut("linux").and_then(Value::as_object_mut) {
        if let Some(profile) = linux.get_mut("seccomp") {
            allow_sethostname(profile)?;
        }
        linux.remove("cgroupsPath");
        if let Some(nss) = linux.get_mut("namespaces").and_then(Value::as_array_mut) {
            for ns in nss.iter_mut().filter_map(Value::as_object_mut) {
                // The pod's network namespace is dialled from by the egress proxy on the host;
                // the sentry runs with --network=none and needs none of its own.
                ns.remove("path");
            }
        }
    }
    Ok(t)
}

/// Lets the sandbox container's seccomp profile allow sethostname(2). A claim names the
/// sandbox after its pod by exec'ing the holder with CAP_SYS_ADMIN in that container, and runsc
/// applies the container's profile to every process in it (`--oci-seccomp`), execs included:
/// a RuntimeDefault profile, which allows sethostname only to a container that has
/// CAP_SYS_ADMIN, refused it (seen through a kubelet). Only the holder and the shim's own execs
/// (the claim's, egress's forwarder without capabilities) run in that container; the pod's
/// containers keep their own profiles. A profile that names sethostname with another action is
/// left alone and the pod is not pooled.
fn allow_sethostname(profile: &mut Value) -> Result<(), &'static str> {
    const CALL: &str = "sethostname";
    let allowed_by_default = profile["defaultAction"] == "SCMP_ACT_ALLOW";
    let rules = profile["syscalls"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let named: Vec<&Value> = rules
        .iter()
        .filter(|r| {
            r["names"]
                .as_array()
                .is_some_and(|n| n.iter().any(|x| x == CALL))
        })
        .collect();
    if named.iter().any(|r| {
        r["action"] != "SCMP_ACT_ALLOW"
            || r.get("args")
                .is_some_and(|a| a.as_array().is_some_and(|a| !a.is_empty()))
    }) {
        return Err("the pod sandbox's seccomp profile has its own rule for sethostname, which a claim needs");
    }
    if allowed_by_default || !named.is_empty() {
        return Ok(());
    }
    let obj = profile
        .as_object_mut()
        .ok_or("the seccomp profile is not an object")?;
    let syscalls = obj.entry("syscalls").or_insert_with(|| json!([]));
    syscalls
        .as_array_mut()
        .ok_or("the seccomp profile's syscalls are not a list")?
        .push(json!({"names": [CALL], "action": "SCMP_ACT_ALLOW"}));
    Ok(())
}

/// The spec a warm sandbox `pool_id` boots with: the template, the holder bound in from
/// `hold_binary`, its own cgroup, and the annotations that make runsc treat it as a pod's
/// sandbox.
pub fn boot_spec(template: &Value, pool_id: &str, hold_binary: &str) -> Value {
    let mut spec = template.clone();
    if let Some(obj) = spec.as_object_mut() {
        obj.insert(
            "annotations".into(),
            json!({
                "io.kubernetes.cri.container-type": "sandbox",
                "io.kubernetes.cri.sandbox-id": pool_id,
            }),
        );
        let mounts = obj.entry("mounts").or_insert_with(|| json!([]));
        if let Some(m) = mounts.as_array_mut() {
            m.push(json!({
                "destination": HOLD_PATH,
                "type": "bind",
                "source": hold_binary,
                "options": ["rbind", "ro", "nosuid", "nodev"],
            }));
        }
        if let Some(linux) = obj.get_mut("linux").and_then(Value::as_object_mut) {
            linux.insert("cgroupsPath".into(), json!(pool_cgroups_path(pool_id)));
        }
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause_spec(pod: &str, memory: u64) -> Value {
        json!({
            "ociVersion": "1.0.2",
            "hostname": pod,
            "process": {"args": ["/pause"], "env": ["PATH=/bin"], "cwd": "/", "user": {"uid": 65535, "gid": 65535}},
            "root": {"path": format!("/run/containerd/{pod}/rootfs"), "readonly": true},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev/shm", "type": "bind", "source": format!("/run/containerd/{pod}/shm"), "options": ["rbind"]},
            ],
            "annotations": {"io.kubernetes.cri.sandbox-id": pod, "io.kubernetes.cri.container-type": "sandbox"},
            "linux": {
                "cgroupsPath": format!("/kubepods/pod-{pod}/{pod}"),
                "resources": {"memory": {"limit": memory}},
                "namespaces": [{"type": "network", "path": format!("/var/run/netns/cni-{pod}")}, {"type": "pid"}],
            },
        })
    }

    #[test]
    fn two_pods_of_one_shape_get_one_key() {
        let a = template(&pause_spec("a", 1 << 30)).unwrap();
        let b = template(&pause_spec("b", 1 << 30)).unwrap();
        assert_eq!(a, b);
        let args = vec![
            "--root=/r".to_string(),
            "--log=/b/a/runsc.log.json".to_string(),
        ];
        let args_b = vec![
            "--root=/r".to_string(),
            "--log=/b/b/runsc.log.json".to_string(),
        ];
        assert_eq!(
            key("runsc", None, &args, "p", &a),
            key("runsc", None, &args_b, "p", &b)
        );
    }

    #[test]
    fn another_memory_size_flag_policy_or_runsc_file_gets_another_key() {
        let args = vec!["--root=/r".to_string(), "--platform=systrap".to_string()];
        let base = key(
            "runsc",
            None,
            &args,
            "p",
            &template(&pause_spec("a", 1 << 30)).unwrap(),
        );
        let memory = key(
            "runsc",
            None,
            &args,
            "p",
            &template(&pause_spec("a", 2 << 30)).unwrap(),
        );
        let ptrace = vec!["--root=/r".to_string(), "--platform=ptrace".to_string()];
        let flag = key(
            "runsc",
            None,
            &ptrace,
            "p",
            &template(&pause_spec("a", 1 << 30)).unwrap(),
        );
        let policy = key(
            "runsc",
            None,
            &args,
            "q",
            &template(&pause_spec("a", 1 << 30)).unwrap(),
        );
        let binary = key(
            "/other/runsc",
            None,
            &args,
            "p",
            &template(&pause_spec("a", 1 << 30)).unwrap(),
        );
        let replaced_runsc = Identity {
            path: "/usr/bin/runsc".into(),
            dev: 1,
            ino: 2,
            size: 3,
            mtime_ns: 4,
        };
        let replaced = key(
            "runsc",
            Some(&replaced_runsc),
            &args,
            "p",
            &template(&pause_spec("a", 1 << 30)).unwrap(),
        );
        for other in [&memory, &flag, &policy, &binary, &replaced] {
            assert_ne!(&base, other);
        }
    }

    #[test]
    fn the_template_keeps_nothing_that_names_the_pod() {
        let t = template(&pause_spec("pod-7f3a", 1 << 30)).unwrap();
        assert!(!t.to_string().contains("pod-7f3a"), "{t}");
        assert_eq!(t["process"]["args"], json!([HOLD_PATH, "--hold"]));
        // The hardened user stays: the holder runs as the pod's sandbox process would.
        assert_eq!(t["process"]["user"]["uid"], 65535);
        assert_eq!(t["mounts"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_boot_spec_is_a_pod_sandbox_in_its_own_cgroup_with_the_holder_read_only() {
        let t = template(&pause_spec("a", 1 << 30)).unwrap();
        let s = boot_spec(&t, "pool-1", "/opt/hold");
        assert_eq!(
            s["annotations"]["io.kubernetes.cri.container-type"],
            "sandbox"
        );
        assert_eq!(s["annotations"]["io.kubernetes.cri.sandbox-id"], "pool-1");
        assert_eq!(s["linux"]["cgroupsPath"], "/gvisor-hardened-pool/pool-1");
        let hold = s["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["destination"] == HOLD_PATH)
            .unwrap();
        assert!(hold["options"].as_array().unwrap().contains(&json!("ro")));
    }

    #[test]
    fn a_spec_without_a_process_has_no_template() {
        assert!(template(&json!({"root": {"path": "r"}})).is_err());
    }

    fn with_mount(mut spec: Value, destination: &str, source: &str) -> Value {
        spec["mounts"].as_array_mut().unwrap().push(json!({
            "destination": destination, "type": "bind", "source": source, "options": ["bind", "ro"],
        }));
        spec
    }

    #[test]
    fn the_egress_forwarder_stays_bound_in_the_template_and_other_binds_go() {
        let forwarder = policy_injector::egress::FORWARDER_IN_SANDBOX;
        let spec = with_mount(pause_spec("a", 1 << 30), forwarder, "/run/gvh/forwarder");
        let t = template(&spec).unwrap();
        let binds: Vec<&Value> = t["mounts"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["type"] == "bind")
            .collect();
        assert_eq!(binds.len(), 1, "{t}");
        assert_eq!(binds[0]["destination"], forwarder);
        assert_eq!(binds[0]["source"], "/run/gvh/forwarder");
        // Another forwarder is another pool.
        let other = with_mount(pause_spec("a", 1 << 30), forwarder, "/elsewhere/forwarder");
        assert_ne!(
            key("/usr/bin/runsc", None, &[], "p", &t),
            key("/usr/bin/runsc", None, &[], "p", &template(&other).unwrap())
        );
    }

    #[test]
    fn a_runtime_default_profile_lets_the_claim_set_the_hostname_and_nothing_else_changes() {
        let mut spec = pause_spec("a", 1 << 30);
        spec["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "syscalls": [
                {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
            ],
        });
        let t = template(&spec).unwrap();
        let rules = t["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(
            &rules[..2],
            &spec["linux"]["seccomp"]["syscalls"].as_array().unwrap()[..]
        );
        assert_eq!(
            rules[2],
            json!({"names": ["sethostname"], "action": "SCMP_ACT_ALLOW"})
        );
        assert_eq!(t["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    }

    #[test]
    fn a_profile_that_allows_sethostname_already_is_kept_as_it_is() {
        for profile in [
            json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["ptrace"], "action": "SCMP_ACT_ERRNO"}]}),
            json!({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["sethostname", "read"], "action": "SCMP_ACT_ALLOW"}]}),
        ] {
            let mut spec = pause_spec("a", 1 << 30);
            spec["linux"]["seccomp"] = profile.clone();
            assert_eq!(template(&spec).unwrap()["linux"]["seccomp"], profile);
        }
    }

    #[test]
    fn a_profile_with_its_own_rule_against_sethostname_is_not_pooled() {
        let mut spec = pause_spec("a", 1 << 30);
        spec["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}],
        });
        assert!(template(&spec).unwrap_err().contains("sethostname"));
    }

    #[test]
    fn a_pod_whose_sandbox_gets_its_own_egress_ca_bundle_is_not_pooled() {
        let spec = with_mount(
            pause_spec("a", 1 << 30),
            policy_injector::egress::CA_BUNDLE_IN_SANDBOX,
            "/run/containerd/a/egress/ca.pem",
        );
        let err = template(&spec).unwrap_err();
        assert!(err.contains("CA bundle"), "{err}");
    }
}
