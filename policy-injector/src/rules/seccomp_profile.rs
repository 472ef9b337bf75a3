//! The policy's seccomp rules and the default profile built from them.
//!
//! The rules: the deny list answered with EPERM; namespace creation through unshare/clone
//! (EPERM); device nodes through mknod/mknodat (EPERM); clone3 answered with ENOSYS. The default
//! profile allows everything else. A spec that brings its own profile gets the same rules put in
//! front of its own (see `seccomp.rs`), so a spec's profile can tighten but never loosen.
//!
//! Namespaces: an unprivileged process on Linux cannot create any namespace but a user namespace,
//! and a user namespace is what would give it capabilities. gVisor 20221219 lets a process with
//! no capability unshare a mount or cgroup namespace (measured), so every CLONE_NEW* flag is
//! refused here rather than left to the sandbox's own checks.
//!
//! Device nodes: Linux requires CAP_MKNOD for block and character device nodes; gVisor creates
//! them without it (measured: `mknod b 8 0` on /tmp succeeds, opening it gives ENXIO because
//! gVisor has no such device). No capability is ever granted, so the profile refuses them;
//! FIFOs and sockets (mkfifo, bind of a unix socket) stay allowed.
//!
//! clone3 passes its flags in a struct in memory, which seccomp cannot read, so it cannot be
//! filtered for namespace flags; ENOSYS (not EPERM) makes libc fall back to clone, whose flags
//! are a register that the profile checks. EPERM would break every thread: glibc >= 2.34 only
//! falls back on ENOSYS, so pthread_create fails.
//!
//! clone3 uses SCMP_ACT_TRACE, not SCMP_ACT_ERRNO with errnoRet 38: runsc 20221219 ignores
//! errnoRet and answers every SCMP_ACT_ERRNO with EPERM (measured: clone3 gave EPERM and
//! pthread_create failed), while SCMP_ACT_TRACE with no tracer attached returns ENOSYS in Linux
//! and in gVisor, old and new (measured on 20221219: clone3 ENOSYS, pthread_create works). No
//! tracer can attach inside the container: ptrace is on the deny list. errnoRet 38 is kept for
//! runtimes that honour it. runsc ignores `architectures` and looks syscall names up for the
//! native architecture, skipping names it does not know.

use serde_json::{Map, Value};

const EPERM: u64 = 1;
const ENOSYS: u64 = 38;

/// CLONE_NEW* flags refused in both unshare and clone (flags are argument 0 of both on
/// x86_64 and aarch64).
const NAMESPACE_FLAGS: [(&str, u64); 7] = [
    ("CLONE_NEWNS", 0x0002_0000),
    ("CLONE_NEWCGROUP", 0x0200_0000),
    ("CLONE_NEWUTS", 0x0400_0000),
    ("CLONE_NEWIPC", 0x0800_0000),
    ("CLONE_NEWUSER", 0x1000_0000),
    ("CLONE_NEWPID", 0x2000_0000),
    ("CLONE_NEWNET", 0x4000_0000),
];
/// Only unshare knows CLONE_NEWTIME: in clone, 0x80 is part of the exit signal number.
const CLONE_NEWTIME: u64 = 0x80;

const S_IFMT: u64 = 0o170_000;
const S_IFCHR: u64 = 0o020_000;
const S_IFBLK: u64 = 0o060_000;

/// `(arg & mask) == value` on argument `index`, refused with EPERM. One rule per flag: several
/// conditions on one argument in one rule are ORed by runsc and libseccomp alike, but only
/// through a legacy special case, so each condition gets its own rule.
///
/// Built field by field rather than with `json!`, which serialises through serde: this runs for
/// every container (16 rules), and the macro made it the single largest cost of `harden`.
fn masked_eperm(name: &str, index: u64, mask: u64, value: u64) -> Value {
    let mut arg = Map::with_capacity(4);
    arg.insert("index".into(), Value::from(index));
    arg.insert("value".into(), Value::from(mask));
    arg.insert("valueTwo".into(), Value::from(value));
    arg.insert("op".into(), Value::from("SCMP_CMP_MASKED_EQ"));
    let mut rule = Map::with_capacity(4);
    rule.insert("names".into(), Value::Array(vec![Value::from(name)]));
    rule.insert("action".into(), Value::from("SCMP_ACT_ERRNO"));
    rule.insert("errnoRet".into(), Value::from(EPERM));
    rule.insert("args".into(), Value::Array(vec![Value::Object(arg)]));
    Value::Object(rule)
}

/// The rules the policy enforces, in the order they must come: runsc applies the first rule
/// that matches a call (measured on 20221219: an ERRNO rule for ptrace placed before an ALLOW
/// rule for ptrace refuses it, placed after it does not), so these go before any rule of a
/// spec's own profile.
pub(crate) fn policy_rules(deny: &[String]) -> Vec<Value> {
    let mut syscalls = Vec::with_capacity(2 + 2 * NAMESPACE_FLAGS.len() + 4);
    if !deny.is_empty() {
        // Built by hand rather than with json!: this runs for every container, and json! would
        // serialise the list through serde.
        let mut rule = Map::with_capacity(3);
        rule.insert(
            "names".into(),
            Value::Array(deny.iter().map(|n| Value::String(n.clone())).collect()),
        );
        rule.insert("action".into(), Value::from("SCMP_ACT_ERRNO"));
        rule.insert("errnoRet".into(), Value::from(EPERM));
        syscalls.push(Value::Object(rule));
    }
    for name in ["unshare", "clone"] {
        for (_, flag) in NAMESPACE_FLAGS {
            syscalls.push(masked_eperm(name, 0, flag, flag));
        }
    }
    syscalls.push(masked_eperm("unshare", 0, CLONE_NEWTIME, CLONE_NEWTIME));
    // mknod(path, mode, dev): mode is argument 1; mknodat(dirfd, path, mode, dev): argument 2.
    for (name, index) in [("mknod", 1), ("mknodat", 2)] {
        for kind in [S_IFBLK, S_IFCHR] {
            syscalls.push(masked_eperm(name, index, S_IFMT, kind));
        }
    }
    let mut clone3 = Map::with_capacity(3);
    clone3.insert("names".into(), Value::Array(vec![Value::from("clone3")]));
    clone3.insert("action".into(), Value::from("SCMP_ACT_TRACE"));
    clone3.insert("errnoRet".into(), Value::from(ENOSYS));
    syscalls.push(Value::Object(clone3));
    syscalls
}

/// The profile for a deny list, as OCI `linux.seccomp` JSON: the policy's rules, everything
/// else allowed.
pub(crate) fn default_profile(deny: &[String]) -> Value {
    let mut profile = Map::with_capacity(3);
    profile.insert("defaultAction".into(), Value::from("SCMP_ACT_ALLOW"));
    profile.insert(
        "architectures".into(),
        Value::Array(
            [
                "SCMP_ARCH_X86_64",
                "SCMP_ARCH_X86",
                "SCMP_ARCH_X32",
                "SCMP_ARCH_AARCH64",
            ]
            .into_iter()
            .map(Value::from)
            .collect(),
        ),
    );
    profile.insert("syscalls".into(), Value::Array(policy_rules(deny)));
    Value::Object(profile)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules_for<'a>(rules: &'a [Value], name: &str) -> Vec<&'a Value> {
        rules
            .iter()
            .filter(|r| r["names"].as_array().unwrap().iter().any(|n| n == name))
            .collect()
    }

    #[test]
    fn profile_has_deny_list_namespace_device_and_clone3_rules() {
        let p = default_profile(&["keyctl".to_string(), "bpf".to_string()]);
        assert_eq!(p["defaultAction"], "SCMP_ACT_ALLOW");
        let rules = p["syscalls"].as_array().unwrap();
        assert_eq!(rules[0]["names"], json!(["keyctl", "bpf"]));
        assert_eq!(rules[0]["errnoRet"], 1);
        assert_eq!(rules[1]["names"], json!(["unshare"]));
        assert_eq!(
            rules.last().unwrap(),
            &json!({"names": ["clone3"], "action": "SCMP_ACT_TRACE", "errnoRet": 38})
        );
    }

    #[test]
    fn every_namespace_flag_is_refused_in_unshare_and_clone() {
        let p = default_profile(&[]);
        let rules = p["syscalls"].as_array().unwrap();
        for (name, extra) in [("unshare", 1), ("clone", 0)] {
            let found = rules_for(rules, name);
            assert_eq!(found.len(), NAMESPACE_FLAGS.len() + extra, "{name}");
            for (flag_name, flag) in NAMESPACE_FLAGS {
                assert!(
                    found.iter().any(|r| r["args"][0]
                        == json!({"index": 0, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"})
                        && r["action"] == "SCMP_ACT_ERRNO"),
                    "{name} {flag_name}"
                );
            }
        }
        // The user-namespace rule the README and the runsc test rely on.
        assert!(rules_for(rules, "unshare").iter().any(
            |r| r["args"][0]["value"] == 0x1000_0000 && r["args"][0]["valueTwo"] == 0x1000_0000
        ));
        assert!(rules_for(rules, "clone")
            .iter()
            .all(|r| r["args"][0]["value"] != CLONE_NEWTIME));
    }

    #[test]
    fn block_and_character_nodes_are_refused_on_the_mode_argument() {
        let p = default_profile(&[]);
        let rules = p["syscalls"].as_array().unwrap();
        for (name, index) in [("mknod", 1), ("mknodat", 2)] {
            let found = rules_for(rules, name);
            let kinds: Vec<_> = found
                .iter()
                .map(|r| {
                    assert_eq!(r["args"][0]["index"], index, "{name}");
                    assert_eq!(r["args"][0]["value"], S_IFMT, "{name}");
                    r["args"][0]["valueTwo"].as_u64().unwrap()
                })
                .collect();
            assert_eq!(kinds, [S_IFBLK, S_IFCHR], "{name}");
        }
    }

    #[test]
    fn the_mode_rules_leave_fifos_sockets_and_regular_files_alone() {
        // (mode & S_IFMT) == kind is what the kernel filter evaluates.
        let refused = |mode: u64| [S_IFBLK, S_IFCHR].contains(&(mode & S_IFMT));
        assert!(refused(0o060_600) && refused(0o020_666));
        for allowed in [
            0o010_644, /* fifo */
            0o140_755, /* socket */
            0o100_644, 0o644,
        ] {
            assert!(!refused(allowed), "{allowed:o}");
        }
    }
}
