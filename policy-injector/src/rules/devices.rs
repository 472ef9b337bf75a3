//! Devices: `linux.devices` entries beyond the standard character devices are rejected (they
//! are host device nodes handed to the container). In the device cgroup, an allow rule for every
//! device (what privileged containers get) is rejected, and an allow rule for one specific
//! non-standard device is removed: containerd's own default (`WithDefaultUnixDevices`, used by
//! `ctr run`) allows /dev/net/tun, and gVisor emulates /dev anyway, so dropping the rule is a
//! tightening that keeps ordinary containers running.

use serde_json::Value;

use super::Pass;
use crate::decision::{Action, Rule};
use crate::error::HardenError;
use crate::json::{self, Object};

/// (path, major, minor) of the standard character devices. pts is handled by major number.
const STANDARD: &[(&str, i64, i64)] = &[
    ("/dev/null", 1, 3),
    ("/dev/zero", 1, 5),
    ("/dev/full", 1, 7),
    ("/dev/random", 1, 8),
    ("/dev/urandom", 1, 9),
    ("/dev/tty", 5, 0),
    ("/dev/console", 5, 1),
    ("/dev/ptmx", 5, 2),
];

/// Unix98 pseudo-terminal slaves use majors 136..=143.
fn is_pts_major(major: i64) -> bool {
    (136..=143).contains(&major)
}

fn standard_numbers(major: i64, minor: Option<i64>) -> bool {
    is_pts_major(major)
        || minor.is_some_and(|m| STANDARD.iter().any(|&(_, a, b)| a == major && b == m))
}

pub(crate) fn apply(spec: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    if !pass.policy.devices.reject_extra {
        return Ok(());
    }
    let Some(linux) = json::opt_object_mut(spec, "linux", "")? else {
        return Ok(());
    };
    nodes(linux, pass)?;
    cgroup_rules(linux, pass)
}

fn nodes(linux: &Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(devices) = json::opt_array(linux, "devices", "linux")? else {
        return Ok(());
    };
    for (i, d) in devices.iter().enumerate() {
        let field = format!("linux.devices[{i}]");
        let obj = d
            .as_object()
            .ok_or_else(|| HardenError::malformed(&field, "expected an object"))?;
        let path = json::opt_str(obj, "path", &field)?.unwrap_or("");
        let kind = json::opt_str(obj, "type", &field)?.unwrap_or("");
        let major = json::opt_i64(obj, "major", &field)?.unwrap_or(-1);
        let minor = json::opt_i64(obj, "minor", &field)?.unwrap_or(-1);
        let standard = kind == "c"
            && (STANDARD
                .iter()
                .any(|&(p, a, b)| p == path && a == major && b == minor)
                || (path.starts_with("/dev/pts/") && is_pts_major(major)));
        if !standard {
            let what = format!("device {path} ({kind} {major}:{minor}) is not one of the standard character devices");
            let reason = if pass.asks_privileged {
                format!("a privileged container (--privileged, securityContext.privileged) is refused: it asks for the host's devices and every capability; {what}")
            } else {
                what
            };
            pass.reject(Rule::Devices, format!("linux.devices[{path}]"), reason);
        }
    }
    Ok(())
}

fn cgroup_rules(linux: &mut Object, pass: &mut Pass<'_>) -> Result<(), HardenError> {
    let Some(resources) = json::opt_object_mut(linux, "resources", "linux")? else {
        return Ok(());
    };
    let path = "linux.resources.devices";
    let Some(rules) = json::opt_array_mut(resources, "devices", "linux.resources")? else {
        return Ok(());
    };
    let mut keep = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let field = format!("{path}[{i}]");
        let obj = r
            .as_object()
            .ok_or_else(|| HardenError::malformed(&field, "expected an object"))?;
        let allow = json::opt_bool(obj, "allow", &field)?.unwrap_or(false);
        if !allow {
            keep.push(true);
            continue;
        }
        let kind = json::opt_str(obj, "type", &field)?.unwrap_or("a");
        let major = json::opt_i64(obj, "major", &field)?.filter(|m| *m >= 0);
        let minor = json::opt_i64(obj, "minor", &field)?.filter(|m| *m >= 0);
        let access = json::opt_str(obj, "access", &field)?.unwrap_or("rwm");
        let desc = format!(
            "{kind} {}:{} {access}",
            major.map_or("*".to_string(), |m| m.to_string()),
            minor.map_or("*".to_string(), |m| m.to_string())
        );
        if kind == "a" || major.is_none() {
            pass.reject(
                Rule::Devices,
                field,
                format!("device cgroup rule \"{desc}\" allows whole classes of host devices"),
            );
            keep.push(true);
        } else if kind == "c" && major.is_some_and(|m| standard_numbers(m, minor)) {
            keep.push(true);
        } else {
            pass.record(
                Rule::Devices,
                field,
                Action::Removed,
                Some(r.clone()),
                None,
                format!("device cgroup rule \"{desc}\" allows a non-standard device"),
            );
            keep.push(false);
        }
    }
    let mut it = keep.into_iter();
    rules.retain(|_: &Value| it.next().unwrap_or(true));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::decision::{Action, Rule};
    use serde_json::json;

    #[test]
    fn standard_devices_pass() {
        let mut spec = base_spec();
        spec["linux"]["devices"] = json!([
            {"path": "/dev/null", "type": "c", "major": 1, "minor": 3},
            {"path": "/dev/pts/0", "type": "c", "major": 136, "minor": 0}
        ]);
        spec["linux"]["resources"] = json!({"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 1, "minor": 3, "access": "rwm"},
            {"allow": true, "type": "c", "major": 136, "access": "rwm"}
        ]});
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["linux"]["resources"]["devices"],
            spec["linux"]["resources"]["devices"]
        );
    }

    #[test]
    fn a_privileged_containers_refusal_says_privileged() {
        let mut spec = base_spec();
        spec["linux"]["devices"] =
            json!([{"path": "/dev/btrfs-control", "type": "c", "major": 10, "minor": 234}]);
        spec["process"]["capabilities"]["bounding"] = json!(["CAP_CHOWN", "CAP_SYS_ADMIN"]);
        let r = rejections(&spec);
        assert_eq!(r[0].rule, Rule::Devices);
        assert!(r[0].reason.starts_with("a privileged container"), "{r:?}");
        // The same device without CAP_SYS_ADMIN asked for: a device, not a privileged container.
        spec["process"]["capabilities"]["bounding"] = json!(["CAP_CHOWN"]);
        assert!(rejections(&spec)[0]
            .reason
            .starts_with("device /dev/btrfs-control"));
    }

    #[test]
    fn host_block_device_is_rejected() {
        let mut spec = base_spec();
        spec["linux"]["devices"] =
            json!([{"path": "/dev/sda", "type": "b", "major": 8, "minor": 0}]);
        let r = rejections(&spec);
        assert_eq!(
            (r[0].rule, r[0].field.as_str()),
            (Rule::Devices, "linux.devices[/dev/sda]")
        );
    }

    #[test]
    fn standard_path_with_wrong_numbers_is_rejected() {
        let mut spec = base_spec();
        spec["linux"]["devices"] =
            json!([{"path": "/dev/null", "type": "c", "major": 1, "minor": 1}]);
        assert_eq!(rejections(&spec)[0].field, "linux.devices[/dev/null]");
    }

    #[test]
    fn allow_all_devices_rule_is_rejected() {
        for rule in [
            json!({"allow": true, "access": "rwm"}),
            json!({"allow": true, "type": "b", "access": "m"}),
        ] {
            let mut spec = base_spec();
            spec["linux"]["resources"] = json!({"devices": [rule]});
            assert_eq!(rejections(&spec)[0].rule, Rule::Devices);
        }
    }

    #[test]
    fn specific_extra_device_rule_is_removed() {
        let mut spec = base_spec();
        spec["linux"]["resources"] = json!({"devices": [
            {"allow": false, "access": "rwm"},
            {"allow": true, "type": "c", "major": 10, "minor": 200, "access": "rwm"}
        ]});
        let h = harden_ok(&spec);
        assert_eq!(
            h.spec["linux"]["resources"]["devices"],
            json!([{"allow": false, "access": "rwm"}])
        );
        assert_eq!(count(&h, Rule::Devices, Action::Removed), 1);
    }
}
