//! Shared by the integration tests: the policy's invariants, checked on a hardened spec.

#![allow(dead_code)]

use serde_json::Value;

use policy_injector::Policy;

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn normalize(p: &str) -> String {
    let segs: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    format!("/{}", segs.join("/"))
}

/// Checks that the process object satisfies the process rules of `policy`.
pub fn check_process(p: &Value, policy: &Policy) -> Result<(), String> {
    if let Some(caps) = p.get("capabilities") {
        for set in ["bounding", "effective", "inheritable", "permitted"] {
            for c in strs(&caps[set]) {
                if !policy.capabilities.allow.iter().any(|a| a == c) {
                    return Err(format!("{set} keeps {c}"));
                }
            }
        }
        if !strs(&caps["ambient"]).is_empty() {
            return Err("ambient not empty".into());
        }
    }
    if policy.privileges.no_new_privileges && p["noNewPrivileges"] != true {
        return Err("noNewPrivileges not set".into());
    }
    let uid = p["user"]["uid"].as_u64().ok_or("no uid")?;
    let gid = p["user"]["gid"].as_u64().ok_or("no gid")?;
    if uid == 0 || gid == 0 {
        return Err(format!("runs as {uid}:{gid}"));
    }
    if let Some(g) = p["user"]["additionalGids"].as_array() {
        if g.iter().any(|x| x == 0) {
            return Err("additionalGids has 0".into());
        }
    }
    let rl = p["rlimits"].as_array().ok_or("no rlimits")?;
    for (kind, ceiling) in [
        ("RLIMIT_NOFILE", policy.rlimits.nofile),
        ("RLIMIT_FSIZE", policy.rlimits.fsize.0),
        ("RLIMIT_CORE", policy.rlimits.core.0),
    ] {
        let e = rl
            .iter()
            .find(|r| r["type"] == kind)
            .ok_or(format!("{kind} missing"))?;
        let (h, s) = (e["hard"].as_u64().unwrap(), e["soft"].as_u64().unwrap());
        if h > ceiling || s > h {
            return Err(format!("{kind} {s}/{h} above {ceiling}"));
        }
    }
    if rl.iter().any(|r| r["type"] == "RLIMIT_NPROC") {
        return Err("RLIMIT_NPROC kept".into());
    }
    if p.get("selinuxLabel")
        .and_then(Value::as_str)
        .is_some_and(|l| !l.is_empty())
    {
        return Err("selinuxLabel kept".into());
    }
    Ok(())
}

/// Checks every invariant the default-style policy promises on a hardened spec.
pub fn check_spec(spec: &Value, policy: &Policy) -> Result<(), String> {
    check_process(&spec["process"], policy)?;
    if policy.root.readonly && spec["root"]["readonly"] != true {
        return Err("root not read-only".into());
    }
    let mounts = spec["mounts"].as_array().ok_or("no mounts")?;
    let mut seen = Vec::new();
    for m in mounts {
        let dest = m["destination"].as_str().ok_or("no destination")?;
        if dest != normalize(dest) || dest == "/" {
            return Err(format!("destination {dest}"));
        }
        if seen.contains(&dest) {
            return Err(format!("duplicate {dest}"));
        }
        seen.push(dest);
        let opts = strs(&m["options"]);
        if !opts.contains(&"nosuid")
            || !opts.contains(&"nodev")
            || opts.contains(&"suid")
            || opts.contains(&"dev")
        {
            return Err(format!("{dest} options {opts:?}"));
        }
        if policy
            .mounts
            .credential_destinations
            .iter()
            .any(|c| dest == c || dest.starts_with(&format!("{c}/")))
        {
            return Err(format!("credential mount {dest} kept"));
        }
        let is_bind = m["type"] == "bind" || opts.iter().any(|o| *o == "bind" || *o == "rbind");
        if is_bind {
            let src = m["source"].as_str().unwrap_or("");
            let writable_ok = src.contains("/volumes/kubernetes.io~empty-dir/");
            if !writable_ok && (!opts.contains(&"ro") || opts.contains(&"rw")) {
                return Err(format!("bind {src} -> {dest} writable"));
            }
            for denied in [
                "/etc",
                "/proc",
                "/sys",
                "/dev",
                "/root",
                "/home",
                "/run/containerd",
            ] {
                let n = normalize(src);
                if n == denied || n.starts_with(&format!("{denied}/")) {
                    return Err(format!("denied source {src}"));
                }
            }
            if normalize(src) == "/" || src.ends_with("docker.sock") {
                return Err(format!("denied source {src}"));
            }
        }
    }
    for t in &policy.scratch.tmpfs {
        let m = mounts
            .iter()
            .find(|m| m["destination"] == t.path.as_str())
            .ok_or(format!("scratch {} missing", t.path))?;
        if m["type"] != "tmpfs"
            || !strs(&m["options"]).contains(&format!("size={}", t.size.0).as_str())
        {
            return Err(format!("scratch {} wrong: {m}", t.path));
        }
    }
    for m in mounts.iter().filter(|m| m["type"] == "tmpfs") {
        let opts = strs(&m["options"]);
        if opts.contains(&"ro") {
            continue;
        }
        let sizes: Vec<&str> = opts
            .iter()
            .filter(|o| o.starts_with("size="))
            .copied()
            .collect();
        let cap = policy
            .scratch
            .tmpfs
            .iter()
            .map(|t| t.size.0)
            .chain([policy.scratch.max_tmpfs.0])
            .max()
            .unwrap_or(0);
        // size= as the kernel reads it (the engines write `size=65536k` for /dev).
        let bytes = |v: &str| -> Option<u64> {
            let (n, unit) = match v.char_indices().last()? {
                (i, 'k') => (&v[..i], 1u64 << 10),
                (i, 'm') => (&v[..i], 1 << 20),
                (i, 'g') => (&v[..i], 1 << 30),
                _ => (v, 1),
            };
            n.parse::<u64>().ok()?.checked_mul(unit)
        };
        let bounded = matches!(sizes.as_slice(), [s] if bytes(&s[5..]).is_some_and(|b| b <= cap));
        if !bounded || opts.iter().any(|o| o.starts_with("nr_blocks=")) {
            return Err(format!("unbounded writable tmpfs: {m}"));
        }
    }
    let linux = &spec["linux"];
    let ns = linux["namespaces"].as_array().ok_or("no namespaces")?;
    for kind in &policy.namespaces.reject_host {
        if !ns.iter().any(|n| n["type"] == kind.as_str()) {
            return Err(format!("host {kind} namespace"));
        }
    }
    let res = &linux["resources"];
    let ceiling = policy.resources.memory.0 as i64;
    let limit = res["memory"]["limit"].as_i64().ok_or("no memory limit")?;
    if limit <= 0 || limit > ceiling || res["memory"]["swap"].as_i64() != Some(limit) {
        return Err(format!("memory {}", res["memory"]));
    }
    if let Some(r) = res["memory"]["reservation"].as_i64() {
        if r > limit {
            return Err("reservation above limit".into());
        }
    }
    let period = res["cpu"]["period"].as_i64().ok_or("no period")?;
    let quota = res["cpu"]["quota"].as_i64().ok_or("no quota")?;
    if !(1000..=1_000_000).contains(&period)
        || quota <= 0
        || quota as i128 > policy.resources.cpu.0 as i128 * period as i128 / 1000
    {
        return Err(format!("cpu {}", res["cpu"]));
    }
    let budget: u64 = spec["annotations"]["gvisor-hardened.dev/pids"]
        .as_str()
        .ok_or("no pids annotation")?
        .parse()
        .map_err(|_| "bad pids annotation")?;
    if budget == 0 || budget > policy.resources.processes {
        return Err(format!("budget {budget}"));
    }
    let expect = policy.resources.pids_base + policy.resources.pids_per_process * budget;
    if res["pids"]["limit"].as_u64() != Some(expect) {
        return Err(format!("pids {} != {expect}", res["pids"]));
    }
    if let Some(u) = res["unified"].as_object() {
        if u.keys()
            .any(|k| k.starts_with("memory.") || k.starts_with("pids.") || k.starts_with("cpu."))
        {
            return Err("unified limits kept".into());
        }
    }
    if policy.seccomp.inject_default && linux["seccomp"].is_null() {
        return Err("no seccomp".into());
    }
    // Whatever profile the spec brought, the policy's deny rule comes first (runsc applies the
    // first matching rule).
    if policy.seccomp.inject_default && !policy.seccomp.deny.is_empty() {
        let first = &linux["seccomp"]["syscalls"][0];
        if first["names"] != serde_json::json!(policy.seccomp.deny)
            || first["action"] != "SCMP_ACT_ERRNO"
        {
            return Err(format!(
                "seccomp does not start with the deny rule: {first}"
            ));
        }
    }
    if let Some(a) = spec["annotations"].as_object() {
        if a.keys().any(|k| k.starts_with("dev.gvisor.")) {
            return Err("dev.gvisor annotation kept".into());
        }
    }
    if let Some(h) = spec["hooks"].as_object() {
        if h.values()
            .any(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        {
            return Err("hooks kept".into());
        }
    }
    if let Some(s) = linux["sysctl"].as_object() {
        if let Some(k) = s.keys().find(|k| !policy.sysctls.allow.contains(k)) {
            return Err(format!("sysctl {k} kept"));
        }
    }
    Ok(())
}
