//! The default seccomp profile: allow everything except a deny list answered with EPERM, user
//! namespace creation through unshare/clone (EPERM), and clone3 answered with ENOSYS.
//!
//! clone3 passes its flags in a struct in memory, which seccomp cannot read, so it cannot be
//! filtered for CLONE_NEWUSER; ENOSYS (not EPERM) makes libc fall back to clone, whose flags
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

use serde_json::{json, Map, Value};

const CLONE_NEWUSER: u64 = 0x1000_0000;
const EPERM: u64 = 1;
const ENOSYS: u64 = 38;

/// The profile for a deny list, as OCI `linux.seccomp` JSON.
pub(crate) fn default_profile(deny: &[String]) -> Value {
    let mut syscalls = Vec::with_capacity(4);
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
    // unshare(flags): flags is argument 0. clone's flags are argument 0 on x86_64 and aarch64.
    // MASKED_EQ: (arg & value) == valueTwo.
    for name in ["unshare", "clone"] {
        syscalls.push(json!({
            "names": [name],
            "action": "SCMP_ACT_ERRNO",
            "errnoRet": EPERM,
            "args": [{
                "index": 0,
                "value": CLONE_NEWUSER,
                "valueTwo": CLONE_NEWUSER,
                "op": "SCMP_CMP_MASKED_EQ"
            }]
        }));
    }
    syscalls.push(json!({
        "names": ["clone3"],
        "action": "SCMP_ACT_TRACE",
        "errnoRet": ENOSYS
    }));
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": [
            "SCMP_ARCH_X86_64",
            "SCMP_ARCH_X86",
            "SCMP_ARCH_X32",
            "SCMP_ARCH_AARCH64"
        ],
        "syscalls": syscalls
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_has_deny_list_user_namespace_rules_and_clone3() {
        let p = default_profile(&["keyctl".to_string(), "bpf".to_string()]);
        assert_eq!(p["defaultAction"], "SCMP_ACT_ALLOW");
        let rules = p["syscalls"].as_array().unwrap();
        assert_eq!(rules[0]["names"], json!(["keyctl", "bpf"]));
        assert_eq!(rules[0]["errnoRet"], 1);
        assert_eq!(rules[1]["names"], json!(["unshare"]));
        assert_eq!(rules[1]["args"][0]["value"], 0x1000_0000);
        assert_eq!(rules[1]["args"][0]["valueTwo"], 0x1000_0000);
        assert_eq!(rules[2]["names"], json!(["clone"]));
        assert_eq!(
            rules[3],
            json!({"names": ["clone3"], "action": "SCMP_ACT_TRACE", "errnoRet": 38})
        );
    }
}
