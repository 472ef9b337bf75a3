//! sysctls: entries outside the policy's safe allowlist are rejected. Under gVisor most sysctls
//! are emulated, but a namespaced-looking sysctl is the classic way to escape a runc container,
//! and an unknown one would fail the sandbox later with a worse error.

use super::Pass;
use crate::decision::Rule;
use crate::error::HardenError;
use crate::json::{self, Object};

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(linux) = json::opt_object(spec, "linux", "")? else {
        return Ok(());
    };
    let Some(sysctl) = json::opt_object(linux, "sysctl", "linux")? else {
        return Ok(());
    };
    let mut refused = Vec::new();
    for (name, value) in sysctl {
        if !value.is_string() {
            return Err(HardenError::malformed(
                format!("linux.sysctl.{name}"),
                "expected a string",
            ));
        }
        // Kubernetes accepts "/" as the separator too (net/ipv4/tcp_syncookies).
        let normal = name.replace('/', ".");
        if !pass
            .policy
            .sysctls
            .allow
            .iter()
            .any(|a| a.replace('/', ".") == normal)
        {
            refused.push(name.clone());
        }
    }
    for name in refused {
        pass.reject(
            Rule::Sysctls,
            format!("linux.sysctl.{name}"),
            format!("sysctl {name} is not on the policy's safe list"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::Rule;
    use serde_json::json;

    #[test]
    fn safe_sysctls_pass() {
        let mut spec = base_spec();
        spec["linux"]["sysctl"] =
            json!({"net.ipv4.ip_unprivileged_port_start": "0", "net/ipv4/tcp_syncookies": "1"});
        let h = harden_ok(&spec);
        assert_eq!(h.spec["linux"]["sysctl"], spec["linux"]["sysctl"]);
    }

    #[test]
    fn unsafe_sysctls_are_rejected_each() {
        let mut spec = base_spec();
        spec["linux"]["sysctl"] = json!({"kernel.core_pattern": "|/evil", "net.ipv4.ip_forward": "1", "kernel.shm_rmid_forced": "1"});
        let r = rejections(&spec);
        let fields: Vec<&str> = r
            .iter()
            .filter(|r| r.rule == Rule::Sysctls)
            .map(|r| r.field.as_str())
            .collect();
        assert_eq!(
            fields,
            [
                "linux.sysctl.kernel.core_pattern",
                "linux.sysctl.net.ipv4.ip_forward"
            ]
        );
    }

    #[test]
    fn non_string_sysctl_value_is_malformed() {
        let mut spec = base_spec();
        spec["linux"]["sysctl"] = json!({"kernel.shm_rmid_forced": 1});
        assert!(matches!(
            harden_err(&spec),
            crate::HardenError::Malformed { .. }
        ));
    }
}
